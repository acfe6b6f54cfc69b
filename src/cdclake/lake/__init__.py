"""Iceberg mirrors of the source tables, merged from the decoded change stream.

Entry points: :func:`cdclake.lake.catalog.open_catalog`, :func:`cdclake.lake.batch.read_batch`,
:func:`cdclake.lake.merge.merge_batch`. See docs/lake.md for the type mapping and semantics.
"""
