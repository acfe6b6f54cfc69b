# cython: language_level=3
"""The text of a well-formed datum of the commonest codecs, formatted in C for the compiled
test_decoding line (``test_decoding.py`` compiled as itself): a value costs no call into its
codec. A datum these do not take (another size, not bytes) is None: the codec formats it,
or raises its error. ``tests/unit/decoding/test_test_decoding_twins.py`` holds them to the
codecs on random and malformed datums."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeASCII, PyUnicode_DecodeUTF8

from cdclake.tuples._bytes cimport decimal, le_int

cdef enum:
    INT2 = 1
    INT4
    INT8
    UTF8
    BOOL_
    UUID
    BYTEA
    FLOAT8


cdef inline int inline_kind(object text) except -1:
    """Which of the codecs' text functions ``text`` is, of those formatted here; 0: none."""
    from cdclake.tuples import codecs, scalars
    return {scalars.int2_text: INT2, scalars.int4_text: INT4, scalars.int8_text: INT8,
            scalars.utf8_text: UTF8, scalars.bool_text: BOOL_, scalars.uuid_text: UUID,
            scalars.bytea_text: BYTEA, codecs._float8_text: FLOAT8}.get(text, 0)


cdef inline object inline_text(int kind, object value):
    """The text of a well-formed datum of codec ``kind`` held in ``bytes``; None otherwise."""
    if type(value) is not bytes:
        return None
    cdef const unsigned char *b = <const unsigned char *> PyBytes_AS_STRING(value)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(value)
    cdef char digits[20]
    if kind == UTF8:
        return PyUnicode_DecodeUTF8(<const char *> b, n, NULL)  # strict, as str(p, "utf-8")
    if kind == BYTEA:
        return "\\x" + (<bytes> value).hex()
    if kind == FLOAT8:
        from cdclake.tuples import floats
        return floats.float8_datum_text(value)  # its twin, where built
    if kind == BOOL_:
        return ("t" if b[0] else "f") if n else None
    if kind == UUID:
        if n != 16:
            return None
        h = (<bytes> value).hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    if (kind == INT4 and n == 4) or (kind == INT8 and n == 8) or (kind == INT2 and n == 2):
        return PyUnicode_DecodeASCII(digits, decimal(digits, le_int(b, <int> n)), NULL)
    return None
