"""Where Spark runs and what executors are sent (cdclake.sparkenv): no Spark started."""

from __future__ import annotations

import shlex
import traceback
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import cdclake
from cdclake.config import Config
from cdclake.errors import LakeError, UnknownRelationError, WalCorruptError
from cdclake.sparkenv import daemon, session, shipping, tasks


def test_the_zip_holds_the_package_and_is_named_by_its_content(tmp_path: Path) -> None:
    first = shipping.package_zip(tmp_path)
    assert first == shipping.package_zip(tmp_path)  # unchanged code: the same zip, reused
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
    first = shipping.package_zip(tmp_path / "cache")
    (pkg / "a.py").write_text("x = 2\n")
    second = shipping.package_zip(tmp_path / "cache")
    assert first != second and first.exists() and second.exists()
    assert zipfile.ZipFile(second).read("cdclake/a.py") == b"x = 2\n"


@pytest.mark.parametrize(("master", "local"), [
    ("local", True), ("local[*]", True), ("local[2]", True), ("local-cluster[2,1,1024]", False),
    ("spark://h:7077", False), ("yarn", False), ("k8s://https://h:6443", False)])
def test_only_local_masters_run_executors_in_this_process(master: str, local: bool) -> None:
    assert shipping.is_local(master) is local


def test_a_driver_spark_submit_started_keeps_its_master(monkeypatch: pytest.MonkeyPatch) -> None:
    config = Config(spark_master="spark://nowhere:7077", spark_conf={"spark.x": "own"})
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    own = session.builder(config, "t", {"spark.x": "cdclake", "spark.y": "1"})._options
    assert own["spark.master"] == "spark://nowhere:7077"
    assert own["spark.x"] == "own" and own["spark.y"] == "1"  # spark_conf last
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")
    submitted = session.builder(config, "t2", {})._options
    assert "spark.master" not in submitted


def test_sql_shuffles_are_sized_by_the_cores_cdclake_uses() -> None:
    """Not Spark's 200: two tasks a core, and the user's spark_conf still decides."""
    counts = session.task_counts(Config(spark_partitions=3))
    assert counts == {"spark.default.parallelism": "3", "spark.sql.shuffle.partitions": "6"}
    config = Config(spark_partitions=3, spark_conf={"spark.sql.shuffle.partitions": "64"})
    options = session.builder(config, "t", session.task_counts(config))._options
    assert options["spark.sql.shuffle.partitions"] == "64"


# -- errors raised in tasks come back as themselves -------------------------------------------


def worker_text(fn: Any, *args: Any) -> str:
    """What the driver gets of a task that failed: the text of the worker's traceback (Spark
    sends nothing else), as pyspark's worker formats it."""
    try:
        out = fn(*args)
        if isinstance(out, Iterator):
            list(out)
    except Exception:
        return ("org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in "
                "stage 1.0 failed 1 times, most recent failure: Lost task 0.0: "
                "org.apache.spark.api.python.PythonException: " + traceback.format_exc()
                + "\n\tat org.apache.spark.api.python.BasePythonRunner...")
    raise AssertionError("the task did not fail")


def crc_error(_: object) -> None:
    raise WalCorruptError("incorrect CRC-32C in record", segment="000000010000000000000003",
                          lsn=0x3000128)


def test_a_tasks_cdclake_error_comes_back_with_its_class_message_and_attributes() -> None:
    text = worker_text(tasks.task(crc_error), 1)
    back = tasks.task_error(Exception(text))
    assert type(back) is WalCorruptError
    assert str(back) == ("incorrect CRC-32C in record (segment 000000010000000000000003, "
                         "LSN 0/3000128)")
    assert (back.segment, back.lsn) == ("000000010000000000000003", 0x3000128)
    assert tasks.error_line(Exception(text)) == str(back)
    # the worker's traceback keeps the original error for Spark's log
    assert "cdclake.errors.WalCorruptError: incorrect CRC-32C" in text


