"""cdclake.ddl messages are authenticated: a key, the emitting transaction, the body."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
from pathlib import Path

import pytest

from cdclake.catalog.dictionary import Dictionary
from cdclake.catalog.signing import (
    ForgedMessage,
    key_path,
    load_key,
    new_key,
    open_signed,
    pads,
    read_key_file,
    sign,
    stale_epoch,
    write_key_file,
)
from cdclake.config import Config
from cdclake.decoding.changes import TxnInfo
from cdclake.decoding.reassembly import Replayer
from cdclake.errors import ConfigError, DecodingError
from tests.unit.catalog.messages import INT4, column, message, relation

KEY = new_key()
BODY = b'{"kind": "relations", "relations": []}'


def test_a_signed_message_opens_for_its_transaction_only() -> None:
    content = sign(KEY, 42 + (5 << 32), BODY)
    assert content.startswith(b"cdclake-hmac-sha256 21474836522 ")
    assert open_signed(KEY, content, 42) == (42 + (5 << 32), BODY)
    with pytest.raises(ForgedMessage, match="signed for transaction 21474836522, not in "
                                            "transaction 43"):
        open_signed(KEY, content, 43)
    with pytest.raises(ForgedMessage, match="does not match the key"):
        open_signed(new_key(), content, 42)
    with pytest.raises(ForgedMessage, match="does not match"):
        open_signed(KEY, content[:-1] + b"]", 42)  # the body changed
    with pytest.raises(ForgedMessage, match="does not match"):  # another xid8, same MAC
        open_signed(KEY, content.replace(b" 21474836522 ", b" 42 "), 42)
    with pytest.raises(ForgedMessage, match="not signed"):
        open_signed(KEY, BODY, 42)
    with pytest.raises(ForgedMessage, match="malformed"):
        open_signed(KEY, b"cdclake-hmac-sha256 x zz\n" + BODY, 42)


def test_the_servers_pads_give_the_standard_hmac() -> None:
    """install.sql computes sha256(opad || sha256(ipad || m)) from the stored pads."""
    ipad, opad = pads(KEY)
    m = b"7\n" + BODY
    inner = hashlib.sha256(ipad + m).digest()
    assert hashlib.sha256(opad + inner).digest() == hmac.new(KEY, m, hashlib.sha256).digest()
    assert sign(KEY, 7, BODY).split(b"\n")[0].split(b" ")[2].decode() == \
        hashlib.sha256(opad + inner).hexdigest()
    with pytest.raises(ValueError, match="64 bytes"):
        pads(KEY[:32])


def test_an_id_from_a_past_wraparound_is_stale() -> None:
    newest = (3 << 32) + 100
    assert not stale_epoch(newest - 1000, newest)  # committed out of order: fine
    assert not stale_epoch(newest + 5, newest)
    assert stale_epoch(newest - (1 << 32), newest)  # the same 32-bit xid, an epoch ago


def test_the_key_file_is_private_and_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "home" / "ddl.key"
    assert write_key_file(path, KEY)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.stat(path.parent).st_mode & 0o777 == 0o700
    assert read_key_file(path) == KEY
    assert not write_key_file(path, KEY)  # the same key: nothing to do
    with pytest.raises(ConfigError, match="holds the key of another source"):
        write_key_file(path, new_key())
    path.chmod(0o644)
    with pytest.raises(ConfigError, match=r"may be read by others \(mode 0644\): chmod 600"):
        read_key_file(path)
    path.chmod(0o600)
    path.write_text("beef\n")
    with pytest.raises(ConfigError, match="does not hold a cdclake key"):
        read_key_file(path)
    path.write_bytes(KEY)  # the raw key instead of its hex: not text at all
    with pytest.raises(ConfigError, match="does not hold a cdclake key"):
        read_key_file(path)
    with pytest.raises(ConfigError, match="cannot read the ddl key file"):
        read_key_file(tmp_path / "missing")


def test_load_key_takes_the_configured_file_then_the_home(tmp_path: Path) -> None:
    home = Config(home=tmp_path)
    assert key_path(home) == tmp_path / "ddl.key"
    assert load_key(home) is None  # no file, no DSN: decoding refuses the first message
    write_key_file(tmp_path / "ddl.key", KEY)
    assert load_key(home) == KEY
    named = home.replace(ddl_key_file=tmp_path / "elsewhere.key")
    with pytest.raises(ConfigError, match=r"elsewhere\.key"):  # named: it must exist
        load_key(named)


TXN = TxnInfo(xid=900, first_lsn=0x100, final_lsn=0x900, end_lsn=0x940, commit_time=0)


class _Quiet:
    def message(self, *args: object) -> None:
        pass


def _dictionary() -> Dictionary:
    d = Dictionary()
    d.apply_message(0x10, message("dictionary", [relation(16401, "t", [column(1, "id", 23)])],
                                  types=[INT4]))
    return d


def test_the_replayer_applies_authentic_messages_and_ignores_forged_ones(
        caplog: pytest.LogCaptureFixture) -> None:
    d = _dictionary()
    r = Replayer(d, _Quiet(), ddl_key=KEY)  # type: ignore[arg-type]
    renamed = message(relations=[relation(16401, "renamed", [column(1, "id", 23)])],
                      types=[INT4])
    drop = json.dumps({"kind": "drop", "relations": [{"oid": 16401}]}).encode()
    xid8 = TXN.xid + (2 << 32)
    with caplog.at_level(logging.WARNING):
        r.apply_catalog([(0x200, drop), (0x300, sign(new_key(), TXN.xid, drop)),
                         (0x400, sign(KEY, TXN.xid + 1, drop))], TXN)
        assert d.relation_for_oid(16401, 0x800).name == "t"  # type: ignore[union-attr]
        r.apply_catalog([(0x500, sign(KEY, xid8, renamed))], TXN)
        assert d.relation_for_oid(16401, 0x800).name == "renamed"  # type: ignore[union-attr]
        assert d.ddl_xid8 == xid8
        # a genuine message of the same 32-bit xid an epoch earlier: a replayed copy
        r.apply_catalog([(0x600, sign(KEY, TXN.xid + (1 << 32), drop))], TXN)
        r.message(0x700, "cdclake.ddl", sign(KEY, TXN.xid, drop))
    assert not d.relation_for_oid(16401, 0x800).dropped  # type: ignore[union-attr]
    assert r.forged == [0x200, 0x300, 0x400, 0x600, 0x700]
    warned = [rec.getMessage() for rec in caplog.records]
    assert [w.split(" (")[0].split(":")[0] for w in warned] == [
        f"ignoring a forged cdclake.ddl message at 0/{lsn:X}" for lsn in (0x200, 0x300, 0x400,
                                                                         0x600)] + [
        "ignoring a forged cdclake.ddl message ending at 0/700"]
    assert "not signed" in warned[0] and "wraparound" in warned[3]
    assert Dictionary.from_json(d.to_json()).ddl_xid8 == xid8


def test_without_a_key_decoding_refuses_the_first_message() -> None:
    r = Replayer(_dictionary(), _Quiet())  # type: ignore[arg-type]
    with pytest.raises(DecodingError, match="message at 0/200 cannot be authenticated: no ddl "
                                            "key is configured"):
        r.apply_catalog([(0x200, sign(KEY, TXN.xid, BODY))], TXN)
