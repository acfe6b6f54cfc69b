"""The initial snapshot: tables' current rows copied into their mirrors from one exported
PostgreSQL snapshot, on Spark, and handed over to the change stream by transaction visibility.

It composes the layers below it — the source's snapshot (:mod:`cdclake.catalog.snapshot`),
the stream's type mapping (:mod:`cdclake.lake.copyrows`), the mirror's commit and handoff
(:mod:`cdclake.lake.snapshot`, :mod:`cdclake.lake.visibility`) and Spark — so it sits above
``spark`` and ``lake`` and below ``pipeline``: :mod:`.driver` plans and commits,
:mod:`.chunks` is what one executor task does.
"""