def test_an_error_while_spark_iterates_a_task_is_caught_too() -> None:
    def records(_: object) -> Iterator[int]:
        yield 1
        raise UnknownRelationError("1663/5/16384", 0x3000128)

    back = tasks.task_error(Exception(worker_text(tasks.task(records), 1)))
    assert type(back) is UnknownRelationError and "relfilenode 1663/5/16384" in str(back)


def test_another_error_of_a_task_is_named_in_one_line_not_passed_for_cdclakes() -> None:
    def fails(_: object) -> None:
        raise OSError(28, "No space left on device\nsecond line")

    text = worker_text(tasks.task(fails), 1)
    assert tasks.task_error(Exception(text)) is None
    assert tasks.error_line(Exception(text)) == "OSError: [Errno 28] No space left on " \
                                                   "device second line"


def test_text_a_task_handles_cannot_pass_for_an_error_token() -> None:
    """A table name, a value or a server's message may hold anything, lines that look like a
    token included: only a token with this driver's nonce counts."""
    genuine = worker_text(tasks.task(crc_error), 1)
    token = genuine[genuine.index(tasks.MARK):].split()[0]
    other_driver = token.replace(token.split(":")[1], "0" * 32)
    forged = f"relation \"x\ncdclake.sparkenv.tasks.TaskFailed: {other_driver}\" does not exist"
    assert tasks.task_error(Exception(forged)) is None
    assert tasks.error_line(Exception(forged)) == "relation \"x"
    # a message quoting a genuine-looking prefix with a payload that is no token
    assert tasks.task_error(Exception(f"{tasks.MARK}:{token.split(':')[1]}:!!")) is None


def test_spark_errors_passes_the_drivers_own_exceptions() -> None:
    with pytest.raises(KeyError), tasks.spark_errors("decode"):
        raise KeyError("a bug in the driver")


def test_any_other_spark_failure_is_one_cdclake_error_naming_what_failed() -> None:
    from pyspark.errors import PySparkException

    # (the log is named when this process's JVM is one cdclake started: an earlier test's)
    with pytest.raises(LakeError, match=r"^merge of public\.t: \[X\] bad statement"
                                        r"( \(Spark's log: \S+/logs/spark\.log\))?$"), \
            tasks.spark_errors("merge of public.t", LakeError):
        raise PySparkException(message="[X] bad statement\n== SQL ==\nMERGE INTO ...")


def test_a_jvm_cdclake_starts_logs_to_a_file_in_the_home(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    options = session.builder(Config(home=tmp_path), "t", {})._options
    java = shlex.split(options["spark.driver.extraJavaOptions"])
    log4j = Path(java[0].removeprefix("-Dlog4j2.configurationFile="))
    assert java[1] == f"-Dcdclake.spark.log={tmp_path}/logs/spark.log"
    assert "appenderRef.console" not in log4j.read_text()  # nothing to the terminal
    assert "fileName = ${sys:cdclake.spark.log}" in log4j.read_text()


def test_workers_on_this_host_start_from_cdclakes_daemon() -> None:
    tasks = ("cdclake.spark.job", "cdclake.lake.sparkparts")
    named = {"spark.executorEnv.CDCLAKE_TASK_MODULES": "cdclake.spark.job,cdclake.lake.sparkparts"}
    assert session.workers_conf("local[2]", tasks) == {
        **named, "spark.python.daemon.module": "cdclake.sparkenv.daemon"}
    # another host's executors may not have cdclake: they keep pyspark's daemon; under
    # spark-submit (None) the submitter's properties chose it
    assert session.workers_conf("spark://h:7077", tasks) == named
    assert session.workers_conf(None, tasks) == named


def test_the_daemon_passes_over_only_the_installed_pysparks_zips() -> None:
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    site = str(Path(pyspark.__file__).parent.parent)
    ours = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.7-src.zip")]
    other = "/opt/spark/python/lib/pyspark.zip"  # another Spark's: its code may differ
    assert daemon.installed_zips([*ours, other, site]) == set(ours)
    assert daemon.installed_zips([*ours, other]) == set()  # no installed pyspark to use
