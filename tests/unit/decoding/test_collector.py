"""The garbage collector's thresholds around a decode loop."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from cdclake.decoding.collector import THRESHOLDS, fewer_collections
from tests.support.twins import no_twin  # noqa: F401 - no twinned code here: runs once


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_raised_inside_and_restored_after() -> None:
    gc.set_threshold(700, 10, 10)
    with fewer_collections():
        assert gc.get_threshold() == THRESHOLDS
    assert gc.get_threshold() == (700, 10, 10)


def test_restored_when_the_loop_fails() -> None:
    gc.set_threshold(700, 10, 10)
    with pytest.raises(KeyError), fewer_collections():
        raise KeyError("x")
    assert gc.get_threshold() == (700, 10, 10)


def test_never_lowered() -> None:
    gc.set_threshold(10**6, 5, 1000)
    with fewer_collections():
        assert gc.get_threshold() == (10**6, THRESHOLDS[1], 1000)


def test_the_decode_loop_runs_under_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """``decode`` processes its records with the raised thresholds."""
    from cdclake.decoding import session
    from cdclake.decoding.context import DecodeOptions

    seen = []

    class Reader:
        version = segment_size = 0

        def __init__(self, *args: object, **kw: object) -> None:
            pass

        def __iter__(self) -> Iterator[object]:
            seen.append(gc.get_threshold())
            return iter(())

    monkeypatch.setattr(session, "XLogReader", Reader)
    monkeypatch.setattr(session, "decodable", lambda reader, _db: iter(reader))
    gc.set_threshold(700, 10, 10)
    options = DecodeOptions(db_oid=1, start_lsn=0)
    session.decode(None, None, options, None)  # type: ignore[arg-type]
    assert seen == [THRESHOLDS] and gc.get_threshold() == (700, 10, 10)
