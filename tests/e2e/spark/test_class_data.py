"""The install's class-data archive is what a cdclake session's JVM maps
(:mod:`cdclake.sparkenv.classdata`): a JVM that could not use it would say nothing and start
slower, so the test looks at the JVM's own memory map."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cdclake.config import Config
from cdclake.sparkenv.classdata import archive
from cdclake.sparkenv.jars import ensure_jars


def test_the_session_jvm_maps_the_install_class_data_archive(spark: Any) -> None:
    path = archive(ensure_jars(Config()))
    assert path.exists(), f"make's install builds {path} (cdclake.sparkenv.classdump)"
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    assert str(path) in Path(f"/proc/{pid}/maps").read_text(), "the JVM did not map it"
