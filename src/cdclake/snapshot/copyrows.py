"""Rows of ``COPY ... TO STDOUT`` as a mirror data file's Arrow table.

The initial snapshot copies each table's rows with COPY instead of decoding them from WAL, yet
a row must land in the mirror exactly as the change stream would have put it there: the same
typed value, the same NULL plus ``_cdc_pg_text`` entry for a value without a typed
representation. So nothing here maps types on its own. Each column goes through the codec the
change stream builds for the same relation version (:class:`cdclake.decoding.rows.LayoutCache`)
and its ``value_from_text`` — the path the Arrow plugin already takes for ``attmissingval``
text — into an array of the stream's Arrow type, then through the safe (lossless) cast the
mirror's schema evolution allows (int -> long, float -> double, a wider decimal). Temporal
values stay their Arrow storage integers throughout, exactly as :mod:`cdclake.lake.values`
holds them in the merge, so BC dates, years past 9999 and ±infinity arrive unchanged.

COPY prints each value with the type's output function under the session's settings; the
codecs parse PostgreSQL's output under one fixed set of them (:data:`SESSION_SETTINGS`), which
the copying session must apply first.

Three ways in, one result. :meth:`CopyRows.to_arrow` takes rows of text values (COPY's text
format, parsed by psycopg) and sends every value through its codec: the general path, exact by
construction, and slow. :meth:`CopyRows.from_strings` takes the columns of COPY's CSV format as
Arrow string arrays (parsed by :meth:`CopyRows.csv_reader`, in C++) and converts a column with
Arrow compute kernels when its codec's text form maps exactly onto an Arrow cast — integers,
floats, booleans, dates, times, timestamps, constrained numerics, uuids, bytea, integer arrays
and every type whose codec keeps the text as is (:func:`vectorized`) — and only when every value
of the column is in a plain form the kernel reads as the codec does. Anything else (BC dates,
±infinity, NaN, years past 9999, a multi-dimensional array ...; a type without a kernel) takes
the codec value by value, so both ways give the same Arrow values, NULL plus ``_cdc_pg_text``
included. :meth:`CopyRows.from_binary` takes the buffers COPY's binary format was decoded into
(:attr:`CopyRows.binary_plan`: per column a kind whose binary form is the datum the stream
decodes, or its output function's text, selected by :meth:`CopyRows.binary_statement`).

A virtual generated column (PostgreSQL 18) has no storage: the WAL logs it as NULL, so the
change stream — and therefore the mirror — holds NULL for it. COPY would compute it, so it is
left out of the select list and written as NULL here too.
"""

from __future__ import annotations

import binascii
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema

from cdclake.catalog.model import RelationVersion, TypeInfo
from cdclake.decoding.rows import LayoutCache, LiveColumn
from cdclake.errors import LakeError
from cdclake.lake.metrics import needs_counts_only
from cdclake.lake.schema import CDC_COMMIT_LSN, CDC_COMMIT_TS, CDC_PG_TEXT, mirror_fields
from cdclake.lake.typemap import arrow_type, iceberg_type, promoted
from cdclake.tuples import codecs, datetimes, numeric, scalars
from cdclake.tuples.codecs import Codec
from cdclake.tuples.untypeable import NotTypeable

__all__ = ["SESSION_SETTINGS", "CopyRows", "counts_only_columns", "quote_ident", "vectorized"]

#: The settings under which PostgreSQL prints what the codecs' ``value_from_text`` parses and
#: their ``text`` reproduces (cdclake.tuples.codecs): ISO dates with " BC", postgres interval
#: style, timestamptz in UTC ("+00"), shortest-exact floats (also inside geometric types),
#: hex bytea, money in the C locale, and UTF-8 text for the codecs' str values.
SESSION_SETTINGS: tuple[str, ...] = (
    "SET TimeZone = 'UTC'",
    "SET DateStyle = 'ISO, YMD'",
    "SET IntervalStyle = 'postgres'",
    "SET extra_float_digits = 1",
    "SET bytea_output = 'hex'",
    "SET lc_monetary = 'C'",
    "SET client_encoding = 'UTF8'",
)

_VIRTUAL = "v"
_PG_TEXT_TYPE = pa.map_(pa.string(), pa.string())

