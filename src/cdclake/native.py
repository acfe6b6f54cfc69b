"""Compiled hot paths, and the pure-Python reference they must equal.

The loops the decoder runs per record and per value are compiled by ``pip install`` with gcc
(Cython) from one of two kinds of source:

- a Python module compiled as itself (Cython's pure-Python mode): ``reassembly.py`` is built a
  second time as ``_reassembly``, with the C types of its locals in ``_reassembly.pxd``; the
  code is the Python module's, written once (``setup.py``'s ``PURE_PYTHON_MODE`` lists them);
- a twin written in Cython (``_*.pyx`` beside the Python module it speeds up), for the loops
  that read bytes through C pointers.

:func:`twin` gives a module the compiled version of one of its functions when it was built
and not switched off with ``CDCLAKE_PURE_PYTHON=1``; otherwise the module keeps its Python
function. :func:`bind` makes a class's method the function of a module compiled as itself
(``Decoder.process`` is ``rmgrs.process``), compiled or Python the same way. A build
without a compiler is reported once, on one line, and decoding goes on in Python. Callers
reach a twinned function through its module (``heap.deform``) or class, so
:func:`use_python` can switch every one of them at once: the tests run both implementations.

Spark executors on a cluster import cdclake from the zip the driver ships
(:func:`cdclake.sparkenv.shipping.package_zip`), which holds the compiled modules too. Python cannot
load an extension from inside a zip, so :func:`compiled` copies it out, next to the zip, and
loads it from there: the executors run the same compiled code as a local decode, as long as
their Python and platform are the driver's (else the one warning, and Python).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import logging
import os
import sys
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import TypeVar

log = logging.getLogger(__name__)

#: set to 1 to run the pure-Python reference even where the compiled modules are built
PURE_ENV = "CDCLAKE_PURE_PYTHON"

_missing: list[str] = []

#: ``cython`` for a pure-Python-mode module Python runs where Cython is not installed (it is
#: a build tool): ``cython.compiled`` is then false, as Cython's own shadow module says
NOT_COMPILED = SimpleNamespace(compiled=False)

F = TypeVar("F", bound=Callable[..., object])

#: (module name, function name, Python function, compiled function) of every twin
_twins: list[tuple[str, str, Callable[..., object], Callable[..., object]]] = []


def pure() -> bool:
    """True when the pure-Python reference was asked for."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def compiled(module: str) -> ModuleType | None:
    """The compiled module ``module`` (e.g. ``cdclake.tuples._heap``), or None: pure Python
    was asked for, or the module was not built (then one warning for the process)."""
    if pure():
        return None
    try:
        try:
            return importlib.import_module(module)
        except ImportError:
            archived = _from_archive(module)
            if archived is None:
                raise
            return archived
    except ImportError as exc:
        if not _missing:
            log.warning("cdclake's compiled hot path is not built (%s): it runs in pure "
                        "Python, several times slower; reinstall with gcc (and libpq-dev) "
                        "present", exc)
        _missing.append(module)
        return None


def active() -> bool:
    """True when every twin this process bound is compiled (none fell back to Python)."""
    return bool(_twins) and not _missing and not pure()


def _from_archive(module: str) -> ModuleType | None:
    """``module`` loaded from the zip cdclake (this module with it) was imported from, or None
    when cdclake was not imported from a zip or the zip has no build of it for this interpreter.

    The extension is copied beside the zip (``<zip>.native/``; a Spark executor's files
    directory, its own) under a temporary name and renamed, so Python workers starting side
    by side never load a half-written file. An extension that does not load here (another
    platform's build) raises ImportError.
    """
    archive = getattr(__spec__.loader, "archive", None)  # a zipimporter's: the zip's path
    if archive is None:
        return None
    stem = module.replace(".", "/")
    with zipfile.ZipFile(archive) as zf:
        member = next((stem + s for s in importlib.machinery.EXTENSION_SUFFIXES
                       if stem + s in zf.NameToInfo), None)
        if member is None:
            return None
        path = Path(f"{archive}.native") / member
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_bytes(zf.read(member))
            os.replace(tmp, path)
    loader = importlib.machinery.ExtensionFileLoader(module, str(path))
    spec = importlib.util.spec_from_file_location(module, path, loader=loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module] = mod
    try:
        loader.exec_module(mod)
    except ModuleNotFoundError as exc:
        # an extension that cimports another (``_rmgrs`` the reader's ``Sieve``) imports it
        # by name, which the zip cannot serve: load that one from the zip first, then retry
        sys.modules.pop(module, None)
        if exc.name in sys.modules or not (exc.name or "").startswith("cdclake.") \
                or _from_archive(exc.name or "") is None:
            raise
        return _from_archive(module)
    except BaseException:
        sys.modules.pop(module, None)
        raise
    return mod


def twin(python: F, module: str) -> F:
    """The function to bind as ``python``'s name: its compiled twin (same name, in compiled
    ``module``) if there is one, else ``python`` itself. ``python`` may be a method: its twin
    then takes ``self`` first, like it. In ``module`` itself (the compiled copy of a module
    compiled as itself, running that module's code) it binds nothing: ``python`` stays."""
    if python.__module__ == module:
        return python
    mod = compiled(module)
    if mod is None:
        return python
    fast = getattr(mod, python.__name__)
    _twins.append((python.__module__, python.__qualname__, python, fast))
    return fast  # type: ignore[no-any-return]


def bind(owner: type, name: str, python: Callable[..., object], module: str) -> None:
    """``owner.<name>`` is ``python``, a function of a module compiled as itself that takes
    the instance first, or its compiled twin (same name, in compiled ``module``): a method
    written once, with no frame of its own between the caller and the function."""
    mod = compiled(module)
    fast = python if mod is None else getattr(mod, python.__name__)
    setattr(owner, name, fast)
    if fast is not python:
        _twins.append((owner.__module__, f"{owner.__qualname__}.{name}", python, fast))


def twins() -> list[str]:
    """``module.qualified name`` of every function that has a compiled twin in this process."""
    return [f"{m}.{n}" for m, n, _p, _c in _twins]


def _bind(module: str, qualname: str, fn: Callable[..., object]) -> None:
    owner: object = sys.modules[module]
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    setattr(owner, name, fn)


@contextmanager
def use_python(python: bool = True) -> Iterator[None]:
    """Bind every twinned function to its Python (or compiled) implementation for a while."""
    for module, qualname, py, fast in _twins:
        _bind(module, qualname, py if python else fast)
    try:
        yield
    finally:
        for module, qualname, _py, fast in _twins:
            _bind(module, qualname, fast)
