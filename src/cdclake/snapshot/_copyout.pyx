# distutils: libraries = pq
# distutils: include_dirs = /usr/include/postgresql
"""COPY TO's output read by libpq without the GIL: the snapshot's hot loop.

PostgreSQL sends COPY TO's output as one CopyData message per row. psycopg hands each to
Python as an object of its own — 0.53 µs a row of a pgbench_accounts-like table on this
host, more than the server spends producing it (0.31 µs): a snapshot task reading COPY
through it cannot keep up with one backend. Here a session of its own (libpq, the same
conninfo psycopg would get) runs the transaction's set-up statements and the COPY.
:meth:`CopyOut.read_binary` decodes a batch of rows of COPY's binary format column by column
into Arrow's buffers, each value what the change stream's codec makes of the same datum on
disk; :meth:`CopyOut.read` gathers CSV rows into a block of bytes. Both release the GIL, so a
chunk's conversion runs on while the next batch arrives.

Which kind each column is read as is decided in :mod:`cdclake.snapshot.copyrows`; what a chunk
does with the batches in :mod:`cdclake.snapshot.chunks`, which reads CSV through psycopg when
this module was not built. Every failure libpq reports raises :class:`CopyOutError` with its
message.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memcmp, memcpy, memset


cdef extern from "libpq-fe.h":
    ctypedef struct PGconn:
        pass

    ctypedef struct PGresult:
        pass

    ctypedef enum ConnStatusType:
        CONNECTION_OK

    ctypedef enum ExecStatusType:
        PGRES_COMMAND_OK
        PGRES_TUPLES_OK
        PGRES_COPY_OUT

    PGconn *PQconnectdbParams(const char * const *keywords, const char * const *values,
                              int expand_dbname) nogil
    ConnStatusType PQstatus(const PGconn *conn)
    char *PQerrorMessage(const PGconn *conn)
    void PQfinish(PGconn *conn) nogil
    PGresult *PQexec(PGconn *conn, const char *query) nogil
    PGresult *PQgetResult(PGconn *conn) nogil
    ExecStatusType PQresultStatus(const PGresult *res)
    char *PQresultErrorMessage(const PGresult *res)
    char *PQcmdTuples(PGresult *res)
    int PQntuples(const PGresult *res)
    int PQnfields(const PGresult *res)
    char *PQgetvalue(const PGresult *res, int row, int column)
    int PQgetisnull(const PGresult *res, int row, int column)
    void PQclear(PGresult *res)
    int PQgetCopyData(PGconn *conn, char **buffer, int async) nogil
    ctypedef void (*PQnoticeProcessor)(void *arg, const char *message) noexcept
    PQnoticeProcessor PQsetNoticeProcessor(PGconn *conn, PQnoticeProcessor proc, void *arg)
    void PQfreemem(void *ptr) nogil


class CopyOutError(Exception):
    """libpq or the server refused: connecting, a statement, or the COPY itself."""


class NotPlain(Exception):
    """A binary value the column's kind cannot hold as the change stream would (a numeric
    beyond its decimal's precision or finer than its scale, over 2 GiB of text in a batch):
    the chunk must be read another way. ``args[0]`` is the column's index."""


class Malformed(Exception):
    """COPY's binary output is not what :meth:`CopyOut.read_binary` was told to expect."""


# -- COPY's binary format, a column at a time ----------------------------------------------
#
# The kinds a column of ``COPY ... (FORMAT binary)`` is read as (the Python side,
# cdclake.snapshot.copyrows, chooses them by codec and base type). Values are big-endian; a value
# becomes what the change stream's codec makes of the same datum on disk (cdclake.tuples).

cpdef enum Kind:
    K_INT16 = 1
    K_INT32 = 2
    K_INT64 = 3
    K_FLOAT32 = 4
    K_FLOAT64 = 5
    K_BOOL = 6
    K_TEXT = 7
    K_JSONB = 8
    K_BYTEA = 9
    K_UUID = 10
    K_DATE = 11
    K_TIMESTAMP = 12
    K_NUMERIC = 13

