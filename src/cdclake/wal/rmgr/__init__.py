"""Typed parsers for the records logical decoding reads, one module per resource manager.

Each module has ``parse(rec, ...)`` returning a slotted dataclass (or None for opcodes decoding
does not need). Layouts from PostgreSQL's headers (access/heapam_xlog.h, access/xact.h,
storage/standbydefs.h, replication/message.h, catalog/storage_xlog.h, utils/relmapper.h).
Tuples are copied out of the record as ``bytes``: they outlive the segment buffer.
"""
