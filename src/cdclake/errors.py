"""Every error cdclake raises on purpose, in one flat module.

Each names *what* went wrong and *where* (segment, LSN, relation, table) so an operator can act
without reading a traceback. They all derive from :class:`CdclakeError`; the CLI prints the
message and exits non-zero. Errors that a retry can fix (a store that did not answer) are kept
apart from those a retry cannot fix (corrupt WAL, a conflicting segment).
"""

from __future__ import annotations

import re

#: a password in a connection URL (``scheme://user:PASSWORD@host``) or a keyword/value
#: connection string (``password=PASSWORD``, quoted or not)
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s]*(@)", re.IGNORECASE)
_KW_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]+)", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with every connection password replaced by ``***``: messages, logs and
    reports may name a DSN, never its secret."""
    return _KW_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1***\2", text))


def _fmt_lsn(lsn: int | None) -> str:
    if lsn is None:
        return "?"
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


class CdclakeError(Exception):
    """Base class: an error cdclake reports to the user, with what and where."""


class ConfigError(CdclakeError):
    """A configuration value is missing or malformed."""


# --- WAL -----------------------------------------------------------------------------------


class WalError(CdclakeError):
    """A WAL file cannot be read as PostgreSQL WAL."""

    def __init__(self, message: str, *, segment: str | None = None, lsn: int | None = None):
        self.segment = segment
        self.lsn = lsn
        where = []
        if segment is not None:
            where.append(f"segment {segment}")
        if lsn is not None:
            where.append(f"LSN {_fmt_lsn(lsn)}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)


class WalCorruptError(WalError):
    """Bytes that cannot be valid WAL: bad CRC, bad header, impossible lengths."""


class SegmentDigestError(WalCorruptError):
    """A segment read back from the store is not the bytes its manifest entry recorded when
    it was archived (sha256): damaged or replaced in the store. Record CRCs do not cover every
    byte (a record's alignment padding, a page's unused tail), so the digest is checked too."""


class WalTruncatedError(WalError):
    """A record or page is cut off: the segment is shorter than the record needs."""


class WalVersionError(WalError):
    """The page magic is not one of the PostgreSQL versions cdclake reads (15-18)."""


class WalGapError(WalError):
    """A segment the reader needs is missing between two it has."""


class EndOfWal(Exception):
    """Not an error: valid WAL ends here (the reason in ``args[0]``), and the reader's records
    end (:mod:`cdclake.wal.reader`, whose two builds, Python and compiled, raise and catch
    this one class).

    ``lsn`` is where the end was found when that is past the record being read (a record
    continuing into a segment that is absent or recycled): whether valid WAL resumes after
    the end must be judged from there, not from the record's start.
    """

    def __init__(self, reason: str, lsn: int | None = None) -> None:
        super().__init__(reason)
        self.lsn = lsn


# --- catalog / tuples ------------------------------------------------------------------------


class UnknownRelationError(CdclakeError):
    """A change names a relfilenode that no dictionary version explains."""

    def __init__(self, relfilenode: object, lsn: int, hint: str = ""):
        self.relfilenode = relfilenode
        self.lsn = lsn
        msg = (
            f"unknown relation: relfilenode {relfilenode} at LSN {_fmt_lsn(lsn)} is not in the "
            "dictionary; run `cdclake source install` on the source and decode from WAL that "
            "includes the install"
        )
        super().__init__(f"{msg}. {hint}" if hint else msg)


class UnsupportedTypeError(CdclakeError):
    """A value of a column's type cannot be printed
    (:class:`cdclake.tuples.untypeable.NoTextOutput`)."""

    def __init__(self, type_name: str, column: str, relation: str | None = None):
        self.type_name = type_name
        self.column = column
        self.relation = relation
        where = f" of {relation}" if relation else ""
        super().__init__(
            f"unsupported type {type_name!r} in column {column!r}{where}: cdclake cannot "
            "print its values; exclude the table (CDCLAKE_EXCLUDE_TABLES) or add a codec"
        )


class TupleDecodeError(CdclakeError):
    """Tuple bytes do not match the relation version they are decoded with."""


class SourceError(CdclakeError):
    """The source PostgreSQL is not set up the way cdclake needs (wal_level, install)."""


# --- decoding --------------------------------------------------------------------------------


class DecodingError(CdclakeError):
    """The change stream cannot be reconstructed exactly from the WAL given."""


class SpillError(DecodingError):
    """A spill file is missing, unreadable, or does not belong to the transaction."""


# --- archive / object store -----------------------------------------------------------------


class StoreError(CdclakeError):
    """The object store did not do what was asked; retrying may help."""


class StoreUnreachableError(StoreError):
    """The object store cannot be reached at all."""


class ArchiveConflictError(CdclakeError):
    """A segment already in the archive has different content: do not overwrite, do not retry."""


class ArchiveGapError(CdclakeError):
    """The archive misses a segment between two it has; nothing past the gap is processed."""


class ConcurrentRunError(CdclakeError):
    """Another run holds the stream's lease or committed first (cdclake.archive.lease); this
    run changed nothing that run relies on. Try again when it has finished."""


class ObjectNotFound(CdclakeError):
    """An object-store key does not exist; retrying does not help."""


class ManifestError(CdclakeError):
    """An archive bookkeeping object (manifest entry, history file) cannot be read."""


# --- lake / quality -------------------------------------------------------------------------


class LakeError(CdclakeError):
    """An Iceberg table cannot be created, evolved or merged."""


class QualityError(CdclakeError):
    """A data-quality expectation failed; the message summarises which and where."""


class TableMergeBug(Exception):
    """A table's merge failed in a way cdclake did not foresee (a bug), raised once the run's
    report is written and the other tables committed; its message ends with that table's
    traceback, which the CLI keeps in the home's log."""


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (its type's name when it has none), redacted."""
    return redact((str(exc).strip().splitlines() or [type(exc).__name__])[0])


def unforeseen(exc: BaseException) -> str:
    """One line for an exception cdclake did not raise on purpose (a bug): its type and the
    first line of its message, no secret in it. Its traceback goes to a log, not the user."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return redact(f"internal error: {type(exc).__name__}: {first}")


def rebuild(name: str, message: str, attrs: dict[str, object] | None = None) -> CdclakeError:
    """The error of cdclake's own class ``name`` (``CdclakeError`` for any other name) with
    ``message`` as its text and ``attrs`` (segment, lsn, ...) as its attributes.

    How an error comes back from another process, where only text travels: a Spark task's
    (:func:`cdclake.sparkenv.tasks.task`), a submitted Spark application's
    (:mod:`cdclake.pipeline.submit`). The caller sees the same class and the same line as if
    it had been raised here; the class's ``__init__`` is not run again (its arguments are
    not the message)."""
    cls = globals().get(name)
    if not (isinstance(cls, type) and issubclass(cls, CdclakeError)):
        cls = CdclakeError
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    exc.__dict__.update(attrs or {})
    return exc
