"""The retry policy, declared once: what is retried, how long we wait, when we give up.

Only failures that a later attempt can cure are retried: transport errors (connect, read,
``RemoteProtocolError`` when a server closes mid-body, timeouts) and the statuses 408, 429, 500,
502, 503 and 504. Every other 4xx means the request itself is wrong, so it fails at once.
A server that answers with something we refuse (a body over ``max_bytes``, a Content-Encoding
we did not ask for, a redirect we will not follow) raises :class:`Refused`: asking again gets
the same answer, so it is not retried, but a mirror may do better.
Waits are full-jitter exponential backoff capped by ``max_wait``; a ``Retry-After`` (seconds or
HTTP date, read by :func:`gpuci.retry.parse_retry_after`) replaces the backoff but is capped
too, so a server cannot park a GPU job for an hour. The policy itself is :mod:`gpuci.retry`'s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from gpuci.errors import FetchError
from gpuci.retry import RetryPolicy, parse_retry_after

if TYPE_CHECKING:
    import threading

    import tenacity

__all__ = [
    "DEFAULT_MAX_BYTES",
    "RETRYABLE",
    "FetchPolicy",
    "RangeMismatch",
    "Refused",
    "RetryableError",
    "RetryableStatus",
    "ShortBody",
    "TooSlow",
]

# Large enough for any single file on the Hugging Face Hub (it caps files at 50 GB) and for
# every model shard we know of; small enough that an endless or lying body stops long before
# it fills a GPU runner's disk. A larger file needs ``max-bytes`` set on purpose.
DEFAULT_MAX_BYTES = 64 << 30

# Segmented downloads (gpuci.fetch._segments): at most this many ranged connections per file
# (about 6 MiB of buffers each), none for a range under 8 MiB (a 30 ms first byte would cost
# more than the range takes at 100 MB/s).
DEFAULT_CONNECTIONS = 16
DEFAULT_SEGMENT_BYTES = 8 << 20
# The slowest body accepted after the first ``timeout`` (bytes a second): the S3 store's rule
# (gpuci.ranged._pace), so a server trickling a byte inside each read's timeout is cut.
DEFAULT_MIN_RATE = 256 << 10

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})

# LocalProtocolError and UnsupportedProtocol are our own mistakes: retrying cannot help.
RETRY_TRANSPORT: tuple[type[BaseException], ...] = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
    httpx.ProxyError,
)


class RetryableError(Exception):
    """A failure a later attempt may cure; ``retry_after`` is the server's wish, in seconds."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


#: Everything a later attempt may cure: transport failures and our own retryable errors.
RETRYABLE: tuple[type[BaseException], ...] = (*RETRY_TRANSPORT, RetryableError)


class Refused(FetchError):
    """The source answered with something we will not take; not retried, mirrors still are."""

    title = "gpu-ci: download refused"


class RetryableStatus(RetryableError):
    def __init__(self, status: int, url: str, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status}", retry_after)
        self.url = url
        self.status = status


def check_retryable(resp: httpx.Response, url: str) -> None:
    """Raise :class:`RetryableStatus` (with the server's ``Retry-After``) for a status a later
    attempt may cure; every request of retry-fetch checks its answer with this first."""
    if resp.status_code in RETRY_STATUSES:
        after = parse_retry_after(resp.headers.get("Retry-After"))
        raise RetryableStatus(resp.status_code, url, after)


class ShortBody(RetryableError):
    """The connection ended cleanly but with fewer bytes than announced."""


class TooSlow(RetryableError):
    """A body under the policy's ``min_rate`` after its first ``timeout`` (a trickle each read's
    timeout lets through); ``hint`` says which setting changes the rate."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


class RangeMismatch(RetryableError):
    """A 206 for other bytes than we asked for, or a validator that changed: start over."""


@dataclass(frozen=True)
class FetchPolicy:
    """How hard to try. Times are seconds; ``deadline`` bounds the whole download, waits included.

    ``timeout`` bounds each connect and each read (a stalled server), not a whole attempt: a
    10 GB file may legitimately take longer than any sensible per-request timeout.
    ``max_bytes`` bounds one file's size on disk (None: no bound); see DEFAULT_MAX_BYTES.
    ``connections`` caps the ranged connections one file may use at once (1: never segment);
    the count starts at ``connections_start`` (0: chosen from the size, as aria2c does; see
    :func:`gpuci.fetch._widths.wide_start`) and grows while throughput does;
    ``segment_bytes`` is the smallest range worth its own connection, so a file under twice
    that size always uses one. ``min_rate`` is the slowest body accepted (bytes a second,
    counted on what arrived) once its first ``timeout`` has passed; 0 turns the check off.
    """

    attempts: int = 5
    timeout: float = 60.0
    deadline: float = 1800.0
    max_wait: float = 60.0
    initial_wait: float = 1.0
    max_bytes: int | None = DEFAULT_MAX_BYTES
    connections: int = DEFAULT_CONNECTIONS
    connections_start: int = 0
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    min_rate: float = DEFAULT_MIN_RATE

    @property
    def retry(self) -> RetryPolicy:
        """The policy as :mod:`gpuci.retry` data: full jitter from ``initial_wait``, every wait
        (a server's ``Retry-After`` included) capped by ``max_wait``."""
        return RetryPolicy(
            attempts=self.attempts,
            initial=self.initial_wait,
            max_wait=self.max_wait,
            jitter="full",
            retry_after_cap=self.max_wait,
        )

    def retrying(
        self, started: float | None = None, cancel: threading.Event | None = None
    ) -> tenacity.Retrying:
        """A fresh tenacity controller; ``started`` shares one deadline across mirrors, and
        ``cancel`` (the client's abort: :func:`gpuci.httpclients.stopped`) ends its waits."""
        remaining = self.deadline - (time.monotonic() - started if started is not None else 0.0)
        return self.retry.retrying(RETRYABLE, deadline=remaining, cancel=cancel)
