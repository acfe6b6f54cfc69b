"""What one pipeline run is asked to do: the knobs shared by ``cdclake run`` and the DAG.

The DAG's trigger form and the CLI both end up here, so a run means the same thing whichever
started it. Everything is validated once, up front: a typo in an LSN must fail the first
task, not the merge twenty minutes later.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from cdclake.errors import ConfigError
from cdclake.lsn import format_lsn, format_lsn_or_none, is_segment_name, parse_lsn


@dataclass(frozen=True, slots=True)
class RunParams:
    """Parameters of one run; the empty default is "the next batch, every table, for real"."""

    #: the stream's first batch emits transactions committing at or after this LSN (later
    #: batches continue from the decoder's saved progress and ignore it); None = from the start
    start_lsn: int | None = None
    #: decode no further than the segment holding this LSN (inclusive); None = all shipped
    end_lsn: int | None = None
    #: decode no further than this segment (inclusive); wins over ``end_lsn`` when both given
    until_segment: str | None = None
    #: merge (and validate) only these ``schema.table``; the others catch up on the next run
    tables: tuple[str, ...] = field(default_factory=tuple)
    #: plan and check, but upload, decode-write and commit nothing
    dry_run: bool = False
    #: take the initial snapshot of these ``schema.table`` again, replacing their mirrors
    snapshot_tables: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> RunParams:
        """From the DAG's ``params`` (or any dict): LSNs as ``'0/1A2B3C'``, tables as a list
        or a comma-separated string. Unknown keys are ignored (Airflow adds its own)."""
        data = dict(data or {})
        end = data.get("end_lsn")
        until = data.get("until_segment") or None
        params = cls(start_lsn=_lsn(data.get("start_lsn"), "start_lsn"),
                     end_lsn=_lsn(end, "end_lsn"), until_segment=until,
                     tables=table_list(data.get("tables")), dry_run=_bool(data.get("dry_run")),
                     snapshot_tables=table_list(data.get("snapshot_tables")))
        params.check()
        return params

    def check(self) -> None:
        """Raise ConfigError for a parameter that cannot mean anything."""
        if self.until_segment is not None and not is_segment_name(self.until_segment):
            raise ConfigError(f"until_segment {self.until_segment!r} is not a WAL segment name "
                              "(24 hex digits, e.g. 000000010000000000000003)")
        if (self.start_lsn is not None and self.end_lsn is not None
                and self.end_lsn < self.start_lsn):
            raise ConfigError(f"end_lsn {format_lsn(self.end_lsn)} is before start_lsn "
                              f"{format_lsn(self.start_lsn)}")
        for t in (*self.tables, *self.snapshot_tables):
            if t.count(".") != 1 or not all(t.split(".")):
                raise ConfigError(f"table {t!r}: give tables as schema.table")

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for name in ("start_lsn", "end_lsn"):
            value = getattr(self, name)
            out[name] = format_lsn_or_none(value)
        out["tables"] = list(self.tables)
        out["snapshot_tables"] = list(self.snapshot_tables)
        return out


def table_list(value: Any) -> tuple[str, ...]:
    """Tables as a list or a comma-separated string (empty: none)."""
    if not value:
        return ()
    if isinstance(value, str):
        value = value.split(",")
    return tuple(t for t in (str(x).strip() for x in value) if t)


def _lsn(value: Any, name: str) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return parse_lsn(str(value).strip())
    except ValueError as exc:
        raise ConfigError(f"{name} {value!r} is not an LSN: write it as PostgreSQL prints "
                          "it, e.g. 0/1A2B3C8") from exc


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)