#: the fixed width of each fixed kind's value in the output arrays
WIDTHS = {K_INT16: 2, K_INT32: 4, K_INT64: 8, K_FLOAT32: 4, K_FLOAT64: 8, K_BOOL: 1,
          K_UUID: 16, K_DATE: 4, K_TIMESTAMP: 8, K_NUMERIC: 16}

cdef extern from *:
    ctypedef long long int128 "__int128"

cdef int32_t DATE_SHIFT = 10957  # days from 1970-01-01 to 2000-01-01
cdef int64_t TS_SHIFT = 946684800000000  # µs from 1970-01-01 to 2000-01-01
cdef int32_t I32_MAX = 2147483647
cdef int32_t I32_MIN = -2147483648
cdef int64_t I64_MAX = 9223372036854775807
cdef int64_t I64_MIN = -I64_MAX - 1
cdef char *SIGNATURE = b"PGCOPY\n\xff\r\n\x00"

cdef enum:
    OK = 0
    TRAILER = 1
    SPECIAL = 2
    MALFORMED = -1
    NOT_PLAIN = -2
    NO_MEMORY = -3


cdef struct Buf:
    char *data
    Py_ssize_t len
    Py_ssize_t cap


cdef struct Col:
    int kind
    int width  # fixed kinds: bytes per value; 0 for variable ones
    int scale  # K_NUMERIC: the decimal's scale
    int precision  # K_NUMERIC: the decimal's precision
    int128 limit  # K_NUMERIC: 10^precision, the first unscaled value it cannot hold
    Buf values
    Buf offsets  # variable kinds: int32 offsets, one more than rows
    Buf validity  # a bit per row, set when valid
    Py_ssize_t nulls


cdef inline int grow(Buf *b, Py_ssize_t extra) noexcept nogil:
    cdef Py_ssize_t need = b.len + extra, cap
    cdef char *data
    if need <= b.cap:
        return 0
    cap = b.cap * 2 if b.cap else 4096
    while cap < need:
        cap *= 2
    data = <char *>realloc(b.data, cap)
    if data == NULL:
        return -1
    b.data = data
    b.cap = cap
    return 0


cdef inline uint16_t be16(const char *p) noexcept nogil:
    return (<uint16_t>(<uint8_t>p[0]) << 8) | <uint8_t>p[1]


cdef inline uint32_t be32(const char *p) noexcept nogil:
    return ((<uint32_t>(<uint8_t>p[0]) << 24) | (<uint32_t>(<uint8_t>p[1]) << 16)
            | (<uint32_t>(<uint8_t>p[2]) << 8) | <uint8_t>p[3])


cdef inline uint64_t be64(const char *p) noexcept nogil:
    return (<uint64_t>be32(p) << 32) | be32(p + 4)


