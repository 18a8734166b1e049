"""One pool of kept-alive connections per S3 store, for both planes (see :mod:`s3http`).

Each worker thread owns its connections (one per endpoint at a time); a connection goes back
only after its answer was read to the end. :meth:`Pool.exchange` is one bounded control-plane
request; :meth:`Pool.open` starts a ranged GET whose body the caller reads (:class:`Ranged`).
Every request runs under the watchdog: headers within the timeout, the body at the minimum
rate, and never past the operation's own deadline (``until``).

A transfer stops the store's requests with its stop flag (:meth:`Pool.stop_flag`, the flag its
:class:`~gpuci.ranged._pool.WorkPool` stops on): once set (Ctrl-C, or a task that failed for
good), every request in flight ends at once (the watchdog fires its guard), none is sent
after, and the client's retry waits end with :class:`gpuci.retry.Interrupted`, as retry-fetch's
aborted downloads do (:func:`gpuci.httpclients.abort`): a wait ends on the flag current when
its call began or on the store's current one, whichever is set first (:class:`StopWait`).
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from gpuci.cache._stores.s3 import transport
from gpuci.cache._stores.s3.network import Limits, Route, ca_bundle, route_for
from gpuci.cache._stores.s3.transport import (
    WATCHDOG,
    BadResponse,
    Body,
    Connection,
    DeadlineExceeded,
    TLSConnection,
    read_capped,
    release,
)
from gpuci.ranged._pace import body_due
from gpuci.retry import Interrupted

if TYPE_CHECKING:
    import ssl

    from gpuci.cache._stores.splicing import Pipe

AnyConnection = Connection | TLSConnection


class Stop(threading.Event):
    """A transfer's stop flag on a store (:meth:`Pool.stop_flag`): setting it ends the store's
    requests in flight at once and refuses new ones, while it is the store's current flag."""

    def __init__(self, pool: Pool) -> None:
        super().__init__()
        self._pool = pool

    def set(self) -> None:
        super().set()
        try:
            if self._pool.stop is self:
                WATCHDOG.fire(self._pool)
        finally:  # a second Ctrl-C landing in the fire: the waits are still woken
            with self._pool.woken:  # the retry waits of this flag, and of earlier ones
                self._pool.woken.notify_all()


class StopWait:
    """What a request's retry waits on (:func:`gpuci.retry._cancellable`): set once its own
    transfer's flag (the store's current one when the request began) or the store's current
    flag is set. On its own flag alone, a wait begun after a fresh flag was made the current one
    (a failed save's multipart aborts go out on one; the conditional-writes question's requests
    may begin then) slept out its backoff, up to 20 s, when the store was then stopped by a
    newer flag (the save's end, :func:`gpuci.cache._save.operation._drop_question`): nobody held
    the flag it waited on to set it, and its next attempt was refused all the same."""

    def __init__(self, pool: Pool) -> None:
        self._pool, self._own = pool, pool.stop

    def is_set(self) -> bool:
        return self._own.is_set() or self._pool.stop.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        with self._pool.woken:
            return self._pool.woken.wait_for(self.is_set, timeout)


