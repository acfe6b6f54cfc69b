"""Authenticated ``cdclake.ddl`` messages: only cdclake's own triggers can change the dictionary.

Any role may call ``pg_logical_emit_message`` (PUBLIC can execute it), so the WAL alone cannot
tell a message cdclake's event triggers wrote from one a non-superuser wrote to retype, rename
or "drop" a table in every decoder's dictionary. ``cdclake source install`` therefore has the
server make a 64-byte key in a 0600 file of its data directory, which only superusers can read
through SQL (a table would put it into the WAL, and so into the archive and every logical slot;
a statement would put it into the server's log), and ``cdclake.emit`` (called by the SECURITY
DEFINER triggers, which run as the installing superuser; no other role may call it) signs
every message it writes::

    cdclake-hmac-sha256 <xid8> <hex HMAC-SHA256(key, "<xid8>\\n" || body)>\\n<body>

``xid8`` is the emitting transaction's top-level id with its epoch (``pg_current_xact_id()``).
Binding it into the MAC stops a replay: a genuine message copied into another transaction
carries the wrong id. Its low 32 bits must be the committing transaction's xid, which the WAL
gives; the epoch lets the decoder refuse an id from a past wraparound
(:func:`stale_epoch`). PostgreSQL has SHA-256 but no HMAC without pgcrypto, so the server
computes HMAC from its definition with the key's inner and outer pads stored beside it; for a
key of SHA-256's block size that is exactly :func:`hmac.new`.

The decoder gets the same key as configuration (a 0600 file ``cdclake source install``
writes, or read from the source by a role allowed to): :func:`load_key`.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

from cdclake.config import Config
from cdclake.errors import ConfigError, SourceError, redact

#: the prefix of cdclake's logical messages
DDL_PREFIX = "cdclake.ddl"
SCHEME = b"cdclake-hmac-sha256"
#: SHA-256's block size: a key this long is used by HMAC as it is
KEY_BYTES = 64
XID_MASK = 0xFFFFFFFF


class ForgedMessage(ValueError):
    """A ``cdclake.ddl`` message cdclake's triggers did not write; says why."""


def new_key() -> bytes:
    """A key of the source's kind (tools and tests sign with one; a source's own is made on
    its server, ``cdclake.new_key()``)."""
    return secrets.token_bytes(KEY_BYTES)


def pads(key: bytes) -> tuple[bytes, bytes]:
    """HMAC's inner and outer keys (``key`` xor 0x36…, xor 0x5c…), which the server stores."""
    if len(key) != KEY_BYTES:
        raise ValueError(f"a cdclake ddl key has {KEY_BYTES} bytes, not {len(key)}")
    return bytes(b ^ 0x36 for b in key), bytes(b ^ 0x5C for b in key)


def _mac(key: bytes, xid8: int, body: bytes) -> bytes:
    return hmac.new(key, b"%d\n" % xid8 + body, hashlib.sha256).digest()


def sign(key: bytes, xid8: int, body: bytes) -> bytes:
    """The message content ``cdclake.emit`` writes for ``body`` in transaction ``xid8``."""
    return b"%s %d %s\n%s" % (SCHEME, xid8, _mac(key, xid8, body).hex().encode(), body)


def open_signed(key: bytes, content: bytes, xid: int) -> tuple[int, bytes]:
    """``(xid8, body)`` of a message written by cdclake in top-level transaction ``xid``;
    raises :class:`ForgedMessage` for anything else."""
    header, sep, body = bytes(content).partition(b"\n")
    parts = header.split(b" ")
    if not sep or len(parts) != 3 or parts[0] != SCHEME:
        raise ForgedMessage("it is not signed")
    try:
        xid8 = int(parts[1])
        mac = bytes.fromhex(parts[2].decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        raise ForgedMessage("its signature header is malformed") from None
    if not hmac.compare_digest(mac, _mac(key, xid8, body)):
        raise ForgedMessage("its signature does not match the key")
    if xid8 & XID_MASK != xid:
        raise ForgedMessage(f"it was signed for transaction {xid8}, not in transaction {xid}")
    return xid8, body


def stale_epoch(xid8: int, newest: int) -> bool:
    """Whether ``xid8`` lies a wraparound or more behind the newest id accepted so far: its
    32-bit xid came round again, so this is a copy of an old message, not a new one.
    (Transactions committing out of id order are never 2^31 ids apart.)"""
    return xid8 < newest - (1 << 31)


# -- the key as configuration --------------------------------------------------------------


def read_key_file(path: Path) -> bytes:
    """The key in ``path`` (hex), which only its owner may read: anyone who can read it can
    forge schema changes."""
    try:
        st = path.stat()
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the ddl key file {path}: {exc.strerror}") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"the ddl key file {path} may be read by others "
                          f"(mode {stat.S_IMODE(st.st_mode):04o}): chmod 600 it")
    try:
        key = bytes.fromhex(raw.decode("ascii").strip())  # UnicodeDecodeError is a ValueError
        pads(key)
    except ValueError as exc:
        raise ConfigError(f"the ddl key file {path} does not hold a cdclake key: {exc}") from None
    return key


def write_key_file(path: Path, key: bytes) -> bool:
    """Keep ``key`` in ``path`` (mode 0600, created with it, never briefly readable); whether
    the file was written. A file already holding another key is refused: it is the key of
    another source, which decoding that source still needs."""
    if path.exists():
        if read_key_file(path) != key:
            raise ConfigError(f"the ddl key file {path} holds the key of another source: "
                              "give this source its own (CDCLAKE_DDL_KEY_FILE)")
        return False
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key.hex() + "\n")
    return True


def fetch_key(conn) -> bytes:  # type: ignore[no-untyped-def]
    """The key from the source's key file, which only a superuser may read."""
    import psycopg

    try:
        row = conn.execute("SELECT pg_read_file(cdclake.key_path())").fetchone()
    except psycopg.Error as exc:
        raise SourceError(f"cannot read the ddl key from the source ({exc.diag.message_primary}): "
                          "connect as a superuser, or give the key file `cdclake source "
                          "install` wrote (CDCLAKE_DDL_KEY_FILE)") from None
    try:
        key = bytes.fromhex(row[0].split()[0])
        pads(key)
    except (ValueError, IndexError) as exc:
        raise SourceError(f"the source's ddl key file is damaged ({exc}): remove it and run "
                          "`cdclake source install` with the decoders' key file") from None
    return key


def key_path(config: Config) -> Path:
    """Where the key is kept for ``config``: CDCLAKE_DDL_KEY_FILE, else ``ddl.key`` in the
    home directory."""
    return config.ddl_key_file or config.home / "ddl.key"


def load_key(config: Config, dsn: str = "") -> bytes | None:
    """The key decoding authenticates ``cdclake.ddl`` messages with: the key file (which must
    exist when CDCLAKE_DDL_KEY_FILE names it), else read from the source through ``dsn``;
    None when there is neither, and decoding then refuses the first message it meets."""
    path = key_path(config)
    if config.ddl_key_file is not None or path.exists():
        return read_key_file(path)
    if not dsn:
        return None
    import psycopg

    from cdclake.catalog.connection import connect

    try:
        with connect(dsn) as conn:
            return fetch_key(conn)
    except psycopg.Error as exc:
        raise SourceError(f"cannot connect to the source database ({redact(dsn)}): "
                          f"{exc}") from None
