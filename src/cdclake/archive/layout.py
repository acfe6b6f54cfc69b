"""Where everything lives in the object store: the one place that formats keys.

The store URL is the stream's prefix (docs/architecture.md, "The object store")::

    wal/<TLI><LOG><SEG>[.zst]       segments as PostgreSQL wrote them (.partial, .backup too)
    wal/<TLI>.history               timeline history files
    manifest/system.json            the stream's identity: system id, version, segment size
    manifest/wal/<segment>.json     one entry per shipped segment (size, sha256, LSNs)
    dictionary/<batch>/g<G>.json    the dictionary a batch ended with
    spill/<batch>/g<G>/xid-<XID>-lsn-<HI>-<LO>.spill
    changes/<batch>/_manifest.json  a decoded batch (its parts' paths, under g<G>/)
    changes/<batch>/g<G>/<path>     the emitted change stream
    state/progress.json
    state/validated/<batch>.json    a batch's stream validation
    state/submitted/<token>.json    what a Spark step submitted by Airflow returned
    state/if-none-match-probe       at the store's root: S3 proves conditional writes on it
    reports/<path>

``g<G>`` is the decode lease's generation that wrote the object, its fencing token
(:mod:`cdclake.archive.lease`): a run writes and deletes only under its own.

Keeping key formatting here means a reader and a writer cannot disagree on a name, and the
inverse functions (``wal_file_of``, ``manifest_name_of``) let listings be parsed back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from cdclake.archive.store import check_key
from cdclake.lsn import DEFAULT_SEGMENT_SIZE, SegmentName

ZST_SUFFIX = ".zst"
#: at the root of an S3 store (not under a Layout's prefix: it is the endpoint's and bucket's
#: property), the object :class:`cdclake.archive.s3.S3Store` asks to create again
#: if-absent, once per store object, before it trusts If-None-Match
IF_NONE_MATCH_PROBE_KEY = "state/if-none-match-probe"

_SEGMENT_RE = re.compile(r"^[0-9A-F]{24}$")
_PARTIAL_RE = re.compile(r"^[0-9A-F]{24}\.partial$")
_HISTORY_RE = re.compile(r"^[0-9A-F]{8}\.history$")
_BACKUP_RE = re.compile(r"^[0-9A-F]{24}\.[0-9A-F]{8}\.backup$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_=+-][A-Za-z0-9._=+-]*$")


class WalFileKind(StrEnum):
    """The files PostgreSQL's archiver hands to ``archive_command``."""

    SEGMENT = "segment"
    PARTIAL = "partial"  #: the last, incomplete segment of a timeline left at promotion
    HISTORY = "history"
    BACKUP = "backup"  #: backup history file written by pg_backup_stop


def wal_file_kind(name: str) -> WalFileKind | None:
    """Which kind of archived WAL file ``name`` is, or None if PostgreSQL never archives it."""
    if _SEGMENT_RE.match(name):
        return WalFileKind.SEGMENT
    if _HISTORY_RE.match(name):
        return WalFileKind.HISTORY
    if _PARTIAL_RE.match(name):
        return WalFileKind.PARTIAL
    if _BACKUP_RE.match(name):
        return WalFileKind.BACKUP
    return None


def _name(value: str, what: str) -> str:
    if not _NAME_RE.match(value):
        raise ValueError(f"invalid {what} {value!r}: use letters, digits and . _ = + -")
    return value


