"""One resumable, retried, verified download: ``fetch_file(url, dest) -> FetchResult``.

The path, top to bottom: bytes stream into ``<dest>.incomplete`` while sha256 is computed on
the fly; a failed attempt keeps what arrived, and the next one asks for the rest with ``Range``
plus ``If-Range`` (so a file that changed meanwhile comes back whole, never spliced). Only a 206
whose ``Content-Range`` starts exactly where we stopped is appended; a 200 restarts cleanly; a
416 at full length means we already have it all. When the digest matches, the file is renamed
into place; nothing incomplete or unverified ever sits under the final name.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx

from gpuci.errors import FetchError, GpuciError, IntegrityError
from gpuci.fetch.policy import (
    RETRY_STATUSES,
    RETRY_TRANSPORT,
    FetchPolicy,
    RangeMismatch,
    RetryableError,
    RetryableStatus,
    ShortBody,
    parse_retry_after,
)

INCOMPLETE = ".incomplete"  # partial bytes, resumable
META = ".incomplete.json"  # the validator (ETag / Last-Modified) those bytes came with
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$")
_UNSATISFIED_RANGE = re.compile(r"^\s*bytes\s+\*/(\d+)\s*$")
_HASH_BLOCK = 1 << 20
_WRITE_BLOCK = 1 << 20  # network chunks (64 KiB) are joined into blocks this big for the writer
_IOV_MAX = 1024
_WRITE_QUEUE = 8  # blocks in flight: bounds memory at ~8 MiB per download


class ProgressLike(Protocol):
    """What ``fetch_file`` reports into: :class:`gpuci.progress.Progress` fits."""

    total: int | None

    def advance(self, nbytes: int) -> None: ...


@dataclass(frozen=True)
class FetchResult:
    url: str  # the URL (main or mirror) that delivered the final bytes
    path: Path
    sha256: str
    bytes: int
    attempts: int  # HTTP requests made, all sources together
    resumed_bytes: int  # bytes kept from earlier attempts instead of fetched again
    seconds: float
    skipped: bool = False  # already present with the expected sha256: nothing fetched


def file_sha256(path: Path, limit: int | None = None) -> tuple[hashlib._Hash, int]:
    """Hash a file (or its first ``limit`` bytes); returns the hasher and the bytes read."""
    hasher = hashlib.sha256()
    done = 0
    with open(path, "rb") as handle:
        while limit is None or done < limit:
            block = handle.read(_HASH_BLOCK if limit is None else min(_HASH_BLOCK, limit - done))
            if not block:
                break
            hasher.update(block)
            done += len(block)
    return hasher, done


def strong_validator(headers: httpx.Headers) -> str | None:
    """A strong ETag, else Last-Modified: what ``If-Range`` may carry (never a weak ETag)."""
    etag = headers.get("ETag")
    if etag and not etag.startswith("W/"):
        return etag
    return headers.get("Last-Modified")


def parse_content_range(value: str | None) -> tuple[int, int, int | None] | None:
    match = _CONTENT_RANGE.match(value or "")
    if not match:
        return None
    total = None if match.group(3) == "*" else int(match.group(3))
    return int(match.group(1)), int(match.group(2)), total


class Partial:
    """``<dest>.incomplete`` plus its validator, hashed as it grows (resumable across runs)."""

    def __init__(self, dest: Path) -> None:
        self.path = dest.with_name(dest.name + INCOMPLETE)
        self.meta = dest.with_name(dest.name + META)
        self.validator: str | None = None
        self.total: int | None = None
        self._fd: int | None = None
        self._hasher = hashlib.sha256()
        self.size = 0
        self._load()

    def _load(self) -> None:
        """Keep bytes from an earlier run only when we know which version they belong to."""
        try:
            meta = json.loads(self.meta.read_text(encoding="utf-8"))
            self.validator, self.total = meta.get("validator"), meta.get("total")
            self.size = self.path.stat().st_size
        except (OSError, ValueError, AttributeError):
            self.validator, self.total, self.size = None, None, 0
        if not self.validator or (self.total is not None and self.size > self.total):
            self.reset()
        elif self.size:
            self._hasher, self.size = file_sha256(self.path)

    def reset(self) -> None:
        """Start over: the bytes on disk belong to no version we can name."""
        self.discard()
        self.validator, self.total, self.size = None, None, 0
        self._hasher = hashlib.sha256()

    def adopt(self, validator: str | None, total: int | None) -> None:
        self.validator, self.total = validator, total
        if validator:
            self.meta.write_text(json.dumps({"validator": validator, "total": total}))
        else:
            with contextlib.suppress(FileNotFoundError):
                self.meta.unlink()

    def write_block(self, chunks: list[bytes]) -> None:
        """Append chunks with as few syscalls as possible (``writev``, no joining copy)."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        view = [memoryview(c) for c in chunks]
        while view:
            done = os.writev(self._fd, view[:_IOV_MAX])
            self.size += done
            while view and done >= len(view[0]):
                done -= len(view[0])
                view.pop(0)
            if view and done:
                view[0] = view[0][done:]

    def hash_block(self, chunks: list[bytes]) -> None:
        for chunk in chunks:
            self._hasher.update(chunk)

    def digest(self) -> str:
        return self._hasher.hexdigest()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def discard(self) -> None:
        self.close()
        for path in (self.path, self.meta):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


