"""The typed inputs of the store's upkeep sub-commands (``cache-weights prune``, ``ls``,
``pin``, ``unpin``): one frozen dataclass each, as :mod:`gpuci.cache.options` has for restore
and save, whose store inputs they share."""

from __future__ import annotations

from gpuci.cache.options import ENDPOINT_URL, REGION, STORE
from gpuci.inputs import inp, options

__all__ = ["LsInputs", "PinInputs", "PruneInputs", "UnpinInputs"]


@options
class PruneInputs:
    """What ``cache-weights prune`` is given (durations in seconds)."""

    older_than: float = inp(
        "Delete keys neither saved nor restored for this long (e.g. 14d).",
        kind="duration",
        required=True,
    )
    keep: int = inp(
        "Always keep the N newest keys of each prefix (key up to its last -).",
        default="0",
        minimum=0,
    )
    prefix: str = inp("Only consider keys starting with this prefix.")
    grace: float = inp(
        "Unnamed manifests and blobs younger than this stay (a save may be running).",
        kind="duration",
        default="6h",
    )
    store: str = STORE
    endpoint_url: str = ENDPOINT_URL
    region: str = REGION


@options
class LsInputs:
    """What ``cache-weights ls`` is given."""

    prefix: str = inp("Only keys starting with this prefix.")
    pins: bool = inp("List the pinned manifests and their reasons instead.", default="false")
    store: str = STORE
    endpoint_url: str = ENDPOINT_URL
    region: str = REGION


@options
class PinInputs:
    """What ``cache-weights pin`` is given."""

    manifest: str = inp("sha256 of the manifest to keep (as in provenance.json).", required=True)
    reason: str = inp("Why it is kept (shown by ls --pins), e.g. 'model v3 data'.", required=True)
    store: str = STORE
    endpoint_url: str = ENDPOINT_URL
    region: str = REGION


@options
class UnpinInputs:
    """What ``cache-weights unpin`` is given."""

    manifest: str = inp("sha256 of the pinned manifest.", required=True)
    store: str = STORE
    endpoint_url: str = ENDPOINT_URL
    region: str = REGION
