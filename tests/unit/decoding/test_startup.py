"""The decoder's start-up state machine: START until the first running-xacts record (or a
clean start) names the suspects; suspects are refused; the state survives JSON, including the
shape earlier versions saved."""

from __future__ import annotations

import pytest

from cdclake.decoding.startup import CONSISTENT, START, Startup
from cdclake.errors import DecodingError
from tests.support.twins import no_twin  # noqa: F401 - no twinned code here: runs once


def test_nothing_is_emitted_before_the_first_running_xacts() -> None:
    s = Startup()
    assert s.state == START
    with pytest.raises(DecodingError, match="no running-xacts record was read before it"):
        s.check(10, (), 0x100)
    s.running_xacts((7, 8))
    assert s.state == CONSISTENT and s.suspects == {7, 8}
    s.running_xacts((10,))  # only the first one names suspects
    s.check(10, (), 0x200)
    with pytest.raises(DecodingError, match="transaction 8 commits at 0/300"):
        s.check(8, (), 0x300)
    with pytest.raises(DecodingError, match="transaction 11 commits"):
        s.check(11, (7,), 0x300)  # a suspect subtransaction taints its parent


def test_a_shutdown_checkpoint_first_is_a_clean_start() -> None:
    s = Startup()
    s.first_record(shutdown_checkpoint=True)
    assert s.state == CONSISTENT and s.suspects == set()
    s.running_xacts((7,))
    s.check(7, (), 0x100)
    online = Startup()
    online.first_record(shutdown_checkpoint=False)
    assert online.state == START


def test_a_continued_decoder_is_not_at_the_start_of_the_wal() -> None:
    s = Startup().resume()
    s.first_record(shutdown_checkpoint=True)
    assert s.state == START


@pytest.mark.parametrize("state", [Startup(), Startup({3, 1}), Startup.at_dictionary()])
def test_json_round_trip(state: Startup) -> None:
    back = Startup.from_json(state.to_json())
    assert back.suspects == state.suspects and back.continued


@pytest.mark.parametrize(("saved", "suspects"), [
    ({"clean_start": True, "maybe_incomplete": None}, set()),
    ({"clean_start": False, "maybe_incomplete": None}, None),
    ({"clean_start": False, "maybe_incomplete": [5, 6]}, {5, 6}),
])
def test_state_saved_by_earlier_versions(saved: dict[str, object],
                                         suspects: set[int] | None) -> None:
    assert Startup.from_json(saved).suspects == suspects
