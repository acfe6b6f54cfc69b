"""The initial snapshot: tables' current rows copied into their mirrors from one exported
PostgreSQL snapshot, on Spark, and handed over to the change stream by transaction visibility.

It composes the layers below it — the source's snapshot (:mod:`cdclake.catalog.export`),
the stream's type mapping and the mirrors' tables (``lake``), the handoff by visibility
(:mod:`cdclake.lake.visibility`, which the merge reads) and Spark (``sparkenv``) — so it sits
above ``lake`` and below ``pipeline``, and imports nothing of the decode job (``spark``).
Its rooms: :mod:`.driver` plans the copy tasks and commits; :mod:`.chunks` is what one
executor task does, reading COPY through :mod:`._copyout` (compiled) or psycopg; :mod:`.copyrows`
turns COPY's rows into the Arrow values the change stream would have written;
:mod:`.mirror` is the mirror's side: the schema staged before the copy, the one commit that
swaps the copied files in.
"""
