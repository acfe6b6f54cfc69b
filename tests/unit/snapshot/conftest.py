"""The lake tests' fixtures (a SQLite catalog and warehouse in a temporary home, a change
stream to build batches in, DuckDB): the snapshot's mirror side is tested on the same."""

from tests.unit.lake.conftest import catalog, config, duck, stream

__all__ = ["catalog", "config", "duck", "stream"]
