"""One resumable, retried, verified download: ``fetch_file(url, dest) -> FetchResult``.

The path, top to bottom: bytes stream into ``<dest>.incomplete`` while sha256 is computed on
the fly; a failed attempt keeps what arrived, and the next one asks for the rest with ``Range``
plus ``If-Range`` (so a file that changed meanwhile comes back whole, never spliced). Only a 206
whose ``Content-Range`` starts exactly where we stopped is appended; a 200 restarts cleanly; a
416 at full length means we already have it all. When the digest matches, the file is renamed
into place; nothing incomplete or unverified ever sits under the final name.

Each attempt's response is handed to the engine (:class:`gpuci.fetch._segments.Segmenter`):
on one connection it is one segment from where we stopped; when the first response allows it
(a strong validator, ``Accept-Ranges: bytes``, a known size of at least two segments), the
rest of the file comes over several ranged connections at once, with the written ranges on
record in ``<dest>.incomplete.json``, so the next attempt (or run) resumes each of them.

Hostile servers and full disks are bounded: a Content-Length over ``policy.max_bytes`` (or
over the free space) is refused before a byte is written, a body that runs past it is cut off
and its partial deleted, an encoded body is refused (see :mod:`gpuci.fetch._client`), and a
full disk deletes the partial it filled, since no later run could resume it anyway.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from gpuci import files
from gpuci.errors import FetchError, GpuciError, InputError, IntegrityError
from gpuci.fetch._client import (
    answered_span,
    check_identity,
    content_length,
    new_client,
    open_response,
    parse_content_range,
)
from gpuci.fetch._job import DownloadJob, ProgressLike
from gpuci.fetch._partial import Partial
from gpuci.fetch._policy import (
    RETRYABLE,
    FetchPolicy,
    RangeMismatch,
    Refused,
    RetryableError,
    TooSlow,
    check_retryable,
)
from gpuci.fetch._segments import Segmenter
from gpuci.fetch._sources import home_credentials
from gpuci.fetch._urls import check_url, shown_url
from gpuci.fetch._validators import strong_validator
from gpuci.fetch._widths import segmentable
from gpuci.httpclients import Deadline, Scope
from gpuci.redact import excerpt
from gpuci.units import human_bytes

__all__ = ["FetchResult", "fetch_file", "new_client", "parse_content_range", "strong_validator"]

_UNSATISFIED_RANGE = re.compile(r"^\s*bytes\s+\*/(\d+)\s*$")


@dataclass(frozen=True)
class FetchResult:
    url: str  # the URL (main or mirror) that delivered the final bytes
    path: Path
    sha256: str
    bytes: int
    attempts: int  # tries, all sources together: the first, plus one per retry (DownloadJob)
    resumed_bytes: int  # bytes kept from earlier attempts instead of fetched again
    seconds: float
    skipped: bool = False  # already present with the expected sha256: nothing fetched
    connections: int = 1  # most connections this file used at once (segmented downloads)
    verified: bool = False  # its sha256 matched one given (--sha256, a checksums file)


class _Download(DownloadJob):
    """One file's download: its attempts, each over one connection or handed to segments."""

    def attempt(self, url: str, credentials: Mapping[str, str]) -> None:
        """One GET; returns when ``partial`` holds the whole file, raises otherwise.
        ``credentials``: the user's headers when ``url`` is on the first URL's origin, else
        none (:func:`~gpuci.fetch._sources.home_credentials`)."""
        self.attempts += 1
        part = self.partial
        part.bind(url)
        # bytes kept (a prefix, or segments further on) continue only under their validator
        resuming = part.validator is not None and bool(part.size or part.extents)
        offset = part.size if resuming else 0
        if not resuming and (part.size or part.extents):
            part.reset()
        headers = {"Accept-Encoding": "identity"}
        if resuming:
            headers["Range"] = f"bytes={offset}-"
            headers["If-Range"] = part.validator or ""
        timeout = httpx.Timeout(max(0.001, min(self.policy.timeout, self.remaining())))
        deadline = Deadline.after(self.policy.deadline, self.started)  # headers and 1xx too
        scope = Scope()  # this attempt's connections: its segments' too, shut if it fails
        asked = time.monotonic()
        with open_response(
            self.client,
            "GET",
            url,
            headers=headers,
            credentials=credentials,
            timeout=timeout,
            deadline=deadline,
            scope=scope,
        ) as resp:
            self.first_byte_s = time.monotonic() - asked  # connect + wait: how far the server is
            self._check_status(resp, url, offset)
            if resp.status_code == 416:
                part.keep(part.written())  # every byte kept, none fetched: resumed
                return  # we already hold every byte (checked in _check_status)
            total, end = self._accept(resp, url, offset, resuming)
            wide = total is not None and segmentable(resp, total, offset, self)
            if self.partial.extents and not wide:
                self.partial.drop_extents()  # one connection rewrites them in order
                self.sync_progress()
            Segmenter(self, resp, total, wide, end, scope).run(resp)

    def _check_status(self, resp: httpx.Response, url: str, offset: int) -> None:
        check_retryable(resp, url)
        status = resp.status_code
        if status == 416 and offset:
            match = _UNSATISFIED_RANGE.match(resp.headers.get("Content-Range", ""))
            known = self.partial.total  # a segmented partial knows the size: it must agree
            if match and int(match.group(1)) == offset and known in (None, offset):
                return
            self.partial.reset()
            raise RangeMismatch(f"HTTP 416 for bytes={offset}-: the file changed size")
        if status not in (200, 206):
            raise FetchError(
                f"HTTP {status} {resp.reason_phrase}".strip(),
                hint=_hint_for_status(status),
            )

    def _accept(
        self, resp: httpx.Response, url: str, offset: int, resuming: bool
    ) -> tuple[int | None, int | None]:
        """Decide where the body goes: appended (a matching 206) or from zero (anything else).
        Returns the file's size and where this body ends: a 206's ``Content-Range`` bounds it
        (a chunked or close-delimited body has no Content-Length to check against the span,
        and its bytes past the span were never announced)."""
        part = self.partial
        check_identity(resp)
        validator = strong_validator(resp.headers)
        end: int | None  # where this body ends
        if resp.status_code == 206:
            span = answered_span(resp, offset, None, part.total)  # its bounds, as asked
            same_version = validator is not None and validator == part.validator
            if not resuming or span is None or not same_version:
                part.reset()
                raise RangeMismatch(
                    f"a 206 that does not continue at byte {offset} of the same version "
                    f"(Content-Range {excerpt(repr(resp.headers.get('Content-Range')), 80)}); "
                    "restarting"
                )
            total, end = span[2], span[1] + 1
            part.keep(part.written())
        else:
            if resuming or part.size or part.extents:
                part.reset()  # Range ignored or the file changed: a clean restart
            total = end = content_length(resp)
        if total is not None:
            self._check_room(total, part.size)
        part.adopt(validator, total)
        self.sync_progress()
        return total, end

    def _check_room(self, total: int, have: int) -> None:
        """Refuse an announced size over max-bytes or over the free space, before writing."""
        limit = self.policy.max_bytes
        if limit is not None and total > limit:
            self.partial.reset()
            raise Refused(
                f"Content-Length {total} ({human_bytes(total)}) is over max-bytes "
                f"({human_bytes(limit)}); nothing was written",
                hint="raise max-bytes if the file really is that large",
            )
        folder = self.dest.parent
        try:
            vfs = os.statvfs(folder)
        except OSError:
            return  # no answer: the write itself will tell
        free = vfs.f_bavail * vfs.f_frsize
        if total - have > free:
            self.partial.reset()
            raise Refused(
                f"{self.dest.name} needs {human_bytes(total - have)} but {folder} has "
                f"{human_bytes(free)} free; nothing was written",
                hint="free space on that disk, or set dest to a folder on a larger one",
            )

    def finish(self, url: str, sha256: str | None) -> FetchResult:
        part = self.partial
        part.close()
        digest = part.digest()
        if sha256 and digest != sha256.lower():
            size = part.size
            part.reset()  # deleted, and forgotten: a fetch from byte 0 may follow
            self.sync_progress()
            raise IntegrityError(
                f"{shown_url(url)}: sha256 mismatch for {self.dest.name}: expected "
                f"{sha256.lower()}, got {digest} ({size} bytes); the partial file was deleted",
                hint="check the expected sha256, or the source serves different bytes",
            )
        self.check_cancel()  # stopped meanwhile: the partial stays, nothing takes the final name
        part.place()
        return FetchResult(
            url=url,
            path=self.dest,
            sha256=digest,
            bytes=self.dest.stat().st_size,
            attempts=self.attempts,
            resumed_bytes=self.resumed_bytes,
            seconds=time.monotonic() - self.started,
            connections=self.peak_connections,
            verified=bool(sha256),
        )


