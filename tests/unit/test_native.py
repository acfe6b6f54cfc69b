"""The compiled twins of the hot paths (cdclake.native): built by the install, switchable to
their Python reference, and a build or an import without them degrades to Python with one
line. That both give the same results is what every wal, tuples and decoding suite checks: they
run once per implementation (the ``implementation`` fixture)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import cdclake.decoding.filter  # noqa: F401 - registers its twin
from cdclake import native, waldump  # noqa: F401 - waldump registers its twins
from cdclake.decoding import (  # noqa: F401 - they register twins
    decode,
    parallel,
    reassembly,
    reorder,
    rmgrs,
    spill,
)
from cdclake.decoding.plugins import arrow, test_decoding  # noqa: F401 - register twins
from cdclake.spark import segments  # noqa: F401 - registers its twin
from cdclake.sparkenv import shipping
from cdclake.tuples import heap
from cdclake.wal import reader

ROOT = Path(__file__).resolve().parents[2]


#: every twin; the modules that bind them are imported above (and by ``_import_from_zip``)
TWINS = {"cdclake.tuples.heap.deform",
         "cdclake.wal.reader.walk",
         "cdclake.wal.rmgr.xact.finish_fields",
         "cdclake.wal.rmgr.heap.tuple_at", "cdclake.wal.rmgr.heap.insert_fields",
         "cdclake.wal.rmgr.heap.delete_fields", "cdclake.wal.rmgr.heap.update_fields",
         "cdclake.wal.rmgr.heap2.multi_fields", "cdclake.wal.rmgr.heap2.multi_tuples",
         "cdclake.decoding.decode.Decoder._heap",
         "cdclake.decoding.decode.Decoder._heap2",
         "cdclake.decoding.decode.Decoder._xact",
         "cdclake.decoding.decode.Decoder.process",
         "cdclake.decoding.parallel._Framer.write",
         "cdclake.decoding.filter.Filter.drop_locator",
         "cdclake.decoding.reassembly.Replayer.replay",
         "cdclake.decoding.reorder.ReorderBuffer.txn",
         "cdclake.decoding.reorder.ReorderBuffer.queue",
         "cdclake.decoding.reorder.ReorderBuffer.members",
         "cdclake.decoding.reorder.ReorderBuffer.discard",
         "cdclake.decoding.stripes.shares_of",
         "cdclake.decoding.rmgrs.decodable",
         "cdclake.decoding.spill.encode_runs",
         "cdclake.decoding.spill.decode_entries",
         "cdclake.decoding.spill.encode_change",
         "cdclake.spark.facts.collector",
         "cdclake.decoding.plugins.test_decoding.TestDecoding.change",
         "cdclake.decoding.plugins.test_decoding.TestDecoding.begin",
         "cdclake.decoding.plugins.test_decoding.TestDecoding.commit",
         "cdclake.decoding.plugins.arrow.ArrowRows.change",
         "cdclake.decoding.plugins.arrow.ArrowRows.rewrite",
         "cdclake.decoding.plugins.arrow.ArrowRows.truncate",
         "cdclake.decoding.plugins.arrow.ArrowRows._buffer",
         "cdclake.decoding.plugins.arrow.ArrowRows._flush",
         "cdclake.tuples.numeric.text",
         "cdclake.tuples.numeric.decimal",
         "cdclake.tuples.jsonb.text",
         "cdclake.tuples.arrays.text",
         "cdclake.tuples.arrays.parse",
         "cdclake.tuples.datetimes.date_text",
         "cdclake.tuples.datetimes.timestamp_text",
         "cdclake.tuples.datetimes.timestamptz_text",
         "cdclake.tuples.datetimes.interval_text",
         "cdclake.tuples.floats.float8_datum_text",
         "cdclake.waldump.describe",
         "cdclake.waldump.record_json_line"}


def test_the_install_built_the_twins() -> None:
    # `make test` installs with pip, which compiles them with gcc: missing ones are a defect
    assert set(native.twins()) == TWINS
    assert type(heap.deform).__name__ == "cython_function_or_method"


def test_the_compiled_reader_checks_crcs_through_the_crc32c_packages_own_step() -> None:
    """The step ``crc32c.crc32c`` runs, called through its pointer (it agreed with
    ``crc32c.crc32c`` at import on every length up to 300 bytes); a flipped bit is still a CRC
    error in the record's header and in its body (``test_bad_input``, both readers)."""
    from cdclake.wal import _primitives

    assert _primitives.fast_crc()


def test_use_python_switches_every_twin_and_back() -> None:
    compiled = heap.deform, reader.walk, reorder.ReorderBuffer.txn
    with native.use_python():
        assert heap.deform.__module__ == "cdclake.tuples.heap"
        assert type(heap.deform).__name__ == "function"
        assert type(reader.walk).__name__ == "function"
        assert type(reorder.ReorderBuffer.txn).__name__ == "function"  # a method too
    assert (heap.deform, reader.walk, reorder.ReorderBuffer.txn) == compiled