#: a column's Arrow string array (COPY CSV values, null for NULL) -> the same values in the
#: codec's Arrow type, or None when the column is not in the plain form the kernels read
Vectorized = Callable[[pa.Array], "pa.Array | None"]


def quote_ident(name: str) -> str:
    """``name`` as an always-quoted SQL identifier (embedded double quotes doubled)."""
    if "\x00" in name:
        raise LakeError(f"identifier {name!r} contains a NUL character")
    return '"' + name.replace('"', '""') + '"'


class CopyRows:
    """Converts one relation version's COPY rows into a mirror's data-file layout.

    ``types`` are the pg_type facts the version decodes with (a TypeCatalog is read at the
    version's ``valid_from``, as the change stream does); ``schema`` is the mirror's current
    Iceberg schema, its data columns tied to attnums; every row gets ``commit_lsn`` and
    ``commit_ts_us`` (µs since 1970, UTC) as its system values.
    """

    def __init__(self, rel: RelationVersion, types: Mapping[int, TypeInfo], schema: Schema, *,
                 commit_lsn: int, commit_ts_us: int, table: str | None = None) -> None:
        self.rel = rel
        self.table = table or f"{rel.schema}.{rel.name}"
        self.schema = schema
        self.commit_lsn = int(commit_lsn)
        self.commit_ts_us = int(commit_ts_us)
        self.file_schema: pa.Schema = schema_to_pyarrow(schema, include_field_ids=True)
        fields = mirror_fields(schema, self.table)
        layouts = LayoutCache(types)
        self._types = layouts.types_at(rel)
        live = layouts.get(rel).live
        #: the columns COPY selects, in attnum order
        self.selected: tuple[LiveColumn, ...] = tuple(
            lc for lc in live if lc.column.generated != _VIRTUAL)
        by_attnum = {lc.column.attnum: i for i, lc in enumerate(self.selected)}
        for lc in live:
            f = fields.get(lc.column.attnum)
            if f is None:
                raise LakeError(
                    f"mirror of {self.table}: no column for {lc.column.name} (attnum "
                    f"{lc.column.attnum}); evolve the mirror to the relation version first")
            stream_type = iceberg_type(lc.codec.arrow_type, table=self.table,
                                       column=lc.column.name)
            if promoted(f.field_type, stream_type) != f.field_type:
                raise LakeError(
                    f"mirror of {self.table}: column {f.name} ({f.field_type}) cannot hold "
                    f"the values of {lc.column.name} (attnum {lc.column.attnum}, "
                    f"{stream_type} in the change stream); evolve the mirror first")
        #: per file field: ("data", selected index) / ("null", None) / a system column
        self._plan: list[tuple[str, int | None]] = []
        data_names = {f.name: a for a, f in fields.items()}
        for f in schema.fields:
            attnum = data_names.get(f.name)
            if attnum is not None:
                idx = by_attnum.get(attnum)
                self._plan.append(("null", None) if idx is None else ("data", idx))
            elif f.name in (CDC_COMMIT_LSN, CDC_COMMIT_TS, CDC_PG_TEXT):
                self._plan.append((f.name, None))
            else:
                raise LakeError(f"mirror of {self.table}: column {f.name} is neither a data "
                                "column nor a system column cdclake writes")
        self._mirror_types = [arrow_type(f.field_type) for f in schema.fields]
        self._vectorized: list[Vectorized | None] = [vectorized(lc.codec)
                                                     for lc in self.selected]
        #: how COPY's binary format carries each selected column (:meth:`binary_statement`)
        self.binary_plan: list[str] | None = self._binary_plan()

    # -- SQL ---------------------------------------------------------------------------------

    def qualified(self) -> str:
        return f"{quote_ident(self.rel.schema)}.{quote_ident(self.rel.name)}"

    def select_list(self) -> str:
        """The columns COPY selects (virtual generated ones left out), quoted, attnum order.

        A relation without any selectable column gives ``NULL``: COPY then still prints one
        line per row, and the rows (all system values) are counted as they must be."""
        if not self.selected:
            return "NULL"
        return ", ".join(quote_ident(lc.column.name) for lc in self.selected)

    def copy_statement(self, first_block: int = 0, end_block: int | None = None, *,
                       csv: bool = False) -> str:
        """``COPY (SELECT ... FROM ONLY t WHERE ctid in [first_block, end_block)) TO STDOUT``:
        a TID range scan (PostgreSQL 14+) over the chunk's heap blocks; text format, or CSV
        (for :meth:`csv_reader`) with ``csv``."""
        first = int(first_block)
        if first < 0 or (end_block is not None and int(end_block) < first):
            raise LakeError(f"{self.table}: bad block range {first_block}..{end_block}")
        where = f"ctid >= '({first},0)'::tid"
        if end_block is not None:
            where += f" AND ctid < '({int(end_block)},0)'::tid"
        return (f"COPY (SELECT {self.select_list()} FROM ONLY {self.qualified()} "
                f"WHERE {where}) TO STDOUT" + (" WITH (FORMAT csv)" if csv else ""))

    def _binary_plan(self) -> list[str] | None:
        """Per selected column, a kind COPY's binary format gives as the stream's value
        (:data:`BINARY_KINDS`), or ``"output"``: its type's output function's text, asked for
        in the select list, then read as the CSV path reads it. None (the binary format is
        not used) when a type is unknown or no column is selected."""
        if not self.selected:
            return None
        plan = []
        for lc in self.selected:
            info = self._base_type(lc.column.type_oid)
            if info is None:
                return None
            plan.append(binary_kind(lc.codec, info.oid))
        return plan

    def _base_type(self, oid: int) -> TypeInfo | None:
        """The type a domain is over (through domains over domains); a type itself else."""
        info = self._types.get(oid)
        for _ in range(64):
            if info is None or info.typtype != "d":
                return info
            info = self._types.get(info.base)
        return None

    def output_types(self) -> list[int]:
        """The (base) types of the ``output`` columns of :attr:`binary_plan`: their output
        functions' schema-qualified names are asked of the source (:data:`OUTPUT_FUNCTIONS`)
        for :meth:`binary_statement`."""
        assert self.binary_plan is not None
        return sorted({self._base_type(lc.column.type_oid).oid  # type: ignore[union-attr]
                       for lc, kind in zip(self.selected, self.binary_plan, strict=True)
                       if kind == "output"})

    def binary_statement(self, outputs: Mapping[int, tuple[str, str]], first_block: int = 0,
                         end_block: int | None = None) -> str:
        """:meth:`copy_statement` in COPY's binary format (:attr:`binary_plan` not None): an
        ``output`` column selected as ``pg_catalog.textin(<typoutput>(col))`` — the text
        COPY itself would print, not a cast to text, which for some types (bool, char(n),
        inet) prints otherwise. ``outputs`` gives each :meth:`output_types` type's output
        function and name (:data:`OUTPUT_FUNCTIONS`); a domain is cast to the type it is
        over first (a relabeling), as polymorphic output functions do not take domains."""
        assert self.binary_plan is not None
        exprs = []
        for lc, kind in zip(self.selected, self.binary_plan, strict=True):
            col = quote_ident(lc.column.name)
            if kind == "output":
                oid = self._base_type(lc.column.type_oid).oid  # type: ignore[union-attr]
                if oid not in outputs:
                    raise LakeError(f"{self.table}: the source has no output function for "
                                    f"the type of column {lc.column.name} (oid {oid})")
                function, name = outputs[oid]
                if oid != lc.column.type_oid:
                    col = f"({col})::{name}"
                col = f"pg_catalog.textin({function}({col}))"
            exprs.append(col)
        statement = self.copy_statement(first_block, end_block)
        head = f"COPY (SELECT {self.select_list()} FROM "
        assert statement.startswith(head)
        return (f"COPY (SELECT {', '.join(exprs)} FROM " + statement[len(head):] +
                " WITH (FORMAT binary)")

    def from_binary(self, rows: int,
                    columns: Sequence[tuple[bytes, bytes | None, bytes | None, int]],
                    specials: Sequence[tuple[int, int, int, int]] = ()) -> pa.Table:
        """The same as :meth:`to_arrow`, from the buffers a binary COPY's columns were read
        into (``(values, offsets, validity, nulls)`` each, Arrow's layout, as
        :meth:`cdclake.snapshot._copyout.CopyOut.read_binary` gives them): a kind's array is
        the stream's value already; an ``output`` column's text converts as in
        :meth:`from_strings`. ``specials`` are the ``(row, column, code, raw)`` of the values
        without a stream value (NULL in the arrays: a numeric's NaN or ±Infinity, a
        timestamp past Arrow's range, ``raw`` its value): their text goes to
        ``_cdc_pg_text``, as the codec prints them."""
        assert self.binary_plan is not None
        if len(columns) != len(self.selected):
            raise LakeError(f"{self.table}: a binary COPY batch has {len(columns)} columns "
                            f"where {len(self.selected)} were selected")
        texts: dict[int, dict[str, str]] = {}
        for row, col, code, raw in specials:
            kind = self.binary_plan[col]
            lc = self.selected[col]
            if kind == "numeric" and code in _NUMERIC_SPECIALS:
                text = _NUMERIC_SPECIALS[code]
            elif kind == "timestamp" and code == _TIMESTAMP_BEYOND:
                text = lc.codec.text(raw.to_bytes(8, "little", signed=True))  # as on disk
            else:
                raise LakeError(f"{self.table}: a binary COPY batch marks row {row}, column "
                                f"{col + 1} special ({code})")
            texts.setdefault(row, {})[str(lc.column.attnum)] = text
        typed = []
        for i, (lc, kind, (values, offsets, validity, nulls)) in enumerate(
                zip(self.selected, self.binary_plan, columns, strict=True)):
            arr_type = pa.string() if kind == "output" else _BINARY_TYPES.get(kind) or \
                lc.codec.arrow_type
            buffers = [None if validity is None else pa.py_buffer(validity)]
            if offsets is not None:
                buffers.append(pa.py_buffer(offsets))
            buffers.append(pa.py_buffer(values))
            arr = pa.Array.from_buffers(arr_type, rows, buffers, null_count=nulls)
            if pa.types.is_string(arr_type):
                try:
                    arr.validate(full=True)  # UTF-8, as the CSV reader checks it
                except pa.ArrowInvalid as exc:
                    raise LakeError(f"{self.table}: column {lc.column.name} of a binary COPY "
                                    f"batch is not UTF-8: {exc}") from exc
            if kind == "bool":
                arr = pc.not_equal(arr, 0)
            elif kind == "output":
                arr = self._from_text(i, lc, arr, texts)
            typed.append(arr)
        return self._table(typed, texts, rows)

    def csv_reader(self, source: Any, block_size: int) -> pcsv.CSVStreamingReader:
        """Record batches of string columns (:meth:`select_list` order) from ``source``, a
        file-like object with ``read`` over the output of ``copy_statement(csv=True)``; one
        batch per ``block_size`` bytes of it.

        PostgreSQL's CSV: NULL is an unquoted empty field, an empty string ``""``; a value with
        a comma, quote, CR or LF is quoted (quotes doubled), so rows may span lines; a row
        whose only value is NULL is an empty line (kept: it is a row). Nothing is inferred:
        every column is a string. A row longer than ``block_size`` raises ArrowInvalid
        ("straddling object ...") — the caller reads such a chunk the general way instead.
        Blocks are read on demand, not ahead on a thread: memory stays at a block or two
        however long the chunk (readahead held up to eight blocks when reading outran the
        conversion).
        """
        names = [f"c{i}" for i in range(len(self.selected) or 1)]
        return pcsv.open_csv(
            source,
            read_options=pcsv.ReadOptions(column_names=names, block_size=int(block_size),
                                        use_threads=False),
            parse_options=pcsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=False),
            convert_options=pcsv.ConvertOptions(
                column_types={n: pa.string() for n in names}, null_values=[""],
                strings_can_be_null=True, quoted_strings_can_be_null=False))

    # -- rows --------------------------------------------------------------------------------

    def to_arrow(self, rows: Sequence[Sequence[str | None]]) -> pa.Table:
        """The rows (COPY text values, None for NULL, in :meth:`select_list` order) laid out
        in :attr:`file_schema`; every value through its codec."""
        n = len(rows)
        width = len(self.selected) or 1
        for row in rows:
            if len(row) != width:
                raise LakeError(f"{self.table}: a COPY row has {len(row)} values where "
                                f"{width} columns were selected")
        texts_by_column = list(zip(*rows, strict=True)) if n and self.selected else \
            [()] * len(self.selected)
        texts: dict[int, dict[str, str]] = {}
        typed = [self._column(lc, list(col), texts)
                 for lc, col in zip(self.selected, texts_by_column, strict=True)]
        return self._table(typed, texts, n)

    def from_strings(self, columns: Sequence[pa.Array | pa.ChunkedArray]) -> pa.Table:
        """The same as :meth:`to_arrow`, from one string array per selected column (COPY CSV
        values, null for NULL, :meth:`select_list` order; a batch of :meth:`csv_reader`):
        a column whose codec has a :func:`vectorized` form goes through Arrow kernels when all
        its values are in the plain form they read, else value by value through the codec."""
        width = len(self.selected) or 1
        if len(columns) != width:
            raise LakeError(f"{self.table}: COPY gave {len(columns)} columns where {width} "
                            "were selected")
        n = len(columns[0])
        texts: dict[int, dict[str, str]] = {}
        typed = []
        for i, (lc, column) in enumerate(zip(self.selected, columns, strict=False)):
            strings = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
            if len(strings) != n or strings.type != pa.string():
                raise LakeError(f"{self.table}: column {lc.column.name} of a COPY batch is "
                                f"{len(strings)} {strings.type} values, not {n} strings")
            typed.append(self._from_text(i, lc, strings, texts))
        return self._table(typed, texts, n)

    def _from_text(self, i: int, lc: LiveColumn, strings: pa.Array,
                   texts: dict[int, dict[str, str]]) -> pa.Array:
        """Selected column ``i``'s texts in the stream's type: its kernel, or its codec."""
        fast = self._vectorized[i]
        arr = fast(strings) if fast is not None else None
        if arr is None:
            arr = self._column(lc, strings.to_pylist(), texts)
        return arr

    def _table(self, typed: list[pa.Array], texts: dict[int, dict[str, str]],
               n: int) -> pa.Table:
        """The typed columns (stream types, :attr:`selected` order) and the rows' untypeable
        texts (row index -> attnum -> text) laid out in :attr:`file_schema`."""
        arrays = []
        for (kind, idx), f, mtype in zip(self._plan, self.file_schema, self._mirror_types,
                                         strict=True):
            if kind == "data":
                assert idx is not None
                arr = self._cast(typed[idx], mtype, self.selected[idx])
            elif kind == "null":
                arr = pa.nulls(n, mtype)
            elif kind == CDC_COMMIT_LSN:
                arr = pa.repeat(pa.scalar(self.commit_lsn, mtype), n)
            elif kind == CDC_COMMIT_TS:
                arr = pa.repeat(pa.scalar(self.commit_ts_us, mtype), n)
            elif texts:
                arr = pa.array([texts.get(i) for i in range(n)], type=_PG_TEXT_TYPE)
            else:
                arr = pa.nulls(n, _PG_TEXT_TYPE)
            arrays.append(_to_file_type(arr, f.type))
        if n and texts and CDC_PG_TEXT not in self.file_schema.names:
            raise LakeError(f"mirror of {self.table}: values without a typed representation "
                            f"need the {CDC_PG_TEXT} column, which the table lacks")
        return pa.Table.from_arrays(arrays, schema=self.file_schema)

    def _column(self, lc: LiveColumn, col: list[str | None],
                texts: dict[int, dict[str, str]]) -> pa.Array:
        """One column's values in the change stream's Arrow type (the codec's), value by
        value; a value without one is NULL, its text kept in ``texts`` (row -> attnum)."""
        parse = lc.codec.value_from_text
        try:
            values: list[Any] = [None if s is None else parse(s) for s in col]
        except NotTypeable:  # rare: redo this column value by value
            values = []
            key = str(lc.column.attnum)
            for i, s in enumerate(col):
                if s is None:
                    values.append(None)
                    continue
                try:
                    values.append(parse(s))
                except NotTypeable:
                    values.append(None)
                    texts.setdefault(i, {})[key] = s
        try:
            return pa.array(values, type=lc.codec.arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as exc:
            raise LakeError(f"{self.table}: values of column {lc.column.name} do not fit "
                            f"the change stream's type {lc.codec.arrow_type}: {exc}") from exc

    def _cast(self, arr: pa.Array, target: pa.DataType, lc: LiveColumn) -> pa.Array:
        if arr.type == target:
            return arr
        try:
            return pc.cast(arr, target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise LakeError(f"mirror of {self.table}: column {lc.column.name} "
                            f"({arr.type} in the change stream) cannot be stored as {target} "
                            f"without loss: {exc}") from exc


def _to_file_type(arr: pa.Array, file_type: pa.DataType) -> pa.Array:
    """The mirror's Arrow type -> pyiceberg's file layout of it (large strings and lists,
    the uuid extension): a change of representation, never of value."""
    if arr.type == file_type:
        return arr
    return arr.cast(file_type, safe=True)


def counts_only_columns(table: pa.Table) -> list[str]:
    """Top-level columns holding a value pyiceberg cannot turn into a bound (BC dates, years
    past 9999, ±infinity): the driver sets ``write.metadata.metrics.column.<name>=counts``
    for them before building DataFiles (see :mod:`cdclake.lake.metrics`)."""
    return [name for name in table.column_names if needs_counts_only(table.column(name))]


# -- vectorized conversions ------------------------------------------------------------------
#
# Each reads exactly the output of one codec's ``value_from_text`` parser, and only the plain
# form of it. The text comes from PostgreSQL's output functions under SESSION_SETTINGS, so each
# type prints in a few forms only; where Arrow's kernel would read a non-plain form at all, it
# is refused by a guard made of byte comparisons (the ``n`` of NaN and Infinity in a float, a
# timestamptz's ``+00`` end, bytea's ``\x`` and even length, an array's one ``{``); elsewhere
# the kernel itself refuses every non-plain form (BC, infinity, years past 9999, bounds,
# dimensions, an integer beyond its type, a decimal beyond its precision). A refusal sends the
# column value by value: the codec then decides, as it always did. (An RE2 expression per
# value guarded every column once: 22% of a snapshot task's time on the bench's wide table.)

#: 00:00:00 .. 23:59:59.999999 (24:00:00 has no Arrow time: NotTypeable, value by value)
_TIME_RE = r"^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?$"

#: what a kernel raises on a value it cannot read
_REFUSED = (pa.ArrowException, ValueError)


def _family(codec: Codec) -> str | None:
    """Which text a codec reads, by the parser it wraps and its Arrow type — never by the
    type's name: a domain over int4 reads like int4. None for a parser without a fast form."""
    parser = getattr(codec.value_from_text, "__wrapped__", None)
    t = codec.arrow_type
    if parser is codecs.as_is:
        return "text" if t == pa.string() else None
    if parser is int and pa.types.is_integer(t):
        return "integer"
    if (parser is float and t == pa.float64()) or \
            (parser is codecs.float4_from_text and t == pa.float32()):
        return "float"
    if parser is numeric.decimal_from_text and pa.types.is_decimal128(t):
        return "numeric"
    if pa.types.is_list(t) and pa.types.is_integer(t.value_type) \
            and getattr(parser, "element", None) == (int, ","):
        return "int_list"
    return next((family for family, (p, types) in _PARSERS.items()
                 if parser is p and any(t == x for x in types)), None)


#: the other families: their parser, and the Arrow types it gives
_PARSERS: dict[str, tuple[Any, tuple[pa.DataType, ...]]] = {
    "bool": (scalars.bool_from_text, (pa.bool_(),)),
    "date": (datetimes.date_value_from_text, (pa.date32(),)),
    "time": (datetimes.time_value_from_text, (pa.time64("us"),)),
    "timestamp": (datetimes.timestamp_value_from_text, (pa.timestamp("us"),)),
    "timestamptz": (datetimes.timestamp_value_from_text, (pa.timestamp("us", tz="UTC"),)),
    "uuid": (scalars.uuid_from_text, (pa.binary(16),)),
    "bytea": (scalars.bytea_from_text, (pa.binary(),)),
}


def vectorized(codec: Codec) -> Vectorized | None:
    """The Arrow-kernel form of ``codec.value_from_text`` over a column, or None (a parser
    without a kernel here has no fast form). The form returns None for a column it does not
    read exactly."""
    family = _family(codec)
    t = codec.arrow_type
    if family == "text":
        return _as_is
    if family in ("integer", "date", "timestamp", "numeric"):
        fast: Vectorized | None = _cast(t)
    elif family == "float":
        fast = _float(t)
    elif family == "int_list":
        fast = _int_list(t)
    else:
        fast = {"bool": _bool, "time": _time, "timestamptz": _timestamptz, "uuid": _uuid,
                "bytea": _bytea}.get(family or "")
    return None if fast is None else _refusing(fast)


#: the base types whose binary form each kind reads; the kind also needs the codec below
BINARY_KINDS: dict[str, tuple[int, ...]] = {
    "int16": (21,), "int32": (23,), "int64": (20,), "float32": (700,), "float64": (701,),
    "bool": (16,), "text": (25, 1043, 1042, 19, 114), "jsonb": (3802,), "bytea": (17,),
    "uuid": (2950,), "date": (1082,), "timestamp": (1114, 1184), "numeric": (1700,),
}
#: numeric_out of the values a decimal cannot hold, by the code the binary reader gives them
_NUMERIC_SPECIALS = {1: "NaN", 2: "Infinity", 3: "-Infinity"}
#: the code of a timestamp past Arrow's range (its value comes with it)
_TIMESTAMP_BEYOND = 4
#: the Arrow type a kind's buffers are laid out as, where it is not the codec's
_BINARY_TYPES = {"bool": pa.uint8(), "text": pa.string(), "jsonb": pa.string()}
#: (type oid, its output function schema-qualified and quoted, the type's name as regtype
#: prints it) of the types ``{oids}`` (oids joined by commas): for
#: :meth:`CopyRows.binary_statement`, in a session whose search path is pg_catalog's
OUTPUT_FUNCTIONS = (
    "SELECT t.oid, pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) '.' "
    "OPERATOR(pg_catalog.||) pg_catalog.quote_ident(p.proname), "
    "t.oid::pg_catalog.regtype::pg_catalog.text "
    "FROM pg_catalog.pg_type t JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) "
    "t.typoutput JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) "
    "p.pronamespace WHERE t.oid OPERATOR(pg_catalog.=) ANY ('{{{oids}}}'::pg_catalog.oid[])")


def binary_kind(codec: Codec, base: int) -> str:
    """How COPY's binary format gives a column of base type ``base`` read by ``codec``: a
    kind whose value is the stream's (by the codec's text family, as :func:`vectorized`
    chooses), or ``"output"`` (the output function's text)."""
    family = _family(codec)
    t = codec.arrow_type
    if family == "integer":
        kind = {pa.int16(): "int16", pa.int32(): "int32", pa.int64(): "int64"}.get(t, "output")
    elif family == "float":
        kind = "float32" if t == pa.float32() else "float64"
    elif family == "text":
        kind = "jsonb" if base == 3802 else "text"
    elif family == "timestamptz":
        kind = "timestamp"
    else:
        kind = family or "output"
    return kind if base in BINARY_KINDS.get(kind, ()) else "output"


def _refusing(fast: Vectorized) -> Vectorized:
    def convert(strings: pa.Array) -> pa.Array | None:
        try:
            return fast(strings)
        except _REFUSED:
            return None

    return convert


def _all(mask: pa.Array) -> bool:
    """Every non-null entry of ``mask`` is true (an all-null mask is)."""
    return bool(pc.all(mask, min_count=0).as_py())


def _cast(target: pa.DataType) -> Vectorized:
    """Arrow's cast, which reads the plain form and refuses every other form PostgreSQL
    prints for the type (an integer, a date, a timestamp without time zone, a numeric)."""
    def convert(strings: pa.Array) -> pa.Array:
        return pc.cast(strings, target, safe=True)

    return convert


def _float(target: pa.DataType) -> Vectorized:
    """float4out/float8out's shortest-exact digits; NaN and ±Infinity (the only forms with an
    ``n``) go value by value. Arrow's string -> float32/float64 is correctly rounded (round
    half even), as the codecs are."""
    def convert(strings: pa.Array) -> pa.Array | None:
        if pc.any(pc.match_substring(strings, "n"), min_count=0).as_py():
            return None
        return pc.cast(strings, target, safe=True)

    return convert


def _plain(strings: pa.Array, pattern: str) -> bool:
    """Every non-null value matches ``pattern`` (a column of NULLs does)."""
    if strings.null_count == len(strings):
        return True
    return _all(pc.match_substring_regex(strings, pattern))


def _as_is(strings: pa.Array) -> pa.Array:
    return strings


def _bool(strings: pa.Array) -> pa.Array | None:
    true = pc.equal(strings, "t")
    if not _all(pc.or_(true, pc.equal(strings, "f"))):
        return None
    return true


def _timestamptz(strings: pa.Array) -> pa.Array | None:
    if not _all(pc.ends_with(strings, "+00")):  # TimeZone UTC; a BC one ends in " BC"
        return None
    naive = pc.cast(pc.utf8_slice_codeunits(strings, 0, -3), pa.timestamp("us"), safe=True)
    # the text is UTC: the same µs since 1970, now marked as UTC (a change of metadata)
    return naive.cast(pa.timestamp("us", tz="UTC"))


def _time(strings: pa.Array) -> pa.Array | None:
    if not _plain(strings, _TIME_RE):
        return None
    at_epoch = pc.cast(pc.binary_join_element_wise("1970-01-01 ", strings, ""),
                       pa.timestamp("us"), safe=True)
    return at_epoch.cast(pa.int64()).cast(pa.time64("us"))


def _offsets(strings: pa.Array) -> pa.Array:
    """The int32 value offsets of a (possibly sliced) string array, ``len + 1`` of them."""
    return pa.Array.from_buffers(pa.int32(), len(strings) + 1, [None, strings.buffers()[1]],
                                 offset=strings.offset)


def _unhex(hexes: pa.Array) -> tuple[bytes, pa.Array]:
    """The bytes of a string array of hex digits (no nulls), and its offsets from 0."""
    offsets = _offsets(hexes)
    first = offsets[0].as_py()
    last = offsets[-1].as_py()
    data = hexes.buffers()[2]
    raw = binascii.unhexlify(memoryview(data)[first:last]) if last > first else b""
    return raw, pc.subtract(offsets, pa.scalar(first, pa.int32()))


def _with_nulls(strings: pa.Array, arr: pa.Array) -> pa.Array:
    if not strings.null_count:
        return arr
    return pc.if_else(pc.is_valid(strings), arr, pa.scalar(None, arr.type))


def _uuid(strings: pa.Array) -> pa.Array | None:
    hexes = pc.replace_substring(strings, "-", "").fill_null("0" * 32)
    lengths = pc.min_max(pc.binary_length(hexes))
    if lengths["min"].as_py() != 32 or lengths["max"].as_py() != 32:  # uuid_out: 8-4-4-4-12
        return None
    raw, _ = _unhex(hexes)
    arr = pa.Array.from_buffers(pa.binary(16), len(strings), [None, pa.py_buffer(raw)])
    return _with_nulls(strings, arr)


def _bytea(strings: pa.Array) -> pa.Array | None:
    # bytea_output hex: "\\x" and two digits a byte (unhexlify refuses any other digit)
    if not _all(pc.starts_with(strings, "\\x")) or \
            not _all(pc.equal(pc.bit_wise_and(pc.binary_length(strings), 1), 0)):
        return None
    hexes = pc.utf8_slice_codeunits(strings, 2).fill_null("")
    raw, offsets = _unhex(hexes)
    half = pc.shift_right(offsets, pa.scalar(1, pa.int32()))  # every value has even length
    if half.offset:  # a kernel handing back a slice: its buffer would not start at row 0
        return None
    arr = pa.Array.from_buffers(pa.binary(), len(strings),
                                [None, half.buffers()[1], pa.py_buffer(raw)])
    return _with_nulls(strings, arr)


def _int_list(list_type: pa.DataType) -> Vectorized:
    element = list_type.value_type

    def convert(strings: pa.Array) -> pa.Array | None:
        # one "{": no "[lb:ub]=" prefix, one dimension; the element cast refuses the rest
        if not _all(pc.starts_with(strings, "{")) or \
                not _all(pc.equal(pc.count_substring(strings, "{"), 1)):
            return None
        inner = pc.utf8_slice_codeunits(strings.fill_null("{}"), 1, -1)  # "1,NULL,3" or ""
        parts = pc.split_pattern(inner, ",")
        # "" splits into [""]: that is the empty array; no element of a longer one is ""
        lengths = pc.if_else(pc.equal(inner, ""), pa.scalar(0, pa.int32()),
                             pc.list_value_length(parts))
        flat = pc.list_flatten(parts)
        flat = flat.filter(pc.not_equal(flat, ""))
        flat = pc.if_else(pc.equal(flat, "NULL"), pa.scalar(None, pa.string()), flat)
        values = pc.cast(flat, element, safe=True)
        offsets = pa.concat_arrays([pa.array([0], pa.int32()),
                                    pc.cumulative_sum(lengths).cast(pa.int32())])
        mask = pc.is_null(strings) if strings.null_count else None
        return pa.ListArray.from_arrays(offsets, values, type=list_type, mask=mask)

    return convert