def already_present(dest: Path, sha256: str, max_bytes: int | None) -> int | None:
    """The size of the file at ``dest`` when it already hashes to ``sha256``, else None.

    What sits there is untrusted: a link, a FIFO, a file over max-bytes (a planted sparse
    one) or one we cannot read is "not present" (the download replaces it), never hashed
    whole or an error; it is opened once (no follow, no block) and checked on that fd."""
    try:
        fd = os.open(dest, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (max_bytes is not None and st.st_size > max_bytes):
            return None
        digest = files.hash_fd(fd)[0].hexdigest()
    except OSError:
        return None
    finally:
        os.close(fd)
    return st.st_size if digest == sha256.lower() else None


def _write_failed(partial: Partial, exc: OSError) -> FetchError:
    """A write error in one line; a full disk also loses the partial that filled it."""
    if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
        return FetchError(
            f"cannot write {partial.path}: {exc.strerror or exc}",
            hint="check the destination folder exists, is writable and has space",
        )
    size = partial.size
    with contextlib.suppress(GpuciError, OSError):
        partial.discard()
    return FetchError(
        f"disk full while writing {partial.path}: {exc.strerror or exc}; deleted the partial "
        f"file ({human_bytes(size)}) so it does not keep the disk full",
        hint=f"free space on the disk holding {partial.path.parent}, or set dest to a larger "
        "disk, then rerun",
    )


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
    started: float | None = None,
) -> FetchResult:
    """Download ``url`` to ``dest``: retried, resumed, verified, renamed into place atomically.

    The building block for every gpu-ci download (``retry-fetch``, the cache's ``populate``,
    model files in examples).

    Args:
        url: an http(s) URL; credentials in it become an Authorization header for its origin.
        dest: the file to write, renamed into place only once verified.
        sha256: the hex digest the bytes must have, checked before the rename; when ``dest``
            already holds a file with it, nothing is fetched.
        policy: attempts, timeouts, the deadline and size cap; default :class:`FetchPolicy`.
        headers: request headers, sent only to ``url``'s origin (a mirror on another origin,
            or a redirect to one, gets none).
        mirrors: URLs tried in order after ``url``, each with the full ``policy.attempts``,
            all within one ``policy.deadline``.
        client: a shared httpx client, to reuse connections across files.
        progress: told of the bytes as they arrive.
        started: when ``policy.deadline`` began (``time.monotonic()``); now when None. A caller
            that fetched a checksum file first passes its own start: one deadline for both.

    Returns:
        The URL that delivered, the path, digest and size, the attempts and resumed bytes.

    Raises:
        InputError: a URL that is not http(s) or is otherwise refused.
        IntegrityError: bytes that do not hash to ``sha256`` (they are deleted); the message
            names both digests.
        FetchError: every attempt failed (exit 3); it names the last real cause and the
            attempts made, chained to the original exception.
    """
    policy = policy or FetchPolicy()
    dest = Path(dest)
    started = time.monotonic() if started is None else started
    for source in (url, *mirrors):
        check_url(source, "url")
    size = already_present(dest, sha256, policy.max_bytes) if sha256 else None
    if sha256 and size is not None:
        return FetchResult(url, dest, sha256.lower(), size, 0, 0, 0.0, True, verified=True)
    partial = _open_partial(dest, url, policy)
    own = client is None
    client = client or new_client(policy, connections=policy.connections)
    job = _Download(client, dest, policy, headers or {}, progress, partial)
    job.started = started  # the deadline's own start, shared with a checksum file fetched first
    try:
        return _walk_sources(job, (url, *mirrors), sha256, started)
    finally:
        job.partial.close()
        if own:
            client.close()