@dataclass(frozen=True, slots=True)
class Layout:
    """Keys relative to the store root; ``prefix`` nests a stream deeper inside a store."""

    prefix: str = ""

    def _k(self, rel: str) -> str:
        return check_key(f"{self.prefix.strip('/')}/{rel}" if self.prefix.strip("/") else rel)

    def _p(self, rel: str) -> str:
        p = self.prefix.strip("/")
        return f"{p}/{rel}" if p else rel

    # -- WAL -----------------------------------------------------------------------------

    def wal_prefix(self) -> str:
        return self._p("wal/")

    def wal_key(self, name: str, *, compressed: bool = False) -> str:
        """Key of an archived WAL file (segment, history, partial or backup file)."""
        if wal_file_kind(name) is None:
            raise ValueError(f"not a WAL archive file name: {name!r}")
        return self._k(f"wal/{name}{ZST_SUFFIX if compressed else ''}")

    def segment_key(self, segment: SegmentName, segment_size: int = DEFAULT_SEGMENT_SIZE, *,
                    compressed: bool = False) -> str:
        return self.wal_key(segment.name(segment_size), compressed=compressed)

    def history_key(self, timeline: int) -> str:
        return self.wal_key(f"{timeline:08X}.history")

    def wal_file_of(self, key: str) -> tuple[str, bool] | None:
        """(file name, compressed) for a key under ``wal/``, or None for anything else."""
        prefix = self.wal_prefix()
        if not key.startswith(prefix):
            return None
        name = key[len(prefix):]
        compressed = name.endswith(ZST_SUFFIX)
        if compressed:
            name = name[: -len(ZST_SUFFIX)]
        return (name, compressed) if wal_file_kind(name) is not None else None

    # -- manifest ------------------------------------------------------------------------

    def system_key(self) -> str:
        return self._k("manifest/system.json")

    def manifest_prefix(self) -> str:
        return self._p("manifest/wal/")

    def manifest_key(self, segment_name: str) -> str:
        if wal_file_kind(segment_name) is not WalFileKind.SEGMENT:
            raise ValueError(f"manifest entries are per segment; not a segment: {segment_name!r}")
        return self._k(f"manifest/wal/{segment_name}.json")

    def manifest_name_of(self, key: str) -> str | None:
        """The segment name a manifest key is for, or None if it is not a manifest entry."""
        prefix = self.manifest_prefix()
        if not key.startswith(prefix) or not key.endswith(".json"):
            return None
        name = key[len(prefix):-len(".json")]
        return name if wal_file_kind(name) is WalFileKind.SEGMENT else None

    # -- the rest of the stream ----------------------------------------------------------

    @staticmethod
    def generation(generation: int) -> str:
        """The key component of lease generation ``generation`` (``g0000000042``): the
        fencing token in the key of everything that generation writes."""
        if not 0 <= generation < 10**10:
            raise ValueError(f"invalid lease generation {generation!r}")
        return f"g{generation:010d}"

    def dictionary_prefix(self, batch: str) -> str:
        """The dictionaries batch ``batch``'s decodes ended with, one per generation."""
        return self._p(f"dictionary/{_name(batch, 'batch name')}/")

    def dictionary_key(self, batch: str, generation: int) -> str:
        return check_key(f"{self.dictionary_prefix(batch)}{self.generation(generation)}.json")

    def spill_root(self) -> str:
        """The open transactions of every batch."""
        return self._p("spill/")

    def spill_prefix(self, batch: str, generation: int | None = None) -> str:
        """The open transactions batch ``batch`` carries out; of one generation's decode."""
        prefix = self._p(f"spill/{_name(batch, 'batch name')}/")
        return prefix if generation is None else f"{prefix}{self.generation(generation)}/"

    def spill_key(self, batch: str, xid: int, lsn: int, *, generation: int,
                  part: int | None = None) -> str:
        """PostgreSQL's spill name (ReorderBufferSerializedPath): LSN halves in upper hex;
        ``-p<part>`` for a part of a split transaction (:mod:`cdclake.decoding.carry`)."""
        if not 0 <= xid < 1 << 32 or not 0 <= lsn < 1 << 64:
            raise ValueError(f"spill key needs a 32-bit xid and 64-bit LSN, got {xid}, {lsn}")
        tail = "" if part is None else f"-p{part}"
        return check_key(f"{self.spill_prefix(batch, generation)}"
                       f"xid-{xid}-lsn-{lsn >> 32:X}-{lsn & 0xFFFFFFFF:X}{tail}.spill")

    def changes_root(self) -> str:
        """The directory of every decoded batch."""
        return self._p("changes/")

    def changes_prefix(self, batch: str, generation: int | None = None) -> str:
        """A batch's directory (its ``_manifest.json``), or one generation's objects in it."""
        prefix = f"{self.changes_root()}{_name(batch, 'batch name')}/"
        return prefix if generation is None else f"{prefix}{self.generation(generation)}/"

    def batch_manifest_key(self, batch: str, generation: int | None = None) -> str:
        """A batch's ``_manifest.json``: the one readers take, or one generation's, which that
        generation publishes there once its progress is committed (cdclake.spark.job)."""
        return check_key(f"{self.changes_prefix(batch, generation)}_manifest.json")

    def changes_key(self, batch: str, path: str) -> str:
        """A file of a batch; ``path`` is relative to the batch directory."""
        return self._k(f"changes/{_name(batch, 'batch name')}/{check_key(path)}")

    def progress_key(self) -> str:
        """The latest progress, for people and ``cdclake status``; the log is the truth."""
        return self._k("state/progress.json")

    def progress_log_prefix(self) -> str:
        return self._p("state/progress/")

    def progress_log_key(self, seq: int) -> str:
        """Progress after batch ``seq``, created once (cdclake.stream.progress)."""
        return self._k(f"state/progress/{seq:010d}.json")

    def validated_key(self, batch: str) -> str:
        """The record of batch ``batch``'s stream validation (cdclake.lake.validated)."""
        return self._k(f"state/validated/{_name(batch, 'batch name')}.json")

    def submitted_key(self, token: str) -> str:
        """What a submitted Spark step returns (cdclake.pipeline.submit): read, then removed."""
        return self._k(f"state/submitted/{_name(token, 'submission')}.json")

    def lease_prefix(self, name: str) -> str:
        """The generations of lease ``name`` (cdclake.archive.lease)."""
        return self._p(f"state/leases/{_name(name, 'lease name')}/")

    def reports_prefix(self) -> str:
        return self._p("reports/")

    def report_key(self, path: str) -> str:
        return self._k(f"reports/{check_key(path)}")
