"""An HTTP proxy in front of an S3 endpoint (moto_server) that fails requests on a schedule.

Retries are only tested when something fails, and moto never does: the proxy stands where
a flaky network or an overloaded S3 would, so cdclake's real boto3 client meets the real
failures — a 500 ``InternalError``, a 503 ``SlowDown`` (S3's throttling answer), a connection
closed in the middle of the request, a request the store carried out whose answer is lost, a
response cut off half way through its body.

It can also stand where an S3-compatible endpoint that ignores a request header would:
``FaultProxy(..., drop=["If-None-Match"])`` relays every request without that header, so
the store answers as one that never saw the condition.

The schedule is deterministic: :class:`Rule` says which requests (method and path patterns)
fail, "every Nth" of them and "at most K times", so the same client run meets the same
faults every time. Everything injected is counted and every exchange is logged, so a test can
assert that the faults really happened and that each was followed by a retry.

Standard library only (``http.server`` + ``http.client``); one thread per client connection.
"""

from __future__ import annotations

import enum
import http.client
import itertools
import re
import socket
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

#: headers that describe one connection, not the message: never forwarded either way
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
               "trailer", "transfer-encoding", "upgrade", "expect", "content-length"}


class Fault(enum.Enum):
    """What the proxy does instead of relaying a request faithfully."""

    #: answer 500 InternalError (S3's XML error body); the store never sees the request
    INTERNAL_ERROR = "500 InternalError"
    #: answer 503 SlowDown, S3's "reduce your request rate"; the store never sees it
    SLOW_DOWN = "503 SlowDown"
    #: read the headers and half the request body, then close the connection: no answer,
    #: nothing forwarded (a network drop mid-upload)
    DROP = "drop mid-request"
    #: forward the request, then close without answering: the store acted on it, the client
    #: cannot know (the case that makes retried writes need to be idempotent)
    DROP_AFTER = "drop after the store answered"
    #: forward, then send the status line, the headers (with the full Content-Length) and
    #: half the body, and close; a response without a body is dropped whole, like DROP_AFTER.
    #: On an error response (404, 412) the client still has the status: it need not retry
    HALF_BODY = "half the response body"


@dataclass
class Rule:
    """Which requests fail, and how.

    A request matches when ``method`` (a regex, ``""`` = any) matches its method in full and
    ``path`` (a regex, ``""`` = any) is found in its path and query. Of the matching requests
    the ``every``-th, 2·``every``-th, … fail — at most ``limit`` of them (None: no limit) —
    with the faults of ``faults`` taken in turn. Every rule counts every request it matches,
    even one another rule failed first; the first rule in the schedule that fires wins.
    """

    faults: Fault | Sequence[Fault]
    method: str = ""
    path: str = ""
    every: int = 1
    limit: int | None = None
    seen: int = field(default=0, init=False)
    fired: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError(f"Rule.every must be at least 1, not {self.every}")
        if isinstance(self.faults, Fault):
            self.faults = (self.faults,)
        if not self.faults:
            raise ValueError("a Rule needs at least one fault")

    def matches(self, method: str, path: str) -> bool:
        return ((not self.method or re.fullmatch(self.method, method) is not None)
                and (not self.path or re.search(self.path, path) is not None))

    def decide(self) -> Fault | None:
        """Count one matching request; the fault to inject into it, if it is its turn."""
        self.seen += 1
        if self.seen % self.every or (self.limit is not None and self.fired >= self.limit):
            return None
        assert not isinstance(self.faults, Fault)
        fault = self.faults[self.fired % len(self.faults)]
        self.fired += 1
        return fault


@dataclass(frozen=True, slots=True)
class Exchange:
    """One request the proxy handled: what it was and what the client got."""

    number: int  #: 1, 2, … in arrival order
    method: str
    path: str  #: path and query, as the client sent them
    fault: Fault | None  #: None: relayed faithfully
    status: int | None  #: status the upstream answered (None: not forwarded / it failed)