class Sink:
    """Writes on one helper thread and hashes on another while the caller reads the socket.

    Measured on loopback (scripts/bench_fetch.py, docs/benchmarks.md): reading, hashing and
    writing 64 KiB chunks in one thread ran at about half of curl's rate, and write+hash on one
    helper still bound the pipeline. Handing 1 MiB batches of chunks to a writer (``writev``)
    and a hasher (both release the GIL) overlaps disk, hash and network. ``close``
    flushes what arrived, so bytes received before a dropped connection are kept.
    """

    def __init__(self, partial: Partial) -> None:
        self._partial = partial
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._error: BaseException | None = None
        self._queues: list[queue.Queue[list[bytes] | None]] = []
        self._threads: list[threading.Thread] = []
        for name, step in (("writer", partial.write_block), ("hasher", partial.hash_block)):
            q: queue.Queue[list[bytes] | None] = queue.Queue(_WRITE_QUEUE)
            thread = threading.Thread(
                target=self._drain, args=(q, step), name=f"fetch-{name}", daemon=True
            )
            thread.start()
            self._queues.append(q)
            self._threads.append(thread)

    def _drain(
        self, q: queue.Queue[list[bytes] | None], step: Callable[[list[bytes]], None]
    ) -> None:
        while (block := q.get()) is not None:
            if self._error is None:
                try:
                    step(block)
                except BaseException as exc:  # handed to the reading thread in write/close
                    self._error = exc

    def write(self, chunk: bytes) -> None:
        self._pending.append(chunk)
        self._pending_size += len(chunk)
        if self._pending_size >= _WRITE_BLOCK:
            self._flush()

    def _flush(self) -> None:
        if self._error is not None:
            raise self._error
        if self._pending:
            block, self._pending, self._pending_size = self._pending, [], 0
            for q in self._queues:
                q.put(block)

    def close(self) -> None:
        """Write everything received so far; re-raise a write error (disk full, say)."""
        try:
            self._flush()
        finally:
            for q in self._queues:
                q.put(None)
            for thread in self._threads:
                thread.join()
            self._partial.close()
        if self._error is not None:
            raise self._error


