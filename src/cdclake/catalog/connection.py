"""Every session cdclake opens on the source database, with a search path no other role chose.

The owner of a database may ``ALTER DATABASE ... SET search_path`` (a default every new
session takes) and create functions, operators, relations and types in ``public`` or in any
schema on that path. A name cdclake's SQL leaves unqualified (``current_setting``,
``pg_relation_size``, ``pg_stat_archiver``, an ``=``) would then resolve to the owner's object,
and run as the role cdclake connects with — a superuser for ``cdclake source install``, often
for the rest. :func:`connect` therefore starts each session with ``search_path = pg_catalog,
pg_temp`` (functions and operators from pg_catalog alone; relations and types from pg_catalog
first), set in the startup packet, after any ``options`` the DSN or ``PGOPTIONS`` gives: it
takes precedence over database and role defaults, and lasts the session, whatever its
transactions roll back. Values print the same under it (the output functions that look at the
path, those of the reg* types, have no codec).
"""

from __future__ import annotations

import os
from typing import Any

#: the libpq ``options`` every cdclake session on the source ends with
PINNED = "-c search_path=pg_catalog,pg_temp"


def connect(dsn: str, **kwargs: Any) -> Any:
    """``psycopg.connect(dsn, **kwargs)`` with the search path pinned (module docstring)."""
    import psycopg

    return psycopg.connect(dsn, options=pinned_options(dsn), **kwargs)


def pinned_options(dsn: str) -> str:
    """The libpq ``options`` of a session on ``dsn``: the DSN's own (or ``PGOPTIONS``), then
    the pinned search path — for a session opened without psycopg, as the snapshot's
    compiled COPY reader opens one."""
    from psycopg.conninfo import conninfo_to_dict

    given = conninfo_to_dict(dsn).get("options") or os.environ.get("PGOPTIONS", "")
    return f"{given} {PINNED}".strip()
