# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of ``_Framer.write`` (:mod:`cdclake.decoding.parallel`, see
:mod:`cdclake.native`): every line a worker of a parallel decode writes passes through it.
The same frames as the reference: a line encoded as the server's text, a change's line keyed
by the stripe its ``Shares`` said yes to last (``Shares.stripe``),
a frame sent once some 64 KiB are buffered.

The constants are the reference module's, read at the first call: ``parallel`` binds this
twin at its own import, before it could be imported from here.
"""

import sys

from cpython.unicode cimport PyUnicode_AsEncodedString

cdef Py_ssize_t FRAME_BYTES = 0
cdef object CHANGES = None


cdef _constants():
    global FRAME_BYTES, CHANGES
    parallel = sys.modules["cdclake.decoding.parallel"]
    CHANGES = parallel._CHANGES
    FRAME_BYTES = parallel._FRAME_BYTES


def write(self, str line):
    """See ``_Framer.write``."""
    if FRAME_BYTES == 0:
        _constants()
    b = PyUnicode_AsEncodedString(line, "utf-8", "surrogateescape")
    if self.rank == CHANGES:
        key = (self.txn_lsn, CHANGES, self.shares.stripe())
        if key != self.key:
            self.flush()
            self.key = key
    (<list> self.buf).append(b)
    cdef Py_ssize_t size = self.size + len(b) + 1
    self.size = size
    if size >= FRAME_BYTES:
        self.flush()
