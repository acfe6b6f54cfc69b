"""The integer readers and writers the compiled texts share (``tuples/ints.py``), as Python
runs them; compiled, they are what the array, date, timestamp, interval and numeric twins'
tests compare."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cdclake.tuples.ints import le_int, le_uint, magnitude, put_int, put_uint
from tests.support.twins import no_twin  # noqa: F401 - the Python functions only: runs once


@settings(max_examples=300, deadline=None)
@given(width=st.sampled_from([2, 4, 8]), data=st.data(), pad=st.binary(max_size=3))
def test_little_endian_fields_read_as_the_int_types_store_them(width: int, data: st.DataObject,
                                                                pad: bytes) -> None:
    v = data.draw(st.integers(-(2 ** (8 * width - 1)), 2 ** (8 * width - 1) - 1))
    b = pad + v.to_bytes(width, "little", signed=True) + pad
    assert le_int(b, len(pad), width) == v
    assert le_uint(b, len(pad), width) == v % 2 ** (8 * width)


@settings(max_examples=300, deadline=None)
@given(v=st.integers(-(2**63), 2**63 - 1), digits=st.integers(1, 6))
def test_decimals_written_as_int8out_and_zero_padded(v: int, digits: int) -> None:
    buf = bytearray(30)
    assert buf[:put_int(buf, 0, v)].decode() == str(v)
    assert magnitude(v) == abs(v)
    buf = bytearray(30)
    end = put_uint(buf, 2, abs(v), digits)
    assert buf[2:end].decode() == f"{abs(v):0{digits}d}"