class _Download:
    """One file's state across attempts and sources."""

    def __init__(
        self,
        client: httpx.Client,
        dest: Path,
        policy: FetchPolicy,
        headers: Mapping[str, str],
        progress: ProgressLike | None,
    ) -> None:
        self.client = client
        self.dest = dest
        self.policy = policy
        self.headers = dict(headers)
        self.progress = progress
        self.partial = Partial(dest)
        self.started = time.monotonic()
        self.attempts = 0
        self.resumed_bytes = 0

    def remaining(self) -> float:
        return self.policy.deadline - (time.monotonic() - self.started)

    def attempt(self, url: str) -> None:
        """One GET; returns when ``partial`` holds the whole file, raises otherwise."""
        self.attempts += 1
        part = self.partial
        offset = part.size if part.validator else 0
        if offset == 0 and part.size:
            part.reset()
        headers = {**self.headers, "Accept-Encoding": "identity"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
            headers["If-Range"] = part.validator or ""
        timeout = httpx.Timeout(max(0.001, min(self.policy.timeout, self.remaining())))
        with self.client.stream("GET", url, headers=headers, timeout=timeout) as resp:
            self._check_status(resp, url, offset)
            if resp.status_code == 416:
                return  # we already hold every byte (checked in _check_status)
            total = self._accept(resp, url, offset)
            self._stream(resp, url, total)

    def _check_status(self, resp: httpx.Response, url: str, offset: int) -> None:
        status = resp.status_code
        if status in RETRY_STATUSES:
            retry_after = parse_retry_after(resp.headers.get("Retry-After"))
            raise RetryableStatus(status, url, retry_after)
        if status == 416 and offset:
            match = _UNSATISFIED_RANGE.match(resp.headers.get("Content-Range", ""))
            if match and int(match.group(1)) == offset:
                return
            self.partial.reset()
            raise RangeMismatch(f"HTTP 416 for bytes={offset}-: the file changed size")
        if status not in (200, 206):
            raise FetchError(
                f"HTTP {status} {resp.reason_phrase}".strip(),
                hint=_hint_for_status(status),
            )

    def _accept(self, resp: httpx.Response, url: str, offset: int) -> int | None:
        """Decide where the body goes: appended (a matching 206) or from zero (anything else)."""
        part = self.partial
        encoded = resp.headers.get("Content-Encoding", "identity").lower() not in ("identity", "")
        validator = None if encoded else strong_validator(resp.headers)
        if resp.status_code == 206:
            span = parse_content_range(resp.headers.get("Content-Range"))
            same_version = validator is not None and validator == part.validator
            if not offset or encoded or span is None or span[0] != offset or not same_version:
                part.reset()
                raise RangeMismatch(
                    f"a 206 that does not continue at byte {offset} of the same version "
                    f"(Content-Range {resp.headers.get('Content-Range')!r}); restarting"
                )
            total = span[2]
            self.resumed_bytes += offset
        else:
            if offset or part.size:
                part.reset()  # Range ignored or the file changed: a clean restart
            total = None if encoded else _int(resp.headers.get("Content-Length"))
        part.adopt(validator, total)
        if self.progress is not None:
            left = None if total is None else total - part.size
            self.progress.total = None if left is None else getattr(self.progress, "done", 0) + left
        return total

    def _stream(self, resp: httpx.Response, url: str, total: int | None) -> None:
        part = self.partial
        encoded = resp.headers.get("Content-Encoding", "identity").lower() not in ("identity", "")
        chunks = resp.iter_bytes() if encoded else resp.iter_raw()
        advance: Callable[[int], None] = self.progress.advance if self.progress else _nothing
        deadline = self.started + self.policy.deadline
        sink = Sink(part)
        try:
            for chunk in chunks:
                sink.write(chunk)
                advance(len(chunk))
                if time.monotonic() > deadline:
                    raise FetchError(
                        f"{url}: deadline of {self.policy.deadline:g}s passed at "
                        f"{part.size} bytes after {self.attempts} attempt(s)",
                        hint="raise the deadline input, or add a closer mirror",
                    )
        finally:
            sink.close()
        announced = _int(resp.headers.get("Content-Length"))
        if announced is not None and resp.num_bytes_downloaded < announced:
            raise ShortBody(f"short body: {resp.num_bytes_downloaded} of {announced} bytes")
        if total is not None and part.size != total:
            raise ShortBody(f"short body: have {part.size} of {total} bytes at its end")

    def finish(self, url: str, sha256: str | None) -> FetchResult:
        part = self.partial
        part.close()
        digest = part.digest()
        if sha256 and digest != sha256.lower():
            size = part.size
            part.discard()
            raise IntegrityError(
                f"{url}: sha256 mismatch for {self.dest.name}: expected {sha256.lower()}, "
                f"got {digest} ({size} bytes); the partial file was deleted",
                hint="check the expected sha256, or the source serves different bytes",
            )
        part.path.touch()  # an empty body never opened the file
        os.replace(part.path, self.dest)
        with contextlib.suppress(FileNotFoundError):
            part.meta.unlink()
        return FetchResult(
            url=url,
            path=self.dest,
            sha256=digest,
            bytes=self.dest.stat().st_size,
            attempts=self.attempts,
            resumed_bytes=self.resumed_bytes,
            seconds=time.monotonic() - self.started,
        )


def _nothing(_: int) -> None:
    return None


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _hint_for_status(status: int) -> str:
    if status in (401, 403):
        return "pass credentials in the headers input (e.g. 'Authorization: Bearer ...')"
    if status == 404:
        return "check the URL, or add a mirror that has the file"
    return "check the URL and the server; this status is not retried"


def describe(exc: BaseException) -> str:
    """A one-line cause: httpx's messages are sometimes empty, so the class name leads."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, GpuciError | RetryableError) or type(exc).__name__ in text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def fetch_file(
    url: str,
    dest: str | os.PathLike[str],
    sha256: str | None = None,
    *,
    policy: FetchPolicy | None = None,
    headers: Mapping[str, str] | None = None,
    mirrors: Sequence[str] = (),
    client: httpx.Client | None = None,
    progress: ProgressLike | None = None,
) -> FetchResult:
    """Download ``url`` to ``dest``: retried, resumed, verified, renamed into place atomically.

    The building block for every gpu-ci download (``retry-fetch``, the cache's ``populate``,
    model files in examples). ``sha256`` (hex) is checked before the rename; a mismatch deletes
    the bytes and raises :class:`IntegrityError` naming both digests. When ``dest`` already holds
    a file with that digest, nothing is fetched. ``mirrors`` are tried in order, each with the
    full ``policy.attempts``, all within one ``policy.deadline``. Failures raise
    :class:`FetchError` (exit 3) naming the last real cause and the attempts made, chained to
    the original exception. Pass a shared ``client`` to reuse connections across files.
    """
    policy = policy or FetchPolicy()
    dest = Path(dest)
    started = time.monotonic()
    if sha256 and dest.is_file() and file_sha256(dest)[0].hexdigest() == sha256.lower():
        return FetchResult(url, dest, sha256.lower(), dest.stat().st_size, 0, 0, 0.0, True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    own = client is None
    client = client or new_client(policy)
    job = _Download(client, dest, policy, headers or {}, progress)
    errors: list[tuple[str, BaseException, int]] = []
    try:
        for source in (url, *mirrors):
            before = job.attempts
            try:
                for attempt in policy.retrying(started):
                    with attempt:
                        job.attempt(source)
                return job.finish(source, sha256)
            except IntegrityError as exc:  # a mirror may still hold the right bytes
                errors.append((source, exc, job.attempts - before))
            except (httpx.HTTPError, httpx.InvalidURL, FetchError, RetryableError) as exc:
                errors.append((source, exc, job.attempts - before))
                if job.remaining() <= 0:
                    break
            except OSError as exc:
                raise FetchError(
                    f"cannot write {job.partial.path}: {exc.strerror or exc}",
                    hint="check the destination folder exists, is writable and has space",
                ) from exc
        if not job.partial.validator:
            job.partial.discard()  # bytes no later run could resume: leave no litter
        raise _give_up(errors, job)
    finally:
        job.partial.close()
        if own:
            client.close()


def _give_up(errors: list[tuple[str, BaseException, int]], job: _Download) -> GpuciError:
    """The last real error, with its cause and the attempts made (chained as ``__cause__``)."""
    source, exc, tries = errors[-1]
    if isinstance(exc, IntegrityError):
        return exc
    if isinstance(exc, FetchError) and "deadline" in exc.message:
        error = FetchError(exc.message, exc.hint)
    else:
        cause = describe(exc)
        where = f"{source}: {cause} after {tries} attempt(s)"
        if len(errors) > 1:
            where += f" (and {len(errors) - 1} other source(s) failed; {job.attempts} attempts)"
        hint = exc.hint if isinstance(exc, GpuciError) and exc.hint else None
        retryable = isinstance(exc, (*RETRY_TRANSPORT, RetryableError))
        if job.remaining() <= 0 or (retryable and tries < job.policy.attempts):
            where += f"; stopped by the deadline of {job.policy.deadline:g}s"
        error = FetchError(
            where,
            hint=hint or "check the URL and network; raise attempts or deadline, or add mirrors",
        )
    error.__cause__ = exc
    return error


def new_client(policy: FetchPolicy, connections: int = 8) -> httpx.Client:
    """An httpx client for downloads: redirects followed, pooled connections."""
    return httpx.Client(
        follow_redirects=True,
        timeout=httpx.Timeout(policy.timeout),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        headers={"User-Agent": "gpuci-retry-fetch"},
    )
