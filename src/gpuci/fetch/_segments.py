"""Segmented downloads: one large file over several ranged connections at once (and one
connection as a one-segment plan on the same engine, :class:`Segmenter` with ``wide`` off).

retry-fetch's side of the ranged-download engine (:mod:`gpuci.ranged`, which the cache's
restore drives too): the planner (:class:`gpuci.ranged._plan.Plan`) and the workers
(:class:`gpuci.ranged._pool.WorkPool`) are the engine's; this module is the HTTP source (ranged
GETs through :mod:`gpuci.fetch._client`, each answer checked before a byte is written) and
feeds the ``.incomplete`` sink (:meth:`gpuci.fetch._partial.Partial.sink`).

Why: a connection to a hub, CDN or object store gets a share of the link (tens of MB/s) and
each request waits tens of milliseconds for its first byte, so one connection per file is the
ceiling on a fast runner; aria2c and Hugging Face's fast paths open several. On loopback the
CPU is the limit and extra connections only add work. So the count is adaptive
(:class:`gpuci.adaptive.Concurrency`): the first response starts alone, and every time the
controller allows another connection a new worker takes the far half of the largest range
still to come (work stealing, :meth:`~gpuci.ranged._plan.Plan.take`); the connection that owned
it stops at the new boundary.

It starts wide, as ``aria2c -x8 -s8`` does: the first response already tells the size, so the
first round opens :func:`wide_start` connections at once (one per two segments' worth of what
is left, at most 8), instead of doubling from one, which cost a remote-like link a second of
ramp per file. The controller then grows from there while throughput keeps rising, and
no connection opens while the hash is behind (:meth:`Segmenter._cpu_bound`): sha256 eats
bytes in order on one core, so once it is the limit more connections only cost CPU.

When a download segments (a strong validator, ``Accept-Ranges``, a size of two segments)
and how wide it starts: :mod:`gpuci.fetch._widths`.

What a segment's answer must be: a 206 with the same validator and a ``Content-Range`` that starts
exactly where we asked, ends inside what we asked, and names the same total. Anything else
never reaches the file:

- a 200 with the same ETag: the server ignores ``Range``; nothing of the body is written, and
  the download continues on one connection (:class:`SegmentsRefused`);
- a 200 with another ETag, or a 206 with another ETag: the file changed; everything is
  deleted and the download starts over (:class:`FileChanged`);
- a ``Content-Range`` at another offset or with another total: the server lies about ranges;
  one connection from then on (:class:`SegmentsRefused`).

Resume: every segment writes through its own sink (:meth:`~gpuci.fetch._partial.Partial.sink`),
which moves its ``written``. While one connection writes in order from the file's start, the
file's size is the record, as on the one-connection path; before the first byte lands out of
order the written ranges go on record, and from then on a checkpoint thread writes the sidecar
with every written range every ``_SAVE_EVERY_S`` (and once more when the run stops), so a cut
connection resumes its segment from its last byte and a ``kill -9`` loses at most that
interval's bytes. Each record is durable (data ``fdatasync``, then the record written,
``fsync``-ed and renamed into place): a sidecar never claims bytes a crash of the machine
could lose, and the checkpoints' flush runs beside the writers, never in their way. The
sha256 of the whole file is a hash cursor that reads back what landed ahead of it
(:mod:`gpuci.hashcursor`).
"""

from __future__ import annotations

import contextlib
import functools
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator

import httpx

from gpuci.adaptive import Concurrency
from gpuci.errors import FetchError
from gpuci.fetch import _widths
from gpuci.fetch._client import (
    CREDENTIALS_KEPT,
    Body,
    answered_span,
    check_identity,
    open_response,
)
from gpuci.fetch._job import BodyWatch, DownloadJob
from gpuci.fetch._policy import (
    RETRYABLE,
    RangeMismatch,
    Refused,
    ShortBody,
    check_retryable,
)
from gpuci.fetch._validators import version_of
from gpuci.fetch._widths import wide_start
from gpuci.httpclients import Deadline, Scope
from gpuci.ranged import _extents as extents
from gpuci.ranged._drive import pump
from gpuci.ranged._plan import Plan, Segment
from gpuci.ranged._pool import WorkPool
from gpuci.ranged._retry import retry_segment, throttles, work_through
from gpuci.redact import excerpt
from gpuci.retry import Interrupted
from gpuci.units import human_bytes

