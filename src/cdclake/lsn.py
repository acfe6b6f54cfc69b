"""LSN arithmetic, WAL segment file names and timeline history files.

An LSN is a 64-bit byte position in the WAL stream, written ``HI/LO`` in hex (``0/1500800``).
A segment file name is three 8-digit hex numbers: timeline, then the segment number split into
"log" (segno // segments-per-4GiB) and "seg" (segno % segments-per-4GiB), so the name depends on
the segment size.  Facts from PostgreSQL's access/xlog_internal.h.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from cdclake.errors import WalError

DEFAULT_SEGMENT_SIZE = 16 * 1024 * 1024
INVALID_LSN = 0

_LSN_RE = re.compile(r"^([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})$")
_SEGMENT_RE = re.compile(r"^([0-9A-F]{8})([0-9A-F]{8})([0-9A-F]{8})(\.partial)?$")
_HISTORY_RE = re.compile(r"^([0-9A-F]{8})\.history$")


def parse_lsn(text: str) -> int:
    """``'16/B374D848'`` -> int. Raises ValueError naming the bad text."""
    m = _LSN_RE.match(text.strip())
    if not m:
        raise ValueError(f"not an LSN: {text!r} (expected HI/LO in hex, e.g. 0/1500800)")
    return (int(m.group(1), 16) << 32) | int(m.group(2), 16)


def format_lsn(lsn: int) -> str:
    """int -> ``'16/B374D848'``, as PostgreSQL prints it (upper-case hex, no padding)."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def format_lsn_or_none(lsn: int | None) -> str | None:
    """For reports: an LSN as PostgreSQL prints it, or None where there is none yet."""
    return None if lsn is None else format_lsn(lsn)


def segments_per_xlogid(segment_size: int) -> int:
    return 0x100000000 // segment_size


def segment_name(timeline: int, segno: int, segment_size: int = DEFAULT_SEGMENT_SIZE) -> str:
    per = segments_per_xlogid(segment_size)
    return f"{timeline:08X}{segno // per:08X}{segno % per:08X}"


@dataclass(frozen=True, slots=True)
class SegmentName:
    """A parsed segment file name."""

    timeline: int
    segno: int
    partial: bool = False

    def start_lsn(self, segment_size: int = DEFAULT_SEGMENT_SIZE) -> int:
        return self.segno * segment_size

    def name(self, segment_size: int = DEFAULT_SEGMENT_SIZE) -> str:
        base = segment_name(self.timeline, self.segno, segment_size)
        return base + ".partial" if self.partial else base


def parse_segment_name(name: str, segment_size: int = DEFAULT_SEGMENT_SIZE) -> SegmentName:
    """Parse ``000000010000000A000000FE`` (optionally ``.partial``)."""
    m = _SEGMENT_RE.match(name)
    if not m:
        raise ValueError(f"not a WAL segment file name: {name!r}")
    per = segments_per_xlogid(segment_size)
    log, seg = int(m.group(2), 16), int(m.group(3), 16)
    if seg >= per:
        raise ValueError(
            f"segment file name {name!r} does not fit a {segment_size}-byte segment size"
        )
    return SegmentName(int(m.group(1), 16), log * per + seg, m.group(4) is not None)


def is_segment_name(name: str) -> bool:
    return _SEGMENT_RE.match(name) is not None


def is_history_name(name: str) -> bool:
    return _HISTORY_RE.match(name) is not None


def segno_of(lsn: int, segment_size: int = DEFAULT_SEGMENT_SIZE) -> int:
    return lsn // segment_size


def segment_offset(lsn: int, segment_size: int = DEFAULT_SEGMENT_SIZE) -> int:
    return lsn % segment_size


def check_segment_size(size: int) -> int:
    """PostgreSQL allows powers of two from 1 MiB to 1 GiB."""
    if size < 1 << 20 or size > 1 << 30 or size & (size - 1):
        raise WalError(f"invalid WAL segment size {size}: must be a power of two, 1MB-1GB")
    return size


@dataclass(frozen=True, slots=True)
class TimelineSwitch:
    """One line of a ``.history`` file: ``parent`` timeline ended at ``switch_lsn``."""

    parent: int
    switch_lsn: int
    reason: str


def parse_history(text: str, history_file: str = "<history>") -> list[TimelineSwitch]:
    """Parse a timeline history file (``<TLI>.history``): ``parentTLI <tab> LSN <tab> reason``.

    Comment and blank lines are skipped, like PostgreSQL's readTimeLineHistory.
    """
    out: list[TimelineSwitch] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 2)
        try:
            tli = int(parts[0])
            lsn = parse_lsn(parts[1])
        except (IndexError, ValueError) as exc:
            raise WalError(f"malformed timeline history line {lineno}: {raw!r}",
                           segment=history_file) from exc
        if out and tli <= out[-1].parent:
            raise WalError(f"timeline IDs must be increasing in history line {lineno}",
                           segment=history_file)
        out.append(TimelineSwitch(tli, lsn, parts[2] if len(parts) > 2 else ""))
    return out


def timeline_of_lsn(history: Sequence[TimelineSwitch], current_tli: int, lsn: int) -> int:
    """Which timeline a record at ``lsn`` belongs to, given the newest timeline's history."""
    for entry in history:
        if lsn < entry.switch_lsn:
            return entry.parent
    return current_tli
