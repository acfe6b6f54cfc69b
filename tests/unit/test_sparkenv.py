"""Where Spark runs and what executors are sent (cdclake.sparkenv): no Spark started."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

import cdclake
from cdclake import sparkenv
from cdclake.config import Config


def test_the_zip_holds_the_package_and_is_named_by_its_content(tmp_path: Path) -> None:
    first = sparkenv.package_zip(tmp_path)
    assert first == sparkenv.package_zip(tmp_path)  # unchanged code: the same zip, reused
    names = set(zipfile.ZipFile(first).namelist())
    root = Path(cdclake.__file__).parent
    want = {f"cdclake/{p.relative_to(root)}" for p in root.rglob("*.py")
            if "__pycache__" not in p.parts}
    assert want <= names
    # package data, symlinked into the package from the top-level directories
    assert {"cdclake/catalog/sql/install.sql", "cdclake/quality/expectations/change_stream.json"
            } <= names
    assert not any(n.endswith(".pyc") for n in names)


def test_a_changed_module_makes_a_new_zip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    pkg = tmp_path / "src" / "cdclake"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(cdclake, "__file__", str(pkg / "__init__.py"))
    first = sparkenv.package_zip(tmp_path / "cache")
    (pkg / "a.py").write_text("x = 2\n")
    second = sparkenv.package_zip(tmp_path / "cache")
    assert first != second and first.exists() and second.exists()
    assert zipfile.ZipFile(second).read("cdclake/a.py") == b"x = 2\n"


@pytest.mark.parametrize(("master", "local"), [
    ("local", True), ("local[*]", True), ("local[2]", True), ("local-cluster[2,1,1024]", False),
    ("spark://h:7077", False), ("yarn", False), ("k8s://https://h:6443", False)])
def test_only_local_masters_run_executors_in_this_process(master: str, local: bool) -> None:
    assert sparkenv.is_local(master) is local


def test_a_driver_spark_submit_started_keeps_its_master(monkeypatch: pytest.MonkeyPatch) -> None:
    config = Config(spark_master="spark://nowhere:7077", spark_conf={"spark.x": "own"})
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    own = sparkenv.builder(config, "t", {"spark.x": "cdclake", "spark.y": "1"})._options
    assert own["spark.master"] == "spark://nowhere:7077"
    assert own["spark.x"] == "own" and own["spark.y"] == "1"  # spark_conf last
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")
    submitted = sparkenv.builder(config, "t2", {})._options
    assert "spark.master" not in submitted