class Pool:
    def __init__(self, environ: Mapping[str, str], limits: Limits) -> None:
        self.environ, self.limits = environ, limits
        self._local = threading.local()
        self._routes: dict[tuple[str, str], Route] = {}
        self._context: ssl.SSLContext | None = None
        self._lock = threading.Lock()
        self.woken = threading.Condition()  # notified as any of this store's flags is set
        self.stop = Stop(self)  # the current transfer's flag (:meth:`stop_flag`)

    def stop_flag(self) -> Stop:
        """A fresh stop flag for one transfer, made the store's current one: a flag set by an
        earlier transfer (a restore's first try, cut short by a full disk) stops nothing now."""
        self.stop = Stop(self)
        return self.stop

    def _check_stop(self) -> None:
        if self.stop.is_set():
            raise Interrupted("the store's requests were stopped")

    # ----- connections ----------------------------------------------------------------------
    def _route(self, scheme: str, netloc: str) -> Route:
        key = (scheme, netloc)
        with self._lock:
            route = self._routes.get(key)
            if route is None:
                route = self._routes[key] = route_for(f"{scheme}://{netloc}/", self.environ)
            if scheme == "https" and self._context is None:
                self._context = transport.tls_context(ca_bundle(self.environ))
        return route

    def _take(self, scheme: str, netloc: str) -> tuple[AnyConnection, bool]:
        pool: dict = self._local.__dict__.setdefault("conns", {})
        conn = pool.pop((scheme, netloc), None)
        if conn is not None:
            return conn, True
        route = self._route(scheme, netloc)
        parts = urlsplit(f"{scheme}://{netloc}/")
        port = parts.port or (443 if scheme == "https" else 80)
        host = parts.hostname or ""
        conn = transport.connect(scheme, host, port, route, self.limits, self._context)
        return conn, False

    def give_back(self, scheme: str, netloc: str, conn: AnyConnection) -> None:
        pool: dict = self._local.__dict__.setdefault("conns", {})
        old = pool.pop((scheme, netloc), None)
        if old is not None:
            old.close()
        pool[(scheme, netloc)] = conn

    # ----- requests ---------------------------------------------------------------------------
    def _budget(self, until: float | None, seconds: float) -> float:
        if until is None:
            return seconds
        left = until - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded(f"the operation took over {self.limits.operation:g} s")
        return min(seconds, left)

    def _send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | memoryview | None,
        until: float | None,
    ) -> tuple[AnyConnection, http.client.HTTPResponse, transport._Guard]:
        """Send and read the answer's head; reconnects once when a kept-alive connection was
        closed by the server while idle. The guard stays live for the body."""
        parts = urlsplit(url)
        target = f"{parts.path}?{parts.query}" if parts.query else parts.path
        self._check_stop()
        conn, reused = self._take(parts.scheme, parts.netloc)
        route = self._route(parts.scheme, parts.netloc)
        while True:
            # A body to send (a part of an upload) may take as long as one to receive.
            sending = self.limits.body_time(len(body)) if body else self.limits.timeout
            guard = WATCHDOG.guard(conn, self._budget(until, sending), self)
            try:
                self._check_stop()  # set before the guard was watched: nothing is sent
                resp = transport.send(conn, method, target, headers, body, parts.netloc, route)
                if guard.fired:
                    raise DeadlineExceeded("no answer within the time limit")
                return conn, resp, guard
            except BaseException as exc:
                release(guard)
                conn.close()
                self._check_stop()
                if guard.fired:
                    raise DeadlineExceeded("no answer within the time limit") from None
                if reused and isinstance(exc, OSError):
                    reused = False  # an idle keep-alive connection the server closed: once more
                    continue
                raise _mapped(exc) from None

    def exchange(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | memoryview | None,
        cap: int,
        until: float | None = None,
        cut: bool = False,
    ) -> tuple[int, dict[str, str], bytes]:
        """One whole request: (status, headers with lower-case names, body of at most ``cap``
        bytes; with ``cut`` a longer body is cut there, else refused); BadResponse for an answer
        no server may send, OSError for a failure worth retrying (DeadlineExceeded when the
        watchdog ended it)."""
        conn, resp, guard = self._send(method, url, headers, body, until)
        try:
            WATCHDOG.extend(guard, self._budget(until, self.limits.body_time(cap)))
            data = b"" if method == "HEAD" else read_capped(resp, cap, cut)
            answer = {k.lower(): v for k, v in resp.getheaders()}
            if guard.fired:
                raise DeadlineExceeded("the answer did not arrive within the time limit")
        except BaseException as exc:
            conn.close()
            self._check_stop()
            if guard.fired:
                raise DeadlineExceeded("the answer did not arrive within the time limit") from None
            raise _mapped(exc) from None
        finally:
            release(guard)
        whole = resp.isclosed() or resp.length == 0
        resp.close()
        if whole and not resp.will_close:
            parts = urlsplit(url)
            self.give_back(parts.scheme, parts.netloc, conn)
        else:
            conn.close()
        return resp.status, answer, data

    def open(
        self, url: str, headers: Mapping[str, str], until: float
    ) -> tuple[int, dict[str, str], Ranged | bytes]:
        """A GET whose body, when the answer is 200/206 with a Content-Length, is left for the
        caller to read (a :class:`Ranged`, whose length the caller checks before reading);
        otherwise the first 64 KiB of the error answer. Nothing here waits past ``until``."""
        conn, resp, guard = self._send("GET", url, headers, None, until)
        answer = {k.lower(): v for k, v in resp.getheaders()}
        if resp.status in (200, 206) and resp.length is not None:
            parts = urlsplit(url)
            ranged = Ranged(self, parts.scheme, parts.netloc, conn, resp, guard, until)
            return resp.status, answer, ranged
        if resp.status in (200, 206):  # chunked, or to the close: no length to check
            release(guard)
            conn.close()
            raise BadResponse(f"a {resp.status} answer to a ranged GET without a Content-Length")
        try:
            WATCHDOG.extend(guard, self._budget(until, self.limits.body_time(64 << 10)))
            data = resp.read(64 << 10)
        except (OSError, http.client.HTTPException):
            data = b""
        finally:
            release(guard)
            conn.close()
        return resp.status, answer, data


