"""``cdclake sql``: one Spark SQL query on the mirrors, its result printed as Spark's table.

The session is cdclake's one (:func:`cdclake.sparkenv.session.session`), whose default
catalog is the mirrors', so ``<namespace>.<schema>__<table>`` names a mirror.
"""

from __future__ import annotations

import argparse

from cdclake.config import Config, positive_int
from cdclake.errors import LakeError
from cdclake.lake.catalog import open_catalog
from cdclake.sparkenv.session import session
from cdclake.sparkenv.tasks import error_line


def add_sql_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", help="Spark SQL; mirrors are <namespace>.<schema>__<table> "
                                 "(the catalog is the session's default)")
    p.add_argument("--max-rows", type=positive_int, default=100,
                   help="rows printed at most (default 100)")


def run_sql(args: argparse.Namespace, config: Config) -> int:
    """Run one query on the mirrors and print its result as Spark's table."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    open_catalog(config, create=False)  # no catalog yet, or a bad one: said before Spark starts
    spark = session(config, "sql")
    try:
        spark.sql(args.query).show(n=args.max_rows, truncate=False)
    except (PySparkException, Py4JError) as exc:
        raise LakeError(f"query failed: {error_line(exc)}") from None
    finally:
        spark.stop()
    return 0