class FaultProxy:
    """A running proxy on 127.0.0.1 in front of ``upstream``; use as a context manager.

    :meth:`schedule` replaces the rules (and resets the counts and the log), :meth:`heal`
    drops them (keeping both); with no rules every request is relayed unchanged but for the
    request headers named in ``drop``, which are never forwarded.
    """

    def __init__(self, upstream: str, rules: Iterable[Rule] = (), *,
                 drop: Iterable[str] = ()) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the fault proxy relays to http://HOST:PORT, not {upstream!r}")
        self.upstream_host = parts.hostname
        self.upstream_port = parts.port or 80
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        self.rules: list[Rule] = list(rules)
        self.dropped = _HOP_BY_HOP | {h.lower() for h in drop}
        self.injected: Counter[Fault] = Counter()
        self.exchanges: list[Exchange] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def schedule(self, *rules: Rule) -> None:
        """From now on, fail requests as ``rules`` say; forget what was injected so far."""
        with self._lock:
            self.rules = list(rules)
            self.injected = Counter()
            self.exchanges = []

    def heal(self) -> None:
        """Relay everything faithfully from now on; keep the counts and the log."""
        with self._lock:
            self.rules = []

    def faulted(self) -> list[Exchange]:
        return [e for e in self.exchanges if e.fault is not None]

    def unretried(self) -> list[Exchange]:
        """Injected faults that were never followed by the same request again (method and
        path+query): a client that retries leaves this empty. Half an *error* body is left
        out: its status line arrived whole, and a 404 or 412 needs no second asking."""
        out = []
        for i, e in enumerate(self.exchanges):
            if e.fault is Fault.HALF_BODY and e.status is not None and e.status >= 300:
                continue
            if e.fault is not None and not any(
                    (later.method, later.path) == (e.method, e.path)
                    for later in self.exchanges[i + 1:]):
                out.append(e)
        return out

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="faultproxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- used by the handler -------------------------------------------------------------

    def _decide(self, method: str, path: str) -> tuple[int, Fault | None]:
        with self._lock:
            fault = None
            for rule in self.rules:
                if rule.matches(method, path):
                    chosen = rule.decide()
                    fault = fault or chosen
            if fault is not None:
                self.injected[fault] += 1
            return next(self._numbers), fault

    def _record(self, exchange: Exchange) -> None:
        with self._lock:
            self.exchanges.append(exchange)


def _error_body(code: str, message: str, number: int) -> bytes:
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message>"
            f"<RequestId>faultproxy-{number}</RequestId></Error>").encode()


_ERRORS = {
    Fault.INTERNAL_ERROR: (500, "InternalError",
                           "We encountered an internal error. Please try again."),
    Fault.SLOW_DOWN: (503, "SlowDown", "Please reduce your request rate."),
}


def _handler_for(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive like S3, and 100-continue for PUTs
        timeout = 60  # an idle keep-alive connection does not pin a thread forever

        def log_message(self, format: str, *args: object) -> None:
            pass  # the exchanges list is the log

        def _handle(self) -> None:
            method, path = self.command, self.path
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                self.send_error(501, "the fault proxy relays bodies with a Content-Length only")
                return
            number, fault = proxy._decide(method, path)
            length = int(self.headers.get("Content-Length") or 0)
            if fault is Fault.DROP:
                self.rfile.read(length // 2)
                proxy._record(Exchange(number, method, path, fault, None))
                self._drop()
                return
            body = self.rfile.read(length) if length else b""
            if fault in _ERRORS:
                status, code, message = _ERRORS[fault]
                self._answer(status, [("Content-Type", "application/xml")],
                             b"" if method == "HEAD" else _error_body(code, message, number),
                             method)
                proxy._record(Exchange(number, method, path, fault, None))
                return
            try:
                status, reason, headers, answer = self._forward(method, path, body)
            except OSError as exc:
                proxy._record(Exchange(number, method, path, fault, None))
                self.send_error(502, f"upstream failed: {exc}")
                return
            proxy._record(Exchange(number, method, path, fault, status))
            if fault is Fault.DROP_AFTER or (fault is Fault.HALF_BODY and len(answer) < 2):
                self._drop()
            elif fault is Fault.HALF_BODY:
                self._answer(status, headers, answer, method, reason=reason,
                             cut=len(answer) // 2)
            else:
                self._answer(status, headers, answer, method, reason=reason)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        def _forward(self, method: str, path: str,
                     body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
            conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port,
                                              timeout=60)
            try:
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in proxy.dropped}
                headers["Content-Length"] = str(len(body))  # Host stays as the client signed
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                answer = resp.read()
                kept = [(k, v) for k, v in resp.getheaders()
                        if k.lower() not in _HOP_BY_HOP or (
                            method == "HEAD" and k.lower() == "content-length")]
                return resp.status, resp.reason, kept, answer
            finally:
                conn.close()

        def _answer(self, status: int, headers: list[tuple[str, str]], body: bytes,
                    method: str, *, reason: str | None = None, cut: int | None = None) -> None:
            self.send_response_only(status, reason)
            for k, v in headers:
                self.send_header(k, v)
            if method != "HEAD":
                self.send_header("Content-Length", str(len(body)))
            elif not any(k.lower() == "content-length" for k, _ in headers):
                self.send_header("Content-Length", "0")
            self.end_headers()
            if method != "HEAD":
                self.wfile.write(body if cut is None else body[:cut])
            self.wfile.flush()
            if cut is not None:
                self._drop()

        def _drop(self) -> None:
            """Close the client's connection now, with no (further) answer."""
            self.close_connection = True
            try:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # the client went first

    return Handler