cdef int put_value(Col *c, const char *p, int32_t n, int *special,
                   int64_t *raw) noexcept nogil:
    """One non-null value of ``n`` bytes at ``p`` appended to ``c``; SPECIAL (and its code in
    ``special``) for a value the stream holds as NULL plus its text: NaN (1), Infinity (2)
    and -Infinity (3) of a numeric, a timestamp past Arrow's range (4, its value in
    ``raw``)."""
    cdef uint16_t u16
    cdef uint32_t u32
    cdef uint64_t u64
    cdef int32_t d
    cdef int64_t t
    cdef char *out = NULL
    cdef int i, ndigits, weight, dscale, e
    cdef uint16_t sign
    cdef int128 acc, acc_digit
    if c.width:
        if n != c.width and c.kind != K_NUMERIC:  # on the wire as wide as in the array
            return MALFORMED
        if grow(&c.values, c.width) < 0:
            return NO_MEMORY
        out = c.values.data + c.values.len
        c.values.len += c.width
    if c.kind == K_INT16:
        u16 = be16(p)
        memcpy(out, &u16, 2)
    elif c.kind == K_INT32 or c.kind == K_FLOAT32:
        u32 = be32(p)
        memcpy(out, &u32, 4)
    elif c.kind == K_INT64 or c.kind == K_FLOAT64:
        u64 = be64(p)
        memcpy(out, &u64, 8)
    elif c.kind == K_BOOL:
        out[0] = 1 if p[0] else 0
    elif c.kind == K_UUID:
        memcpy(out, p, 16)
    elif c.kind == K_DATE:  # as tuples.datetimes.date_value: ±infinity kept
        d = <int32_t>be32(p)
        d = -I32_MAX if d == I32_MIN else d if d == I32_MAX else d + DATE_SHIFT
        memcpy(out, &d, 4)
    elif c.kind == K_TIMESTAMP:  # as tuples.datetimes.timestamp_value: ±infinity kept
        t = <int64_t>be64(p)
        if t != I64_MAX and t >= I64_MAX - TS_SHIFT:  # past timestamp[us]: NULL plus text
            memset(out, 0, 8)
            special[0] = 4
            raw[0] = t
            return SPECIAL
        t = -I64_MAX if t == I64_MIN else t if t == I64_MAX else t + TS_SHIFT
        memcpy(out, &t, 8)
    elif c.kind == K_NUMERIC:  # numeric_send: ndigits, weight, sign, dscale, base-10000 digits
        if n < 8:
            return MALFORMED
        ndigits = <int16_t>be16(p)
        weight = <int16_t>be16(p + 2)
        sign = be16(p + 4)
        dscale = <int16_t>be16(p + 6)
        if ndigits < 0 or n != 8 + 2 * ndigits or dscale < 0:
            return MALFORMED
        if sign != 0 and sign != 0x4000:  # no decimal value: NULL plus its text
            memset(out, 0, 16)
            special[0] = 1 if sign == 0xC000 else 2 if sign == 0xD000 else \
                3 if sign == 0xF000 else 0
            return SPECIAL if special[0] else MALFORMED
        acc = 0
        for i in range(ndigits):
            # digit i is worth 10000^(weight - i); times 10^scale for the unscaled integer
            e = 4 * (weight - i) + c.scale
            u16 = be16(p + 8 + 2 * i)
            if u16 > 9999:
                return MALFORMED
            while e < 0:  # finer than the scale: PostgreSQL never stores one in numeric(p, s)
                if u16 % 10:
                    return NOT_PLAIN
                u16 //= 10
                e += 1
            acc_digit = <int128>u16
            while e > 0 and acc_digit:  # below the limit (< 10^38) at every step: no overflow
                if acc_digit >= c.limit // 10:
                    return NOT_PLAIN  # beyond the decimal's precision
                acc_digit *= 10
                e -= 1
            if acc_digit >= c.limit - acc:
                return NOT_PLAIN
            acc += acc_digit
        if sign == 0x4000:
            acc = -acc
        memcpy(out, &acc, 16)
    else:  # K_TEXT, K_JSONB, K_BYTEA: the bytes themselves (jsonb's after its version)
        if c.kind == K_JSONB:
            if n < 1 or p[0] != 1:
                return MALFORMED
            p += 1
            n -= 1
        if grow(&c.values, n) < 0 or grow(&c.offsets, 4) < 0:
            return NO_MEMORY
        memcpy(c.values.data + c.values.len, p, n)
        c.values.len += n
        u32 = <uint32_t>c.values.len
        if c.values.len > I32_MAX:
            return NOT_PLAIN  # more than 2 GiB of text in one batch: let the text path do it
        memcpy(c.offsets.data + c.offsets.len, &u32, 4)
        c.offsets.len += 4
    return OK


cdef int put_null(Col *c) noexcept nogil:
    cdef uint32_t u32
    c.nulls += 1
    if c.width:
        if grow(&c.values, c.width) < 0:
            return NO_MEMORY
        memset(c.values.data + c.values.len, 0, c.width)
        c.values.len += c.width
    else:
        if grow(&c.offsets, 4) < 0:
            return NO_MEMORY
        u32 = <uint32_t>c.values.len
        memcpy(c.offsets.data + c.offsets.len, &u32, 4)
        c.offsets.len += 4
    return OK


