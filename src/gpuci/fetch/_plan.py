"""Dry run: say what each URL's fetch would do, write nothing.

By default the plan uses no network (:func:`offline`): what would be fetched from where, into
which partial file, verified against which digest, from the inputs and the files on disk.
With ``--probe`` (:mod:`gpuci.runtime`), a HEAD per URL (falling back to a one-byte ranged GET
when HEAD is refused) tells us the size, whether the server resumes (``Accept-Ranges`` or a
206), and whether earlier partial bytes on disk would be kept. The probe goes through the same
client as a real run (credentials stay on their origin, no encoding accepted) and never reads
a body, so a server that ignores the range cannot make it read an endless one.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from gpuci.errors import GpuciError
from gpuci.fetch._client import IDENTITY, check_identity, content_length, open_response
from gpuci.fetch._download import already_present, describe, parse_content_range, strong_validator
from gpuci.fetch._partial import inspect
from gpuci.fetch._policy import FetchPolicy
from gpuci.fetch._sources import Job
from gpuci.files import incomplete_path
from gpuci.httpclients import Deadline


@dataclass(frozen=True)
class Probe:
    job: Job
    status: int | None
    size: int | None
    resumable: bool
    action: str  # what a real run would do, in words
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _already_verified(job: Job, policy: FetchPolicy) -> Probe | None:
    """A dest that already hashes to the digest given: a real run skips it, as this says."""
    size = already_present(job.dest, job.sha256, policy.max_bytes) if job.sha256 else None
    return None if size is None else Probe(job, None, size, False, "skip: already verified")


def offline(job: Job, policy: FetchPolicy) -> Probe:
    """What a real run would do, from the inputs and this disk alone: no request is sent."""
    present = _already_verified(job, policy)
    if present is not None:
        return present
    partial = incomplete_path(job.dest)
    found = inspect(job.dest, job.url, policy.max_bytes)
    start = f"resume from byte {found.size} of {partial}" if found else f"write {partial}"
    mirrors = f" (then {len(job.mirrors)} mirror(s))" if job.mirrors else ""
    if job.sha256:
        verify = f"verify sha256 {job.sha256[:16]}…"
    elif job.sha256_url:
        verify = f"verify against the digest in {job.sha256_url}"
    else:
        verify = "no digest given: not verified"
    action = f"fetch{mirrors}, {start}, {verify}, rename -> {job.dest}"
    if job.dest.exists():
        action += " (replacing the existing file)"
    return Probe(job, None, None, False, action)


def probe(client: httpx.Client, job: Job, headers: dict[str, str], policy: FetchPolicy) -> Probe:
    """HEAD the URL (or a ``bytes=0-0`` GET) and say what a real run would write."""
    present = _already_verified(job, policy)
    if present is not None:
        return present
    deadline = Deadline.after(policy.deadline)  # both asks, as a real run's whole download
    try:
        resp = _ask(client, "HEAD", job.url, headers, policy, deadline)
        if resp.status_code != 200 or content_length(resp) is None:  # refused, or signed for GET
            resp = _ask(client, "GET", job.url, headers, policy, deadline)
        check_identity(resp)
    except httpx.HTTPError as exc:
        return Probe(job, None, None, False, "fail", describe(exc))
    except GpuciError as exc:
        return Probe(job, None, None, False, "fail", exc.one_line())
    status = resp.status_code
    if status not in (200, 206):
        return Probe(job, status, None, False, "fail", f"HTTP {status} {resp.reason_phrase}")
    span = parse_content_range(resp.headers.get("Content-Range"))
    size = span[2] if status == 206 and span else content_length(resp)
    resumable = status == 206 or resp.headers.get("Accept-Ranges", "").lower() == "bytes"
    resumable = resumable and strong_validator(resp.headers) is not None
    partial = incomplete_path(job.dest)
    found = inspect(job.dest, job.url, policy.max_bytes)
    if size is not None and policy.max_bytes is not None and size > policy.max_bytes:
        error = f"Content-Length {size} is over max-bytes ({policy.max_bytes})"
        return Probe(job, status, size, resumable, "fail", error)
    if found is not None and resumable and found.extents:
        ranges = len(found.extents)
        action = f"keep {found.size} bytes in {ranges} range(s), fetch the rest into {partial}"
    elif found is not None and resumable:
        action = f"resume from byte {found.size} into {partial}"
    else:
        action = f"write {partial}, verify, rename"
    action += f" -> {job.dest}"
    if job.dest.exists():
        action += " (replacing the existing file)"
    return Probe(job, status, size, resumable, action)


def _ask(
    client: httpx.Client,
    method: str,
    url: str,
    headers: dict[str, str],
    policy: FetchPolicy,
    deadline: Deadline,
) -> httpx.Response:
    """The answer's status and headers, by ``deadline`` (a server trickling its headers would
    pass every read's timeout); the body (if any) is never read."""
    ours = IDENTITY if method == "HEAD" else {**IDENTITY, "Range": "bytes=0-0"}
    with open_response(
        client,
        method,
        url,
        headers=ours,
        credentials=headers,
        timeout=policy.timeout,
        deadline=deadline,
    ) as resp:
        return resp
