"""When a download is cut into segments, and how many connections its first round opens.

When: only if the first response proves the server can do it safely: a strong validator
(:func:`gpuci.fetch._validators.segment_validator`: an ``ETag`` never ``W/``, or with no ETag a
``Last-Modified`` at least one second older than the response's ``Date``),
``Accept-Ranges: bytes`` (or the response is already a 206), a known size of at least two
segments, and ``connections`` above 1. Every segment request carries ``If-Range`` with that
validator and goes to the URL the first request was redirected to; the user's credentials go
with it only when the first request still carried them there (the origin rule of
:mod:`gpuci.fetch._client`).

How wide: :func:`wide_start`; the segments themselves run in :mod:`gpuci.fetch._segments`.
"""

from __future__ import annotations

import httpx

from gpuci.fetch._job import DownloadJob
from gpuci.fetch._policy import FetchPolicy
from gpuci.fetch._validators import segment_validator

__all__ = ["FAR_S", "segmentable", "wide_start"]

_WIDE = 8  # most connections the first round opens (aria2c -x8 -s8's count)
# A first answer this slow (connect included) comes from a hub, a CDN or another region: one
# from this machine or its cluster answers in a few ms, even on a loaded machine, one over the
# internet in tens (figures: docs/benchmarks.md, "What changed, and how to read it").
FAR_S = 0.025


def wide_start(left: int, policy: FetchPolicy, first_byte_s: float | None = None) -> int:
    """How many connections the first round opens for ``left`` bytes.

    A far server (its first answer took ``FAR_S`` or more: a hub, a CDN, a bucket in another
    region; a guess from one sample, so a loaded machine can misjudge a near one) gets one
    connection per two segments' worth (aria2c splits at 20 MiB by default; ours are 8 MiB),
    at least 2, at most ``_WIDE`` and the ceiling: there each connection is capped and each
    request waits for its first byte, so a ramp from one costs seconds. A near
    one (a store in the same cluster, loopback) starts with one: there the CPU is the limit,
    and measured on loopback, 8 connections at once cost more CPU per byte than one
    (threads, and pieces read back for the in-order hash) for no speed (docs/benchmarks.md,
    "What changed, and how to read it"); the controller still
    adds connections there when they pay. ``connections_start`` set in the policy wins."""
    if policy.connections_start:
        return max(1, min(policy.connections_start, policy.connections))
    if first_byte_s is not None and first_byte_s < FAR_S:
        return 1
    return max(1, min(policy.connections, _WIDE, max(2, left // (2 * policy.segment_bytes))))


def segmentable(resp: httpx.Response, total: int | None, offset: int, job: DownloadJob) -> bool:
    """Whether this first response allows more connections (see the module docstring)."""
    policy = job.policy
    if policy.connections < 2 or job.one_connection or total is None:
        return False
    if total - offset < 2 * policy.segment_bytes:
        return False
    validator = segment_validator(resp.headers)
    if validator is None or validator != job.partial.validator:
        return False
    ranges = resp.headers.get("Accept-Ranges", "").strip().lower()
    return resp.status_code == 206 or ranges == "bytes"