def _mapped(exc: BaseException) -> BaseException:
    """http.client's errors as retryable (OSError) or not (BadResponse)."""
    if isinstance(exc, OSError | BadResponse):
        return exc
    if isinstance(exc, http.client.IncompleteRead):
        return ConnectionResetError("connection closed before the body was complete")
    if isinstance(exc, transport.BadHeader):
        return BadResponse(str(exc))
    if isinstance(exc, http.client.HTTPException):
        what = str(exc) or type(exc).__name__
        return BadResponse(f"{type(exc).__name__}: {what[:120]}")
    return exc


class Ranged:
    """A ranged GET's body on a pooled connection; the connection goes back once read whole.

    Its time is earned by what arrives: the timeout's grace after the headers, then one second
    per ``min_rate`` bytes received (a length the server claims earns nothing), never past the
    operation's ``until``: a trickle ends within the grace, a stall within the timeout."""

    def __init__(
        self,
        pool: Pool,
        scheme: str,
        netloc: str,
        conn: AnyConnection,
        resp: http.client.HTTPResponse,
        guard: transport._Guard,
        until: float,
    ) -> None:
        self._pool, self._key = pool, (scheme, netloc)
        self.conn, self.resp, self._guard = conn, resp, guard
        self.length = resp.length or 0
        self._body = Body(conn, resp, self.length)
        self._done = False
        self._until = until
        self._start = time.monotonic()
        self._got = 0
        WATCHDOG.move_to(guard, min(until, self._start + pool.limits.timeout))
        if conn.plain:
            self.splice_into = self._splice_into

    @property
    def left(self) -> int:
        return self._body.left

    def readinto(self, buffer: memoryview) -> int:
        return self._step(self._body.readinto, buffer)

    def _splice_into(self, pipe: Pipe, limit: int) -> int:
        return self._step(self._body.splice_into, pipe, limit)

    def _step(self, read: Callable[..., int], *args: object) -> int:
        try:
            n = read(*args)
        except OSError as exc:
            fired = self._guard.fired
            self._abandon()
            self._pool._check_stop()
            if fired:
                raise DeadlineExceeded("the body did not arrive within the time limit") from None
            raise exc
        self._got += n
        if self._body.left == 0 and not self._done:
            self._finish()
        elif n:
            self._earn()
        return n

    def _earn(self) -> None:
        """Move the deadline by what the bytes so far earned (at most every second of it)."""
        limits = self._pool.limits
        due = min(self._until, body_due(self._start, limits.timeout, self._got, limits.min_rate))
        if due - self._guard.deadline >= 1.0:
            WATCHDOG.move_to(self._guard, due)

    def _finish(self) -> None:
        self._done = True
        release(self._guard)
        if self._guard.fired:
            self.conn.close()
            return
        try:
            self._body.finish()
        except OSError:  # the socket option could not be reset: the connection goes, not back
            self.conn.close()
            raise
        if self.resp.will_close:
            self.conn.close()
        else:
            self._pool.give_back(*self._key, self.conn)

    def _abandon(self) -> None:
        self._done = True
        release(self._guard)
        self.resp.close()
        self.conn.close()
        if self.conn.last_sock is not None:
            self.conn.last_sock.close()

    def close(self) -> None:
        if not self._done:
            if self._body.left == 0:
                self._finish()
            else:
                self._abandon()
