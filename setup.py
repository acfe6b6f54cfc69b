"""Builds cdclake's compiled hot paths (Cython, see ``cdclake.native``); everything else is in
pyproject.toml. Without a working C compiler the build goes on without them: cdclake then
runs its pure-Python reference and says so once at run time."""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SRC = Path(__file__).parent / "src"

#: Python modules compiled as themselves (Cython's pure-Python mode, see ``cdclake.native``):
#: ``x.py`` is built as ``_x``, with the C types of ``_x.pxd`` (its annotations are for
#: mypy), and keeps Python's semantics (negative indices, bounds checks)
PURE_PYTHON_MODE = ("cdclake/catalog/versions.py", "cdclake/decoding/changes.py",
                    "cdclake/decoding/commit.py", "cdclake/decoding/filter.py",
                    "cdclake/decoding/heapdecode.py",
                    "cdclake/decoding/parallel.py", "cdclake/decoding/queueing.py",
                    "cdclake/decoding/reassembly.py", "cdclake/decoding/reorder.py",
                    "cdclake/decoding/rmgrs.py", "cdclake/decoding/spill.py",
                    "cdclake/decoding/stripes.py",
                    "cdclake/decoding/plugins/arrow.py",
                    "cdclake/decoding/plugins/test_decoding.py",
                    "cdclake/spark/facts.py", "cdclake/tuples/julian.py",
                    "cdclake/tuples/arrays.py", "cdclake/tuples/datetimes.py",
                    "cdclake/tuples/heap.py",
                    "cdclake/tuples/floats.py", "cdclake/tuples/ints.py",
                    "cdclake/tuples/jsonb.py", "cdclake/tuples/numeric.py",
                    "cdclake/waldump.py",
                    "cdclake/wal/reader.py", "cdclake/wal/rmgr/heap.py",
                    "cdclake/wal/rmgr/heap2.py", "cdclake/wal/rmgr/xact.py")


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing when an extension cannot be compiled."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, no Python headers, ...
            self._skip(exc)

    def build_extension(self, ext) -> None:  # type: ignore[no-untyped-def]
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._skip(exc)

    @staticmethod
    def _skip(exc: Exception) -> None:
        print(f"cdclake: compiled hot path not built ({exc}); pure Python will be used",
              file=sys.stderr)


def extensions() -> list:  # type: ignore[type-arg]
    try:
        from Cython.Build import cythonize
    except ImportError as exc:  # a build without build isolation and without Cython
        OptionalBuildExt._skip(exc)
        return []

    sources = sorted(str(p.relative_to(SRC.parent)) for p in SRC.glob("cdclake/**/_*.pyx"))
    # always generated again: Cython's staleness check of x.py does not know _x.pxd
    pure = [Extension(_compiled_name(module), [f"src/{module}"]) for module in PURE_PYTHON_MODE]
    return [*cythonize(sources, language_level=3, quiet=True,
                       compiler_directives={"boundscheck": False, "wraparound": False,
                                            "cdivision": True}),
            *cythonize(pure, language_level=3, quiet=True, force=True,
                       compiler_directives={"annotation_typing": False})]


def _compiled_name(module: str) -> str:
    """``cdclake/x/y.py`` -> ``cdclake.x._y``."""
    package, _, name = module.removesuffix(".py").rpartition("/")
    return f"{package.replace('/', '.')}._{name}"


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
