# cython: language_level=3
"""C types for ``reassembly.py`` compiled as ``cdclake.decoding._reassembly`` (Cython's
pure-Python mode): its ``replay`` is ``Replayer.replay``'s compiled twin (``cdclake.native``)."""

import cython

from cdclake._identity cimport id

cdef int DELETE, ELSEWHERE, INSERT, MESSAGE, SPEC_ABORT, SPEC_CONFIRM, SPEC_INSERT, TOAST_CHUNK
cdef int TRUNCATE


@cython.locals(known=tuple)
cpdef bint wanted(dict memo, filt, v) except -1


@cython.locals(action=cython.int, emit=cython.bint, by_loc=dict, kept=dict, toast=dict,
               last_seq=dict, rewritten=dict)
cpdef replay(replayer, info, changes)
