"""A wrong command line gets one clear line and exit status 2, never a traceback: unknown
options, values a type refuses, missing values and files that are not there, for every
subcommand. Each generated command line also carries an unknown option, so nothing runs."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdclake.cli import COMMANDS, ArgumentParser, main

UNKNOWN = "--no-such-option"


def options(command: str) -> list[argparse.Action]:
    """The subcommand's options, from its module's own argument definitions."""
    spec = COMMANDS[command]
    parser = ArgumentParser(prog=f"cdclake {command}")
    getattr(importlib.import_module(spec.module), spec.add_arguments)(parser)
    return [a for a in parser._actions if a.option_strings and a.dest != "help"]


def one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, (argv, code, err)
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, (argv, err)
    assert lines[0].startswith("cdclake"), lines[0]
    return lines[0]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_unknown_option_is_one_line(command: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line_exit_2([command, UNKNOWN], capsys)
    assert f"cdclake {command}: error:" in line


@pytest.mark.parametrize("command", sorted(COMMANDS))
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_values_for_every_option(command: str, data: st.DataObject,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    argv = [command]
    for action in options(command):
        if not data.draw(st.booleans()):
            continue
        argv.append(data.draw(st.sampled_from(action.option_strings)))
        if action.nargs != 0:
            argv.append(data.draw(st.text(st.characters(blacklist_categories=["Cs"]),
                                          max_size=12).filter(lambda s: not s.startswith("-"))))
    one_line_exit_2([*argv, UNKNOWN], capsys)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_option_without_its_value(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    for action in options(command):
        if action.nargs != 0:
            line = one_line_exit_2([command, action.option_strings[-1]], capsys)
            assert "argument" in line and action.option_strings[-1] in line, line


@pytest.mark.parametrize(("argv", "says"), [
    (["decode", "--wal", "{wal}", "--start-lsn", "bogus"], "not an LSN: 'bogus'"),
    (["decode", "--wal", "{wal}", "--start-lsn", "0/0", "--work-mem", "lots"],
     "argument --work-mem: not a size: 'lots'"),
    (["decode", "--wal", "{wal}", "--start-lsn", "0/0", "--database-oid", "5",
      "--dictionary", "{tmp}/missing.json"], "No such file or directory: {tmp}/missing.json"),
    (["decode", "--wal", "{wal}", "--start-lsn", "0/0", "--database-oid", "5",
      "--output", "{tmp}/no/dir/x"], "No such file or directory: {tmp}/no/dir/x"),
    (["waldump", "{wal}"], "no WAL segment (a file named like 000000010000000000000001) in "
                           "{wal}"),
    (["waldump", "--start", "x", "{wal}"], "argument -s/--start: not an LSN: 'x'"),
])
def test_the_cases_users_met(argv: list[str], says: str, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCLAKE_HOME", str(tmp_path))  # not the default (which is said)
    wal = tmp_path / "rand.bin"
    wal.write_bytes(b"not a WAL segment")
    fill = {"wal": str(wal), "tmp": str(tmp_path)}
    line = one_line_exit_2([a.format(**fill) for a in argv], capsys)
    assert says.format(**fill) in line


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_names_functions_its_module_has(command: str) -> None:
    spec = COMMANDS[command]
    module = importlib.import_module(spec.module)
    assert callable(getattr(module, spec.add_arguments, None)), spec
    assert callable(getattr(module, spec.run, None)), spec