def _open_partial(dest: Path, url: str, policy: FetchPolicy) -> Partial:
    """The destination's folder and its resumable partial file; a path no folder can be made
    at (a part of it is a file, a name too long) is the dest input's error (exit 2), any other
    failure the runner's (exit 3), saying why."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        return Partial(dest, url, max_bytes=policy.max_bytes)
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ENOTDIR, errno.ENAMETOOLONG):
            reason = "a name is too long" if exc.errno == errno.ENAMETOOLONG else "a part is a file"
            raise InputError(
                f"cannot make the destination {dest}: {reason}",
                hint="name a destination below folders (no part of it a file), names under 255 B",
            ) from None
        raise FetchError(
            f"cannot prepare {dest}: {exc.strerror or exc}",
            hint="check the destination folder is writable",
        ) from exc


def _walk_sources(
    job: _Download, sources: Sequence[str], sha256: str | None, started: float
) -> FetchResult:
    """Each source in turn, each with the full attempts, all under one deadline: the first
    that finishes wins; none does: raise the last real error (leaving no unresumable bytes)."""
    errors: list[tuple[str, BaseException, int]] = []
    for source in sources:
        before = job.attempts
        credentials = home_credentials(source, sources[0], job.headers)  # a mirror elsewhere: none
        try:
            return _from_source(job, source, credentials, sha256, started)
        except IntegrityError as exc:  # a mirror may still hold the right bytes
            errors.append((source, exc, job.attempts - before))
        except (httpx.HTTPError, httpx.InvalidURL, FetchError, RetryableError) as exc:
            errors.append((source, exc, job.attempts - before))
            if job.remaining() <= 0:
                break
        except UnicodeError as exc:  # a host name the resolver's IDNA codec refuses
            errors.append((source, FetchError(f"cannot look up the host: {exc}"), 1))
        except OSError as exc:
            raise _write_failed(job.partial, exc) from exc
    if not job.partial.validator:
        job.partial.discard()  # bytes no later run could resume: leave no litter
    error = _give_up(errors, job)
    error.attempts = job.attempts  # type: ignore[attr-defined]  # counted in the outputs
    raise error


def _from_source(
    job: _Download,
    source: str,
    credentials: Mapping[str, str],
    sha256: str | None,
    started: float,
) -> FetchResult:
    """One source's attempts, then its digest check. Kept bytes that fail the sha256 (a
    crash's zeros, a same-user neighbour's partial: both pass every ownership check) were
    deleted by the check; the file is then fetched once more from byte 0, never in a loop."""
    fresh = False
    while True:
        for attempt in job.policy.retrying(started, cancel=job.cancel):
            with attempt:
                job.attempt(source, credentials)
        resumed = job.resumed_bytes  # before the check, which forgets them with the bytes
        try:
            return job.finish(source, sha256)
        except IntegrityError:
            if fresh or not resumed:
                raise
            fresh = True


def _give_up(errors: list[tuple[str, BaseException, int]], job: _Download) -> GpuciError:
    """The last real error, with its cause and the attempts made (chained as ``__cause__``)."""
    source, exc, tries = errors[-1]
    if isinstance(exc, IntegrityError):
        return exc
    if isinstance(exc, FetchError) and "deadline" in exc.message:
        error = FetchError(exc.message, exc.hint)
    else:
        cause = describe(exc)
        refused = isinstance(exc, Refused)  # not retried: "after 1 attempt" says nothing
        where = f"{shown_url(source)}: {cause}" + ("" if refused else f" after {tries} attempt(s)")
        if len(errors) > 1:
            where += f" (and {len(errors) - 1} other source(s) failed; {job.attempts} attempts)"
        hint = getattr(exc, "hint", None) if isinstance(exc, GpuciError | TooSlow) else None
        retryable = isinstance(exc, RETRYABLE)
        named = "deadline of" in cause  # the client's timeout said it already
        if not named and (job.remaining() <= 0 or (retryable and tries < job.policy.attempts)):
            where += f"; stopped by the deadline of {job.policy.deadline:g}s"
        error = FetchError(
            where,
            hint=hint or "check the URL and network; raise attempts or deadline, or add mirrors",
        )
    error.__cause__ = exc
    return error
