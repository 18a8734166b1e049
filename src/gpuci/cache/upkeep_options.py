"""The typed inputs of the store's upkeep sub-commands (``cache-weights prune``, ``ls``,
``pin``, ``unpin``): one frozen dataclass each, as :mod:`gpuci.cache.options` has for restore
and save (kept apart so a restore does not build these at start-up)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuci.cache.layout import PRUNE_GRACE

__all__ = ["LsInputs", "PinInputs", "PruneInputs", "UnpinInputs"]


@dataclass(frozen=True)
class PruneInputs:
    """What ``cache-weights prune`` is given (durations in seconds)."""

    older_than: float = 0.0
    keep: int = 0
    prefix: str = ""
    grace: float = float(PRUNE_GRACE)
    store: str = ""
    endpoint_url: str = ""
    region: str = ""


@dataclass(frozen=True)
class LsInputs:
    """What ``cache-weights ls`` is given."""

    prefix: str = ""
    pins: bool = False
    store: str = ""
    endpoint_url: str = ""
    region: str = ""


@dataclass(frozen=True)
class PinInputs:
    """What ``cache-weights pin`` is given."""

    manifest: str = ""
    reason: str = ""
    store: str = ""
    endpoint_url: str = ""
    region: str = ""


@dataclass(frozen=True)
class UnpinInputs:
    """What ``cache-weights unpin`` is given."""

    manifest: str = ""
    store: str = ""
    endpoint_url: str = ""
    region: str = ""
