"""What the cache sub-commands share: opening the store from inputs, outputs and the summary."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuci.cache import _layout as layout
from gpuci.cache._stores import open_store
from gpuci.cache._stores.base import Store, redact_url
from gpuci.cache.options import StoreFields
from gpuci.errors import NoCredentials
from gpuci.runtime import Result, Runtime, markdown_table
from gpuci.units import human_bytes

if TYPE_CHECKING:  # the controller (and threading) load only for a transfer
    from gpuci.adaptive import Concurrency
    from gpuci.cache._stores.tier_policy import TierChoice

__all__ = [
    "Connections",
    "no_credentials",
    "outputs",
    "plan_store",
    "store_from",
    "store_url",
    "summary_table",
    "throttle_signals",
    "tier_line",
]

CREDENTIAL_SOURCES = (
    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from secrets, an AWS profile, or "
    "aws-actions/configure-aws-credentials"
)


def no_credentials(command: str, url: str, skipped: str, access: str, **report: Any) -> Result:
    """A dry run with no AWS credentials here (the store is not asked, not failed): the
    headline says what was ``skipped``, it and the report what ``access`` a real run needs."""
    result = Result(command=command)
    result.headline = (
        f"would need credentials: {skipped}; a real run needs {access} access to the bucket "
        f"({CREDENTIAL_SOURCES})"
    )
    result.report = {
        **report,
        "store": url,
        "dry_run": True,
        "lookup": "skipped",
        "reason": "no AWS credentials on this machine",
        "needs": f"{access} access to the bucket: {CREDENTIAL_SOURCES}",
    }
    return result


def store_from(where: StoreFields, rt: Runtime) -> Store:
    """The store ``where`` names (its ``store``, ``endpoint_url`` and ``region``).

    Raises InputError for a URL gpu-ci cannot use and StoreError when it cannot be opened.
    """
    return open_store(
        where.store or None,
        endpoint_url=where.endpoint_url or None,
        region=where.region or None,
        environ=rt.environ,
        mask=rt.mask,
    )


def store_url(where: StoreFields, rt: Runtime) -> str:
    """The store's URL as given (or the default), fit to print."""
    text = where.store.strip() or layout.default_store_url(rt.environ)
    return redact_url(text)


def plan_store(where: StoreFields, rt: Runtime) -> Store | None:
    """The store, or None for a dry run on s3:// from a machine with no AWS credentials.

    A laptop plans without a cloud account: its plan skips the lookup and says what a real
    run needs, where a real run without credentials still fails (exit 3, StoreError; a bad
    URL is an InputError).
    """
    try:
        return store_from(where, rt)
    except NoCredentials:
        if rt.dry_run:
            return None
        raise


def outputs(
    *,
    hit: bool,
    matched: str,
    manifest: str,
    down: int,
    up: int,
    files: int,
    seconds: float,
    local: int = 0,
    populated: bool | None = None,
    connections: Connections | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "cache-hit": hit,
        "matched-key": matched,
        "manifest": manifest,
        "bytes-downloaded": down,
        "bytes-from-local": local,
        "bytes-uploaded": up,
        "files": files,
        "seconds": round(seconds, 3),
        "connections": connections.used if connections else 0,
    }
    if populated is not None:
        out["populated"] = populated
    return out


def summary_table(
    key: str,
    outcome: str,
    files: int,
    size: int,
    moved: int,
    seconds: float,
    connections: Connections | None = None,
) -> str:
    rate = moved / seconds / 1e6 if seconds > 0 and moved else 0.0
    return markdown_table(
        ["key", "result", "files", "bytes", "moved", "seconds", "MB/s", "connections"],
        [
            [
                key,
                outcome,
                files,
                human_bytes(size),
                human_bytes(moved),
                f"{seconds:.2f}",
                f"{rate:.1f}",
                connections.text() if connections else "-",
            ]
        ],
    )


def tier_line(choice: TierChoice) -> str:
    """The summary's line on the runner-local tier: on or off, and why (``local-cache``)."""
    return f"Runner-local cache (`local-cache`): {choice.text}"


@dataclass(frozen=True)
class Connections:
    """How many connections a transfer settled on, the most it tried, and why it stopped."""

    used: int
    peak: int
    fixed: bool = False  # GPUCI_CACHE_WORKERS chose the count
    throttles: int = 0  # refusals and failures the controller backed off from

    @classmethod
    def of(cls, control: Concurrency) -> Connections:
        return cls(control.limit, control.peak, control.user_chosen, control.throttles)

    def text(self) -> str:
        """``16 (peak 32)``, plus what bounded it: a fixed count or back-offs."""
        notes = [f"peak {self.peak}"] if self.peak != self.used else []
        if self.fixed:
            notes.append("fixed by GPUCI_CACHE_WORKERS")
        if self.throttles:
            notes.append(f"backed off {self.throttles}x")
        return f"{self.used} ({', '.join(notes)})" if notes else str(self.used)

    def report(self) -> dict[str, Any]:
        return {
            "used": self.used,
            "peak": self.peak,
            "fixed": self.fixed,
            "throttles": self.throttles,
        }


@contextlib.contextmanager
def throttle_signals(store: Store, control: Concurrency) -> Iterator[None]:
    """While a transfer runs, the store's refusals (503 SlowDown, 429) reach its controller."""
    previous = store.on_throttle
    store.on_throttle = control.throttled
    try:
        yield
    finally:
        store.on_throttle = previous