cdef int put_row(Col *cols, int ncols, const char *p, Py_ssize_t n, Py_ssize_t row,
                 int *bad, Buf *specials) noexcept nogil:
    """One tuple of the binary output (``n`` bytes at ``p``, its field count first); a
    special value's (row, column, code, raw) appended to ``specials``."""
    cdef Py_ssize_t pos = 2
    cdef int i, rc, special = 0
    cdef int64_t entry[4]
    cdef int32_t size
    cdef Col *c
    if n < 2:
        return MALFORMED
    if <int16_t>be16(p) == -1:
        return TRAILER if n == 2 else MALFORMED
    if <int16_t>be16(p) != ncols:
        return MALFORMED
    for i in range(ncols):
        c = &cols[i]
        bad[0] = i
        if pos + 4 > n:
            return MALFORMED
        size = <int32_t>be32(p + pos)
        pos += 4
        if grow(&c.validity, 1) < 0:
            return NO_MEMORY
        if row % 8 == 0:
            c.validity.data[c.validity.len] = 0
            c.validity.len += 1
        if size == -1:
            rc = put_null(c)
        elif size < 0 or pos + size > n:
            return MALFORMED
        else:
            entry[3] = 0
            rc = put_value(c, p + pos, size, &special, &entry[3])
            if rc == OK:
                c.validity.data[row // 8] |= <char>(1 << (row % 8))
            elif rc == SPECIAL:
                c.nulls += 1
                entry[0] = row
                entry[1] = i
                entry[2] = special
                if grow(specials, sizeof(entry)) < 0:
                    return NO_MEMORY
                memcpy(specials.data + specials.len, entry, sizeof(entry))
                specials.len += sizeof(entry)
                rc = OK
            pos += size
        if rc != OK:
            return rc
    if pos != n:
        return MALFORMED
    return OK


cdef void _quiet(void *arg, const char *message) noexcept nogil:
    """libpq's notices (and a FATAL the server sends as it ends the session) are not printed
    on stderr, as libpq's default does: every failure reaches the caller as one error."""


cdef str _text(const char *message):
    return " ".join(message.decode("utf-8", "replace").split())


cdef class CopyOut:
    """One session running one ``COPY ... TO STDOUT``: :meth:`execute` the set-up statements,
    :meth:`start` the COPY, then :meth:`read` until it returns ``b""``; :meth:`close` ends the
    session (a COPY not read to its end is abandoned with it)."""

    cdef PGconn *conn
    cdef char *row  # the row libpq handed out last, partly copied
    cdef Py_ssize_t row_len
    cdef Py_ssize_t row_off
    cdef bint copying
    cdef bint header_done  # a binary COPY's signature and header read
    cdef public long long rows  # rows the COPY reported at its end (-1 before)

    def __cinit__(self, dict params not None):
        """Connects with libpq's ``PQconnectdbParams(params, expand_dbname=1)``: ``dbname``
        may be a whole conninfo string or URI, which the other keywords then override."""
        keys = [k.encode() for k in params]
        values = [str(v).encode() for v in params.values()]
        cdef Py_ssize_t n = len(keys), i
        cdef const char **ckeys = <const char **>PyMem_Malloc((n + 1) * sizeof(char *))
        cdef const char **cvalues = <const char **>PyMem_Malloc((n + 1) * sizeof(char *))
        if ckeys == NULL or cvalues == NULL:
            PyMem_Free(ckeys)
            PyMem_Free(cvalues)
            raise MemoryError()
        for i in range(n):
            ckeys[i] = keys[i]
            cvalues[i] = values[i]
        ckeys[n] = NULL
        cvalues[n] = NULL
        with nogil:
            self.conn = PQconnectdbParams(ckeys, cvalues, 1)
        PyMem_Free(ckeys)
        PyMem_Free(cvalues)
        self.rows = -1
        if self.conn == NULL:
            raise MemoryError()
        if PQstatus(self.conn) != CONNECTION_OK:
            message = _text(PQerrorMessage(self.conn))
            self.close()
            raise CopyOutError(message)
        PQsetNoticeProcessor(self.conn, _quiet, NULL)

    def __dealloc__(self):
        self.close()

    cdef PGconn *_open(self) except NULL:
        if self.conn == NULL:
            raise CopyOutError("the session is closed")
        return self.conn

    cdef PGresult *_exec(self, str statement) except NULL:
        """``PQexec`` of ``statement``, the GIL released; no result at all raises."""
        cdef PGconn *conn = self._open()
        data = statement.encode()
        cdef const char *query = data
        cdef PGresult *res
        with nogil:
            res = PQexec(conn, query)
        if res == NULL:
            raise CopyOutError(_text(PQerrorMessage(conn)) or "the server sent no result")
        return res

    def execute(self, str statement not None):
        """Run one statement that returns no COPY: a command, or a query whose rows come
        back as tuples of text (None for NULL)."""
        cdef PGresult *res = self._exec(statement)
        try:
            status = PQresultStatus(res)
            if status != PGRES_COMMAND_OK and status != PGRES_TUPLES_OK:
                raise CopyOutError(self._failure(res))
            return [tuple(None if PQgetisnull(res, r, c) else
                          PQgetvalue(res, r, c).decode() for c in range(PQnfields(res)))
                    for r in range(PQntuples(res))]
        finally:
            PQclear(res)

    def start(self, str statement not None):
        """Begin ``statement``, a ``COPY ... TO STDOUT``."""
        cdef PGresult *res = self._exec(statement)
        try:
            if PQresultStatus(res) != PGRES_COPY_OUT:
                raise CopyOutError(self._failure(res))
        finally:
            PQclear(res)
        self.copying = True

    cdef str _failure(self, PGresult *res):
        if res != NULL and PQresultErrorMessage(res)[0]:
            return _text(PQresultErrorMessage(res))
        return _text(PQerrorMessage(self.conn)) or "the server sent an unexpected result"

    def read(self, Py_ssize_t size=1 << 20):
        """The next ``size`` bytes of the COPY's output (fewer only at its end; ``b""``
        after it). Rows are split across blocks as they come."""
        if not self.copying:
            return b""
        cdef PGconn *conn = self._open()
        out = PyBytes_FromStringAndSize(NULL, size)
        cdef char *dst = PyBytes_AS_STRING(out)
        cdef Py_ssize_t got = 0, take
        cdef int n = 0
        cdef char *buf
        with nogil:
            while got < size:
                if self.row == NULL:
                    n = PQgetCopyData(conn, &buf, 0)
                    if n < 0:
                        break
                    self.row = buf
                    self.row_len = n
                    self.row_off = 0
                take = min(self.row_len - self.row_off, size - got)
                memcpy(dst + got, self.row + self.row_off, take)
                got += take
                self.row_off += take
                if self.row_off == self.row_len:
                    PQfreemem(self.row)
                    self.row = NULL
        if n < 0:
            self._finish(n)
        return out if got == size else out[:got]

    def read_binary(self, list kinds not None, Py_ssize_t max_rows, Py_ssize_t max_bytes):
        """Up to ``max_rows`` rows of a ``COPY ... (FORMAT binary)`` — fewer once they hold
        ``max_bytes`` (a row of huge TOASTed values is read whole, and ends its batch) —
        decoded column by column with the GIL released: ``kinds`` holds one ``(kind,
        precision, scale)`` per column. Returns ``(rows, columns, specials)``, a column as
        ``(values, offsets, validity, nulls)`` bytes — Arrow's buffers: offsets None for a
        fixed kind, validity a bitmap — and ``specials`` the ``(row, column, code, raw)`` of
        each value held as NULL plus its text (:func:`put_value`); ``(0, [], [])`` after the
        end. A value the kind does not hold raises :class:`NotPlain`, output that is not
        COPY's binary format :class:`Malformed`."""
        if not self.copying:
            return 0, [], []
        cdef PGconn *conn = self._open()
        cdef Buf specials
        specials.data = NULL
        specials.len = specials.cap = 0
        cdef int64_t *entries
        cdef int ncols = len(kinds)
        cdef int i, rc = OK, bad = -1, n = 0
        cdef Py_ssize_t rows = 0, pos, k, held = 0
        cdef uint32_t ext
        cdef char *buf
        cdef Col *cols = <Col *>calloc(max(ncols, 1), sizeof(Col))
        if cols == NULL:
            raise MemoryError()
        try:
            for i in range(ncols):
                kind, precision, scale = kinds[i]
                cols[i].kind = kind
                cols[i].width = WIDTHS.get(kind, 0)
                cols[i].precision = min(max(int(precision), 1), 38)
                cols[i].scale = scale
                cols[i].limit = 1
                for _ in range(cols[i].precision):
                    cols[i].limit *= 10
                if not cols[i].width:  # the first offset
                    if grow(&cols[i].offsets, 4) < 0:
                        raise MemoryError()
                    memset(cols[i].offsets.data, 0, 4)
                    cols[i].offsets.len = 4
            with nogil:
                while rows < max_rows and held < max_bytes:
                    n = PQgetCopyData(conn, &buf, 0)
                    if n < 0:
                        break
                    held += n
                    pos = 0
                    if not self.header_done:
                        rc = MALFORMED
                        if n >= 19 and memcmp(buf, SIGNATURE, 11) == 0 and \
                                be32(buf + 11) == 0:  # flags: no OIDs
                            ext = be32(buf + 15)
                            if ext <= <uint32_t>(n - 19):
                                pos = 19 + ext
                                self.header_done = True
                                rc = OK
                    if rc == OK and pos < n:
                        rc = put_row(cols, ncols, buf + pos, n - pos, rows, &bad,
                                     &specials)
                        if rc == OK:
                            rows += 1
                        elif rc == TRAILER:
                            rc = OK
                    PQfreemem(buf)
                    if rc != OK:
                        break
            if rc == NO_MEMORY:
                raise MemoryError()
            if rc == NOT_PLAIN:
                raise NotPlain(bad)
            if rc == MALFORMED:
                raise Malformed("COPY's binary output does not parse"
                                + (f" at column {bad + 1}" if bad >= 0 else ""))
            if n < 0:
                self._finish(n)
            out = []
            for i in range(ncols if rows else 0):
                c = &cols[i]
                out.append((
                    PyBytes_FromStringAndSize(c.values.data, c.values.len),
                    None if c.width else PyBytes_FromStringAndSize(c.offsets.data,
                                                                   c.offsets.len),
                    PyBytes_FromStringAndSize(c.validity.data, c.validity.len)
                    if c.nulls else None,
                    c.nulls))
            entries = <int64_t *>specials.data
            found = [(entries[k], entries[k + 1], entries[k + 2], entries[k + 3])
                     for k in range(0, specials.len // <Py_ssize_t>sizeof(int64_t), 4)]
            return rows, out, found
        finally:
            free(specials.data)
            for i in range(ncols):
                free(cols[i].values.data)
                free(cols[i].offsets.data)
                free(cols[i].validity.data)
            free(cols)

    cdef _finish(self, int n):
        """The COPY ended (-1) or failed (-2): its final result says which."""
        self.copying = False
        cdef PGresult *res
        cdef str failure = None
        if n == -2:
            failure = _text(PQerrorMessage(self.conn))
        while True:
            with nogil:
                res = PQgetResult(self.conn)
            if res == NULL:
                break
            if PQresultStatus(res) == PGRES_COMMAND_OK:
                tuples = PQcmdTuples(res)
                self.rows = int(tuples) if tuples[0] else -1
            elif failure is None:
                failure = self._failure(res)
            PQclear(res)
        if failure is not None:
            raise CopyOutError(failure or "the COPY failed")

    def close(self):
        if self.row != NULL:
            PQfreemem(self.row)
            self.row = NULL
        if self.conn != NULL:
            with nogil:
                PQfinish(self.conn)
            self.conn = NULL
        self.copying = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