_SINK_DEPTH = 4  # 1 MiB batches being written or hashed per segment: ~5 MiB per connection
_HEAD_DEPTH = 16
# How stale the sidecar may be when the process is killed: what a kill -9 costs, at most.
# Each checkpoint flushes what was written since the last (the kernel writes it back anyway).
_SAVE_EVERY_S = 0.25
_TICK_S = 0.02
# The first answer's receive buffer once its server is known near (the kernel doubles it).
_NEAR_WINDOW = 2 << 20
_WINDOW_S = 0.25
# Doubling the connections to a server that caps each one nearly doubles the throughput;
# on loopback (CPU-bound) it moves it by noise. Asking for +30% keeps loopback from climbing
# on that noise (docs/benchmarks.md#figures-behind-the-code).
_GAIN = 1.3
# Bytes written at the hash cursor but not hashed yet, beyond which the hash is the bottleneck
# (half of the first connection's queues: it keeps up, the lag stays under one batch).
_HASH_LAG = (_HEAD_DEPTH // 4) << 20
# The first connection's reads, while it runs alone, returning this many bytes on average:
# data waits in the socket for this client, so this machine, not the link, sets the speed. A
# reader that keeps up with a link gets what arrived since its last read (a small fraction of
# a 1 MiB read); loopback filled nearly every 1 MiB read. Then one connection already brings
# bytes about as fast as one core hashes them (docs/benchmarks.md#figures-behind-the-code), and
# another would only compete with it for the same CPU. Unlike CPU seconds, a full socket
# says so on a machine that other work keeps busy too.
_FULL_READ = 256 << 10
_READS_WINDOW_S = 0.1  # shorter than the controller's window: judged before its first step


class SegmentsRefused(RangeMismatch):
    """The server ignored ``Range`` or lied in ``Content-Range``: use one connection."""


class FileChanged(RangeMismatch):
    """A segment came from another version of the file: delete and start over."""


def _segment_retryable(exc: BaseException) -> bool:
    """What a segment retries on its own connection: a transport failure or a retryable
    status; a refused or changed range ends the segmented download instead."""
    return isinstance(exc, RETRYABLE) and not isinstance(exc, (SegmentsRefused, FileChanged))


class Segmenter:
    """One attempt of a download on the engine; ``run`` returns when the file is whole.

    Without ``wide`` (:func:`segmentable` said no) the plan is the first response alone: one
    segment to the end (one byte past max-bytes when no size was announced), never split,
    retried by the download's next attempt (a resume checked as the first request is)."""

    def __init__(
        self,
        job: DownloadJob,
        resp: httpx.Response,
        total: int | None,
        wide: bool,
        body_end: int | None = None,  # where ``resp``'s body ends: a 206's span, or total
        scope: Scope | None = None,  # the attempt's connections (``resp``'s included)
    ):
        self.job = job
        self.part = job.partial
        self.policy = job.policy
        self.total = total  # None: not announced; the body's end is the file's end
        self.wide = wide
        self.validator = job.partial.validator or ""
        self.url = str(resp.url)  # every segment follows the same resolved URL
        self.credentials = dict(resp.extensions.get(CREDENTIALS_KEPT) or {})
        self.conc = (
            Concurrency(
                start=wide_start(total - job.partial.held(), self.policy, job.first_byte_s),
                ceiling=self.policy.connections,
                window_s=_WINDOW_S,
                gain=_GAIN,
            )
            if wide and total is not None
            else Concurrency.fixed(1)
        )
        self.lock = threading.Lock()  # the plan's segments and the counts below
        self.stop = threading.Event()
        self.scope = scope if scope is not None else Scope()  # shut by _fail
        self.error: BaseException | None = None
        self.running = 0
        self.most_running = 0  # what the connections output reports
        # The engine's workers, one per connection; they stop with this download.
        self.pool = WorkPool(self.conc, chunk=lambda _index: 0, cancelled=self.stop)
        # Near the end, ranges smaller than a segment are still split between idle
        # connections, or the last few would finish alone at one connection's speed.
        steal = max(extents.ALIGN, self.policy.segment_bytes // 4)
        limit = self.policy.max_bytes
        end = total if total is not None else (limit + 1 if limit is not None else sys.maxsize)
        self.plan = Plan(self.part.size, self.part.extents, end, steal)
        self.head = self.plan.head
        cut = body_end if body_end is not None else self.head.end
        if cut < self.head.end:  # never past what the 206 announced (its bytes: the server's)
            if wide:  # the rest over ranged requests; on one connection, the next attempt's
                rest = Segment(cut, cut, self.head.end, cut)
                self.plan.pending.insert(0, rest)
                self.plan.segments.append(rest)
            self.head.end = cut
        # Requests stay bounded, so a later cut past their end wastes nothing; large enough
        # that the first-byte wait of each (tens of ms) costs a few percent at most.
        self.request_bytes = 4 * self.policy.segment_bytes
        self.advance: Callable[[int], None] = job.meter.advance
        self.finished = threading.Event()  # tells the checkpoint thread to stop
        # Near (Plan.take) by the fastest first answer: load only ever slows one (a busy
        # machine's loopback can be slower than a far server), distance never speeds one up.
        self.fastest = job.first_byte_s if job.first_byte_s is not None else float("inf")
        self.head_full = False  # the head's reads filled their buffers (its last window)
        self.recorded = False  # the sidecar lists the written ranges (:meth:`_record`)
        self.record_lock = threading.Lock()

    # ----- supervisor --------------------------------------------------------------------------
    def run(self, head: httpx.Response) -> None:
        self.part.open_for_append()
        if self.part.extents:  # ranges beyond the prefix: the file's size says nothing
            self._record()
        checkpoints = threading.Thread(target=self._checkpoints, name="fetch-sidecar", daemon=True)
        checkpoints.start()
        try:
            if self.wide:
                self._spawn(self.head, head)
                self.pool.run(self._feed, tick=_TICK_S)
            else:  # one connection, on this thread: a Ctrl-C reaches its read at once
                self.head.owned = True
                self.running = self.most_running = 1
                self._work(self.head, head)
        finally:
            self.finished.set()
            checkpoints.join()
        self.job.peak_connections = max(self.job.peak_connections, self.most_running)
        self._settle()

    def _settle(self) -> None:
        """Leave the Partial as the next attempt (or run) needs it, or raise what went wrong."""
        part = self.part
        error = self.error
        if isinstance(error, FileChanged):
            part.reset()
            raise error
        written = self.plan.written()
        part.size = part.cursor.position
        part.extents = [(s, e) for s, e in written if e > part.size]
        limit = self.policy.max_bytes
        if self.total is None and limit is not None and self.head.pos > limit:
            part.reset()
            raise Refused(
                f"the body ran past max-bytes ({human_bytes(limit)}); stopped reading "
                "and deleted the partial file",
                hint="raise max-bytes if the file really is that large",
            )
        if isinstance(error, SegmentsRefused):
            self.job.one_connection = True
        if error is not None:
            if self.recorded or part.extents:
                part.save(written)
            part.close()
            raise error
        part.close()
        total = self.head.end if self.total is None else self.total
        if part.size != total:
            raise RangeMismatch(f"the download ended with {part.size} of {total} bytes hashed")

    def _feed(self) -> bool:
        """The pool's planner: a connection for every range the controller allows; False once
        the run stops or the file is whole (the pool then drains what runs). Stopped from
        outside (the client aborted): every segment's retry wait ends (they wait on stop)."""
        if self.job.cancel is not None and self.job.cancel.is_set() and not self.stop.is_set():
            self._fail(Interrupted("the downloads were stopped"))
        with self.lock:  # an error has set stop (_fail)
            if self.stop.is_set() or (self.running == 0 and self.plan.done()):
                return False
            while self.running < self.conc.limit and not self._cpu_bound():
                seg = self.plan.take(not self.job.one_connection, self.fastest < _widths.FAR_S)
                if seg is None:
                    break
                self._spawn(seg, None)
            return True

    def _spawn(self, seg: Segment, resp: httpx.Response | None) -> None:
        seg.owned = True
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        self.pool.submit(lambda _lane: self._work(seg, resp))

    def _cpu_bound(self) -> bool:
        """This machine, not the link, is the limit: another connection cannot help then.

        Either bytes wait at the cursor to be hashed, or the first connection, alone, finds
        its socket full at every read (``_FULL_READ``). sha256 is sequential, so no count of
        connections verifies faster than one core hashes; on loopback the controller's first
        step (it always tries 2) and load noise opened 2-8 connections, each costing CPU
        (threads, pieces read back for the in-order hash) for no speed. Held, not refused: the count
        grows again once neither holds. Only while a connection runs, so pending ranges are
        never stranded. The full-read rule sees plain HTTP only: over TLS a read returns one
        record (16 KiB) at most, so there only the hash-lag rule can hold the count."""
        if self.running == 0:
            return False
        lag = self.head.written - self.part.cursor.position
        return (self.running == 1 and self.head_full) or lag >= _HASH_LAG

    def _record(self) -> None:
        """Put the written ranges on record, durably, before a byte lands out of order.

        Until then one connection writes in order and the file's size is the record (as
        ``Partial.adopt`` wrote it): flushing it every checkpoint made loopback wait on the
        disk (docs/benchmarks.md, "retry-fetch on one engine")."""
        with self.record_lock:
            if not self.recorded:
                with self.lock:
                    written = self.plan.written()
                self.part.save(written, durable=True)
                self.recorded = True

    def _checkpoints(self) -> None:
        """Every ``_SAVE_EVERY_S`` once on record (:meth:`_record`): the written ranges,
        durably, when they changed.

        The ranges are read before the flush, so each one claimed was written before it
        began; the flush runs here, so no writer or connection waits for the disk."""
        last: list[tuple[int, int]] | None = None
        while not self.finished.wait(_SAVE_EVERY_S):
            if not self.recorded:
                continue
            with self.lock:
                written = self.plan.written()
            if written == last:
                continue
            try:
                self.part.save(written, durable=True)
            except OSError as exc:  # a full disk: the download itself fails on it
                self._fail(exc)
                return
            last = written

    def _fail(self, exc: BaseException) -> None:
        """End the run on ``exc``, and shut every connection of it (its scope: the client's
        abort narrowed to this download): a segment blocked waiting for headers or in a read
        ends now, not at its timeout or min-rate, as the stop flag is only seen between reads.
        Its thread ends with :class:`gpuci.httpclients.Aborted`, which never replaces ``exc``."""
        with self.lock:
            if self.error is None or isinstance(exc, FileChanged):
                self.error = exc
            self.stop.set()
        self.scope.abort()

    # ----- workers -----------------------------------------------------------------------------
    def _work(self, seg: Segment, resp: httpx.Response | None) -> None:
        """Deliver ``seg`` (its first response open when ``resp`` is given) on the engine's loop
        (:func:`work_through`): a failure the policy retries resumes from what reached the disk.
        The attempts count every failure of this segment, never reset."""
        try:  # the pool holds one of the controller's slots meanwhile
            if resp is None:
                self._record()  # before this range's first byte lands
            attempt = functools.partial(self._deliver, first=[resp] if resp is not None else [])
            work_through(self.plan, seg, attempt, self._retried, self.lock, self.stop)
        except BaseException as exc:  # handed to the supervisor, which raises it
            self._fail(exc)
        finally:
            with self.lock:
                self.running -= 1

    def _retried(self, seg: Segment, attempt: Callable[[Segment], bool | None]) -> bool | None:
        """``attempt(seg)`` under the retry policy, its retries bounded by the job's deadline
        (read when the segment starts: a segment taken late has less time left)."""
        return retry_segment(
            seg,
            attempt,
            self.policy.retry,
            _segment_retryable if self.wide else (),  # one connection: the next attempt
            throttle=self._throttle,
            lock=self.lock,
            on_lost=lambda lost: self.advance(-lost),
            stop=self.stop,
            deadline=max(0.0, self.job.remaining()),
        )

    def _deliver(self, seg: Segment, first: list[httpx.Response]) -> None:
        """One attempt: requests for ``seg`` until it is done, the run stops or the controller
        takes the connection back."""
        while not self.stop.is_set():
            with self.lock:
                if seg.pos >= seg.end:
                    return
                if not first and self.running > self.conc.limit:
                    return  # the controller backed off: hand the rest back, between requests
            if first:
                self._pump(seg, first.pop())
                if not self.wide:  # one connection: its body's end is the attempt's
                    with self.lock:
                        if self.total is None:  # none announced: the file ends there too
                            seg.end = min(seg.end, seg.pos)
                        elif seg.pos < seg.end:  # (else its rest would be queued for _ranged)
                            raise ShortBody(f"short body: {seg.pos} of {seg.end} bytes")
                    return
            else:
                self._ranged(seg)

    def _throttle(self, exc: BaseException | None) -> None:
        """Before a retry's wait: a 429 or 503 tells the controller to back off."""
        if throttles(exc):
            self.conc.throttled()

    def _ranged(self, seg: Segment) -> None:
        """One ranged GET for what is left of ``seg``, checked before a byte is written."""
        with self.lock:
            start = seg.pos
            end = seg.asked = min(seg.end, start + self.request_bytes)
            if seg.resend():  # a retry, counted when sent (one never sent is no attempt)
                self.job.attempts += 1
                self.part.keep([(seg.start, start)])  # the retry goes on from here
        headers = {
            "Accept-Encoding": "identity",
            "Range": f"bytes={start}-{end - 1}",
            "If-Range": self.validator,
        }
        left = max(0.001, min(self.policy.timeout, self.job.remaining()))
        asked = time.monotonic()
        with open_response(
            self.job.client,
            "GET",
            self.url,
            headers=headers,
            credentials=self.credentials,
            timeout=httpx.Timeout(left),
            deadline=Deadline.after(self.policy.deadline, self.job.started),  # headers too
            scope=self.scope,
        ) as resp:
            waited = time.monotonic() - asked
            with self.lock:
                self.fastest = min(self.fastest, waited)
            upto = self._check(resp, start, end)
            self._pump(seg, resp, upto=upto)
            with self.lock:
                short = seg.pos < min(upto, seg.end) and not self.stop.is_set()
            if short:  # a 206 that ended before its span: an attempt the policy counts
                raise ShortBody(f"short body: bytes {start}-{upto - 1} ended at {seg.pos}")

    def _check(self, resp: httpx.Response, start: int, end: int) -> int:
        """Refuse an answer that is not the 206 asked for; returns where its span ends (the
        body's bytes past it are never the file's: a chunked body may run on)."""
        check_retryable(resp, self.url)
        status = resp.status_code
        version = version_of(resp.headers, self.validator)
        if status in (200, 206) and version != self.validator:
            raise FileChanged(
                f"the file changed during the download ({excerpt(str(self.validator), 80)} "
                f"became {excerpt(str(version), 80)}); starting over"
            )
        if status == 200:
            raise SegmentsRefused(
                f"the server ignored Range for bytes {start}-{end - 1} (HTTP 200); nothing of "
                "that answer was written, continuing on one connection"
            )
        if status != 206:
            raise FetchError(
                f"HTTP {status} {resp.reason_phrase} for bytes {start}-{end - 1}".strip(),
                hint="the server refused a ranged request it had announced; retry, or set "
                "connections to 1",
            )
        check_identity(resp)
        span = answered_span(resp, start, end, self.total)
        if span is None:
            raise SegmentsRefused(
                f"asked for bytes {start}-{end - 1} of {self.total}, the server answered "
                f"Content-Range {excerpt(repr(resp.headers.get('Content-Range')), 80)}; "
                "nothing of it was written, continuing on one connection"
            )
        return span[1] + 1

    def _pump(self, seg: Segment, resp: httpx.Response, upto: int | None = None) -> None:
        """Stream ``resp`` into ``seg`` until its (possibly lowered) end, or ``upto`` (a ranged
        answer's span) when that comes first (the engine's driver,
        :func:`gpuci.ranged._drive.pump`); then hang up."""

        def on_bytes(n: int) -> None:
            self.advance(n)
            self.conc.record(n)

        # The first connection keeps the deep queue of the one-connection path (loopback runs
        # on it); the others stay shallow, so memory grows slowly with their count.
        head = seg is self.head
        sink = self.part.sink(seg, depth=_HEAD_DEPTH if head else _SINK_DEPTH)
        # The first, open-ended response reads straight from its connection (client.Body: no
        # h11 copies; it is cut short or runs to the end, so its connection is not reused
        # anyway); bounded ranged requests keep h11, whose connections are reused.
        # the deadline and the slowest rate accepted
        watch = BodyWatch(self.policy, self.job.deadline_check(self.url))
        chunks = watch.counted(self._watched(resp) if head else resp.iter_raw())
        if upto is not None:
            chunks = _cut(chunks, upto - seg.pos)
        try:
            pump(
                seg,
                chunks,
                sink,
                lock=self.lock,
                stop=self.stop.is_set,
                on_bytes=on_bytes,
                check=watch.check,
            )
        finally:
            if head:
                self.head_full = False

    def _watched(self, resp: httpx.Response) -> Iterator[bytes]:
        """The first answer's chunks, judging on the way whether its reads fill their buffers
        (``head_full``) and narrowing its window once its server is known near."""
        clock, reads, got = time.monotonic(), 0, 0
        narrowed = False
        for chunk in Body(resp).chunks():
            reads, got = reads + 1, got + len(chunk)
            if not narrowed and self.wide and self.fastest < _widths.FAR_S:
                narrowed = _narrow(resp)
            if (now := time.monotonic()) - clock >= _READS_WINDOW_S:
                alone = self.running == 1  # reads shared with others say less
                self.head_full = alone and got >= reads * _FULL_READ
                clock, reads, got = now, 0, 0
            yield chunk


def _cut(chunks: Iterable[bytes], left: int) -> Iterator[bytes]:
    """The first ``left`` bytes of ``chunks``: a 206's body never runs past its span."""
    for chunk in chunks:
        if len(chunk) >= left:
            if left > 0:
                yield chunk[:left]
            return
        left -= len(chunk)
        yield chunk


def _narrow(resp: httpx.Response) -> bool:
    """Cap the first answer's receive buffer once its server is known to be near.

    Linux grows a socket's receive buffer up to ``tcp_rmem``'s maximum (32 MiB on some hosts)
    while the reader lags, and all of it is lost when that open-ended answer is cut short. A
    near server needs no large window; a far one is never narrowed (its window is its speed).
    Returns True once tried (it is tried once; a stream without a socket keeps its buffer)."""
    stream = resp.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _NEAR_WINDOW)
    return True
