"""Turning a logged heap tuple into column values, once per relation version's layout.

Both output plugins need the same steps per column — deform, detoast (reassembled chunks or an
unchanged on-disk pointer), decompress, run the type's codec — so the per-column decisions
(codec, literal style, printed prefix) are made once per relation version and cached.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cdclake.catalog.model import Column, RelationVersion, TypeInfo
from cdclake.errors import TupleDecodeError
from cdclake.lsn import format_lsn
from cdclake.tuples import heap
from cdclake.tuples.codecs import Codec, codec_for
from cdclake.tuples.desc import MissingValue
from cdclake.tuples.untypeable import NoTextOutput
from cdclake.tuples.varlena import is_external, parse_toast_pointer, payload, reassemble
from cdclake.wal.record import WalTuple

#: a value whose TOASTed datum was not logged because it did not change
UNCHANGED_TOAST = object()


@dataclass(frozen=True, slots=True)
class LiveColumn:
    column: Column
    codec: Codec
    index: int  #: position in the deformed tuple (attnum - 1)


class RowLayout:
    """A relation version's live columns with their codecs."""

    __slots__ = ("live", "ncolumns", "rel")

    def __init__(self, rel: RelationVersion, types: Mapping[int, TypeInfo]) -> None:
        self.rel = rel
        self.ncolumns = len(rel.columns)
        self.live = tuple(
            LiveColumn(c, codec_for(c.type_oid, c.typmod, types, column=c.name,
                                    relation=rel.qualified), c.attnum - 1)
            for c in rel.columns if not c.dropped)

    def datums(self, tup: WalTuple, lsn: int) -> list[object]:
        if tup.natts > self.ncolumns:
            raise TupleDecodeError(
                f"tuple at {format_lsn(lsn)} has {tup.natts} attributes but {self.rel.qualified} "
                f"(relfilenode {self.rel.relfilenode}, version from "
                f"{format_lsn(self.rel.valid_from)}) has {self.ncolumns}: the dictionary does "
                "not describe this tuple")
        return heap.deform(tup, self.rel.columns)


def column_payload(lc: LiveColumn, datum: object, toast: Mapping[int, list[bytes]]) -> object:
    """The bytes a codec reads, UNCHANGED_TOAST, or a MissingValue; ``datum`` is not None."""
    if isinstance(datum, MissingValue):
        return datum
    if lc.codec.typisvarlena:
        raw = datum  # type: ignore[assignment]
        if is_external(raw):  # type: ignore[arg-type]
            ptr = parse_toast_pointer(raw)  # type: ignore[arg-type]
            chunks = toast.get(ptr.valueid)
            if chunks is None:
                return UNCHANGED_TOAST
            return reassemble(ptr, chunks)
        return payload(raw)  # type: ignore[arg-type]
    return datum


def exact_text(lc: LiveColumn, v: object) -> str | None:
    """What ``_cdc_pg_text`` keeps of a value (a payload or a MissingValue) that its column's
    type cannot hold: its exact text; None when cdclake cannot print it at all."""
    if isinstance(v, MissingValue):
        return v.text
    try:
        return lc.codec.text(v)  # type: ignore[arg-type]
    except NoTextOutput:
        return None


class LayoutCache:
    """RowLayouts by relation version; codecs are built once per version.

    A version's codecs use the types as they were at its ``valid_from`` when ``types`` keeps
    their history (the dictionary's TypeCatalog): a type-level DDL gives the relations using
    the type a new version, so no cached codec outlives the facts it was built from.
    """

    def __init__(self, types: Mapping[int, TypeInfo]) -> None:
        self.types = types
        self._at = getattr(types, "at", None)
        self._cache: dict[int, RowLayout] = {}

    def get(self, rel: RelationVersion) -> RowLayout:
        key = id(rel)
        layout = self._cache.get(key)
        if layout is None or layout.rel is not rel:
            layout = self._cache[key] = RowLayout(rel, self.types_at(rel))
        return layout

    def types_at(self, rel: RelationVersion) -> Mapping[int, TypeInfo]:
        """The types as the version ``rel`` decodes with them."""
        return self.types if self._at is None else self._at(rel.valid_from)
