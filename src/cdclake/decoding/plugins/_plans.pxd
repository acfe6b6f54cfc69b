# cython: language_level=3
"""The per-layout plans the compiled Arrow plugin keeps: what each column of a relation
version costs to type, worked out once per version."""

from cpython.long cimport PyLong_FromVoidPtr


cdef inline list cached_steps(dict plans, object layout):
    """The steps kept for ``layout``, or None. Kept by the layout's id together with the
    layout itself: the id of a layout freed later may be reused by another one."""
    entry = plans.get(PyLong_FromVoidPtr(<void *> layout))
    if entry is not None and (<tuple> entry)[0] is layout:
        return <list> (<tuple> entry)[1]
    return None


cdef inline list keep_steps(dict plans, object layout, list steps):
    """Keep ``steps`` for ``layout`` (a runaway number of versions empties the cache)."""
    if len(plans) > 4096:
        plans.clear()
    plans[PyLong_FromVoidPtr(<void *> layout)] = (layout, steps)
    return steps
