"""``cdclake <command>``: one command per stage, plus run/demo/status.

Each command lives in the module that does its work; :data:`COMMANDS` names the module and
its two functions (add the arguments, run). Modules are imported only when
their command runs, so ``cdclake wal-push`` (called by PostgreSQL for every segment) does not
pay for Spark or Airflow imports.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple, NoReturn

from cdclake.config import Config
from cdclake.errors import CdclakeError, redact, unforeseen


class Command(NamedTuple):
    """Where a command lives: its module, the functions there that add its arguments and run
    it (``run(args, config) -> int``), and its one-line help."""

    module: str
    add_arguments: str
    run: str
    help: str


COMMANDS: dict[str, Command] = {
    "waldump": Command("cdclake.waldump", "add_arguments", "run",
                       "print WAL records like pg_waldump"),
    "decode": Command("cdclake.decoding.command", "add_arguments", "run",
                      "decode WAL into a change stream (test_decoding, ...)"),
    "init": Command("cdclake.pipeline.init", "add_arguments", "run",
                    "write a configuration file and print the source's archive_command"),
    "source": Command("cdclake.catalog.install", "add_arguments", "run",
                      "set up the source database (source install)"),
    "wal-push": Command("cdclake.archive.push", "add_wal_push_arguments", "run_wal_push",
                        "archive_command: push one WAL file to the store"),
    "ship": Command("cdclake.archive.ship", "add_ship_arguments", "run_ship",
                    "upload new segments from an archive directory"),
    "run": Command("cdclake.pipeline.commands", "add_run_arguments", "run_run",
                   "run one batch: ship, snapshot, decode, validate, merge, report"),
    "snapshot": Command("cdclake.pipeline.commands", "add_snapshot_arguments", "run_snapshot",
                        "copy tables' current rows into their mirrors again"),
    "status": Command("cdclake.pipeline.commands", "add_status_arguments", "run_status",
                      "show the stream's progress and the archive's state"),
    "maintain": Command("cdclake.pipeline.maintenance", "add_maintain_arguments",
                        "run_maintain",
                        "compact the mirrors and expire old snapshots (the watermark kept)"),
    "sql": Command("cdclake.lake.query", "add_sql_arguments", "run_sql",
                   "run a Spark SQL query on the mirrors and print the result"),
    "demo": Command("cdclake.demo", "add_arguments", "run",
                    "start local services, run a workload and the DAG, compare"),
}


#: command -> the default places it uses, which it says on stderr when they are defaults
#: (``status`` says where it looks in its output, and refuses a home that is not there)
SAYS_DEFAULTS: dict[str, tuple[str, ...]] = {
    "run": ("home", "store"), "snapshot": ("home", "store"), "maintain": ("home", "store"),
    "sql": ("home",), "source": ("home",), "decode": ("home",), "demo": ("home",)}
#: how each default place is chosen instead
CHOSEN_BY = {"home": "CDCLAKE_HOME", "store": "CDCLAKE_STORE_URL"}


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the errors cdclake promises: one line naming the argument and what is
    wrong with it (a type function's own message, e.g. ``not an LSN: 'x'``), exit status 2."""

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        convert = action.type
        if callable(convert) and not isinstance(convert, type):
            try:
                return convert(arg_string)
            except (argparse.ArgumentTypeError, ValueError, TypeError, CdclakeError) as exc:
                raise argparse.ArgumentError(action, str(exc)) from None
        return super()._get_value(action, arg_string)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="cdclake", description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="TOML configuration file (else CDCLAKE_CONFIG)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        sub.add_parser(name, help=command.help, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    known, rest = parser.parse_known_args(argv)
    command = COMMANDS[known.command]
    module = importlib.import_module(command.module)
    cmd_parser = ArgumentParser(prog=f"cdclake {known.command}", description=command.help)
    getattr(module, command.add_arguments)(cmd_parser)
    run = getattr(module, command.run)
    args = cmd_parser.parse_args(rest)
    config: Config | None = None
    try:
        config = Config.load(known.config)
        said = _defaults(config, SAYS_DEFAULTS.get(known.command, ()))
        if said:
            print(f"cdclake {known.command}: {said}", file=sys.stderr)
        return int(run(args, config) or 0)
    except CdclakeError as exc:
        print(f"cdclake {known.command}: error: {redact(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a file argument that cannot be read or written
        where = f": {exc.filename}" if exc.filename else ""
        print(f"cdclake {known.command}: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2
    except Exception as exc:  # not foreseen: a bug. One line here, the traceback in the log
        print(f"cdclake {known.command}: {unforeseen(exc)} "
              f"({_keep_traceback(config, argv)})", file=sys.stderr)
        return 1


def _defaults(config: Config, places: Sequence[str]) -> str:
    """The line saying which of ``places`` are defaults here, and where they are ("" when
    none): without it a command run with no configuration would fill ``./.cdclake`` of
    whatever directory it ran in, silently."""
    used = {k: v for k, v in config.defaults_in_use().items() if k in places}
    if not used:
        return ""
    new = "" if config.home.exists() else " (not there yet: it will be created)"
    where = " and ".join(f"{k} {v}{new if k == 'home' else ''}" for k, v in used.items())
    choose = ", ".join(CHOSEN_BY[k] for k in used)
    return f"using the default {where}; {choose} or a configuration file choose others"


def _keep_traceback(config: Config | None, argv: Sequence[str]) -> str:
    """Append the traceback being handled to ``logs/cdclake.log`` in the home; where it went.
    With no home to write to, it goes to stderr after all: a bug's traceback is not lost."""
    text = redact(f"{datetime.now(UTC).isoformat(timespec='seconds')} cdclake "
                  f"{' '.join(argv)}\n{traceback.format_exc()}\n")
    if config is not None:
        path = config.logs_path() / "cdclake.log"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as f:
                f.write(text)
            return f"a bug: its traceback is in {path}"
        except OSError:
            pass
    sys.stderr.write(text)
    return "a bug: its traceback is above"


if __name__ == "__main__":
    sys.exit(main())
