# cython: language_level=3
"""C types for ``parallel.py`` compiled as ``cdclake.decoding._parallel`` (Cython's
pure-Python mode): its ``write`` is ``_Framer.write``'s compiled twin (``cdclake.native``)."""

import cython


@cython.locals(b=bytes, buf=list, size=cython.Py_ssize_t)
cpdef write(framer, str line)