def test_the_environment_asks_for_pure_python() -> None:
    code = "from cdclake.tuples import heap; print(type(heap.deform).__name__)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, native.PURE_ENV: "1"}, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "function" and not out.stderr


def test_a_missing_build_is_one_warning_line(caplog: pytest.LogCaptureFixture,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    monkeypatch.setattr(native, "_missing", [])

    def python_only(x: int) -> int:
        return x

    with caplog.at_level(logging.WARNING, logger="cdclake.native"):
        assert native.twin(python_only, "cdclake.tuples._not_built") is python_only
        assert native.twin(python_only, "cdclake.wal._not_built_either") is python_only
    (record,) = caplog.records
    assert "not built" in record.getMessage() and "\n" not in record.getMessage()


def test_a_build_without_a_compiler_installs_without_the_twins(tmp_path: Path) -> None:
    """setup.py with a compiler that fails: the build succeeds, says so on one line, and
    leaves no extension behind."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("*.so", "*.c",
                                                                    "__pycache__"))
    shutil.copy(ROOT / "setup.py", tmp_path)
    out = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                         cwd=tmp_path, env={**os.environ, "CC": "false", "LDSHARED": "false"},
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "compiled hot path not built" in out.stderr
    assert not list(src.rglob("*.so"))


def _import_from_zip(zip_path: Path) -> dict[str, object]:
    """What a Python that imports cdclake from ``zip_path`` (as a Spark executor does) binds."""
    code = (f"import json, sys; sys.path.insert(0, {str(zip_path)!r}); import cdclake\n"
            "from cdclake import native, waldump\n"
            "from cdclake.decoding import decode, parallel, reassembly, rmgrs, spill\n"
            "from cdclake.decoding.plugins import arrow, test_decoding\n"
            "from cdclake.spark import segments\n"
            "from cdclake.tuples import heap\n"
            "from cdclake.wal import reader\n"
            "print(json.dumps({'file': cdclake.__file__, 'twins': native.twins(),\n"
            "                  'active': native.active(), 'deform': heap.deform.__module__}))")
    out = subprocess.run([sys.executable, "-c", code], env={
        k: v for k, v in os.environ.items() if k != native.PURE_ENV},
        capture_output=True, text=True, check=True)
    return {**json.loads(out.stdout), "stderr": out.stderr}


def test_cdclake_imported_from_its_zip_runs_the_compiled_twins(tmp_path: Path) -> None:
    """The zip executors are sent carries the extensions; they are copied out beside it and
    loaded from there, by every process that starts (the second finds them copied)."""
    archive = shipping.package_zip(tmp_path)
    for _ in range(2):
        got = _import_from_zip(archive)
        assert str(got["file"]).startswith(str(archive))  # not the installed package
        assert got["active"] is True and got["deform"] == "cdclake.tuples._heap"
        assert set(got["twins"]) == TWINS  # type: ignore[call-overload]
        assert not got["stderr"]
    assert list((tmp_path / f"{archive.name}.native").rglob("_heap.*.so"))


def test_an_extension_this_python_cannot_load_falls_back_to_python(tmp_path: Path) -> None:
    """A zip whose build of a twin is for another platform (here: not a shared object at
    all): that twin stays Python, with the one warning line, and the others load."""
    archive = shipping.package_zip(tmp_path)
    broken = tmp_path / "broken.zip"
    with zipfile.ZipFile(archive) as src, zipfile.ZipFile(broken, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if "/_heap." in item.filename:
                data = b"not an ELF object"
            dst.writestr(item, data)
    got = _import_from_zip(broken)
    assert got["active"] is False and got["deform"] == "cdclake.tuples.heap"
    assert "cdclake.tuples.heap.deform" not in got["twins"]  # type: ignore[operator]
    assert "cdclake.wal.reader.walk" in got["twins"]  # type: ignore[operator]
    warning = str(got["stderr"]).strip()
    assert "compiled hot path is not built" in warning and "\n" not in warning


def test_a_module_compiled_as_itself_makes_the_python_modules_objects() -> None:
    """``reorder.py`` is also built as ``_reorder`` (Cython's pure-Python mode): its compiled
    ``txn`` makes the one TXN class everyone else checks against, not a copy of its own."""
    from cdclake.decoding.reorder import ReorderBuffer
    from cdclake.decoding.txn import TXN

    rb = ReorderBuffer(1 << 20, Path("/nonexistent"), 1 << 24)
    assert type(ReorderBuffer.txn).__name__ == "cython_function_or_method"
    assert type(rb.txn(5, 100)) is TXN
