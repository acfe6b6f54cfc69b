"""``cdclake decode``: decode archived WAL into a change stream, e.g. PostgreSQL's test_decoding.

Contract: for a logical slot created at LSN S on the server that wrote the WAL, after
``cdclake source install``, the output of ``--start-lsn S`` equals, line for line,
``SELECT data FROM pg_logical_slot_peek_changes(slot, NULL, NULL, 'include-xids', '1',
'skip-empty-xacts', '1')`` run with TimeZone UTC.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import BinaryIO

from cdclake.catalog.capture import database_oid
from cdclake.catalog.dictionary import Dictionary
from cdclake.catalog.signing import load_key
from cdclake.config import Config, parse_size
from cdclake.decoding.context import DecodeOptions
from cdclake.decoding.parallel import decode_lines, default_jobs, peak_rss_kb
from cdclake.decoding.plugins.test_decoding import TestDecoding
from cdclake.decoding.session import DecodeResult
from cdclake.errors import ConfigError
from cdclake.lsn import format_lsn, parse_lsn
from cdclake.wal.source import DirectorySource

FORMATS = ("test_decoding",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wal", required=True, type=Path, nargs="+",
                   help="WAL segment files or directories (archive dir, pg_wal)")
    p.add_argument("--dsn", help="source database (its OID selects what is decoded; "
                                 "default CDCLAKE_SOURCE_DSN)")
    p.add_argument("--database-oid", type=int, help="decode this database without a --dsn")
    p.add_argument("--start-lsn", required=True, type=parse_lsn,
                   help="emit transactions committing at or after this LSN")
    p.add_argument("--end-lsn", type=parse_lsn, help="stop at this LSN")
    p.add_argument("--read-from", type=parse_lsn,
                   help="first LSN to read (default: the first segment given); must precede "
                        "the first change of every transaction to emit")
    p.add_argument("--format", choices=FORMATS, default="test_decoding")
    p.add_argument("--work-mem", type=parse_size,
                   help="reorder-buffer memory before spilling (default 64MB)")
    p.add_argument("--spill-dir", type=Path, help="where spill files go")
    p.add_argument("--dictionary", type=Path,
                   help="a saved dictionary (JSON) to start from instead of an empty one")
    p.add_argument("--key-file", type=Path,
                   help="the key that authenticates cdclake.ddl messages (default "
                        "CDCLAKE_DDL_KEY_FILE, else ddl.key in CDCLAKE_HOME, else read "
                        "through --dsn)")
    p.add_argument("--output", default="-", help="output file, or - for stdout")
    p.add_argument("--jobs", type=_jobs, default=default_jobs(),
                   help="decoding processes, each emitting a share of the changes; the "
                        "output is the same for any number (default: the cores there are, "
                        "%(default)s here)")
    p.add_argument("--stats", action="store_true", help="print run statistics to stderr")


def run(args: argparse.Namespace, config: Config) -> int:
    dsn = args.dsn or config.source_dsn
    if args.database_oid is not None:
        db_oid = args.database_oid
    elif dsn:
        db_oid = database_oid(dsn)
    else:
        raise ConfigError("give --dsn (or CDCLAKE_SOURCE_DSN) or --database-oid")
    dictionary = (Dictionary.from_json(json.loads(args.dictionary.read_text()))
                  if args.dictionary else Dictionary())
    options = DecodeOptions(
        db_oid=db_oid, start_lsn=args.start_lsn, end_lsn=args.end_lsn, read_from=args.read_from,
        work_mem=args.work_mem or config.work_mem,
        spill_dir=args.spill_dir or config.spill_path(),
        ddl_key=load_key(config.replace(ddl_key_file=args.key_file or config.ddl_key_file), dsn))
    with ExitStack() as stack:
        out: BinaryIO = sys.stdout.buffer if args.output == "-" else stack.enter_context(
            open(args.output, "wb"))
        # the WAL alone says what each relfilenode is (messages, pg_class rows), as on Spark
        result = decode_lines(
            DirectorySource(args.wal), dictionary, options,
            lambda d, v, write: TestDecoding(write, d.types, version=v), out, jobs=args.jobs)
        out.flush()
    if args.stats:
        print(_summary(result, options, args.jobs), file=sys.stderr)
    return 0


def _jobs(text: str) -> int:
    n = int(text)
    if n < 1:
        raise ValueError(f"--jobs must be at least 1, not {n}")
    return n


def _summary(r: DecodeResult, o: DecodeOptions, jobs: int) -> str:
    s = r.stats
    return (f"decoded {s.records} records (PostgreSQL {r.version}), {s.changes} changes, "
            f"{s.emitted} transactions emitted, {s.aborted} aborted, "
            f"{s.skipped_before_start} committed before {format_lsn(o.start_lsn)}; "
            f"peak reorder-buffer memory {r.peak_memory} bytes (work_mem {o.work_mem}); "
            f"spilled {r.spilled_txns} transactions, {r.spilled_changes} changes, "
            f"{r.spilled_bytes} bytes; open at end: {len(r.open_xids)}; "
            f"peak RSS {max(peak_rss_kb(), r.worker_peak_rss_kb)} kB"
            + (f" (the largest of {jobs} processes)" if jobs > 1 else ""))
