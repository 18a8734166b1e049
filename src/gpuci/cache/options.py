"""The typed inputs of ``cache-weights restore`` and ``save``: one frozen dataclass each.

The store's upkeep sub-commands (prune, ls, pin, unpin) have theirs in
:mod:`gpuci.cache.upkeep_options`, so a restore, whose start-up is the whole cost of a warm hit,
does not build four classes it never uses.

Field names are the inputs' names in snake_case and their types follow the specs in
:mod:`gpuci.commands.cache_weights` (``tests/test_typed.py`` checks they stay in step). The CLI,
``INPUT_*`` and the dry run resolve the specs, then :func:`gpuci.typed.typed` builds
one of these; the Python API (:mod:`gpuci.api`) builds them directly. Defaults match the specs'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "RestoreInputs",
    "SaveInputs",
    "StoreFields",
]


class StoreFields(Protocol):
    """Where the store is: the ``store``, ``endpoint-url`` and ``region`` inputs."""

    @property
    def store(self) -> str: ...
    @property
    def endpoint_url(self) -> str: ...
    @property
    def region(self) -> str: ...


@dataclass(frozen=True)
class SaveInputs:
    """What ``cache-weights save`` is given."""

    key: str = ""
    path: list[str] = field(default_factory=list)
    store: str = ""
    endpoint_url: str = ""
    region: str = ""
    local_cache: str = ""
    local_cache_size: str = "100GiB"
    local_cache_mode: str = "copy"
    layout: str = "plain"
    hf_repo: str = ""
    hf_revision: str = ""


@dataclass(frozen=True)
class RestoreInputs:
    """What ``cache-weights restore`` is given."""

    key: str = ""
    manifest: str = ""
    path: list[str] = field(default_factory=list)
    restore_keys: list[str] = field(default_factory=list)
    store: str = ""
    endpoint_url: str = ""
    region: str = ""
    fail_on_miss: bool = False
    lookup_only: bool = False
    local_cache: str = ""
    local_cache_size: str = "100GiB"
    local_cache_mode: str = "copy"
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    layout: str = "plain"
    hf_repo: str = ""
    hf_revision: str = ""
    populate: str = ""

    def save_inputs(self, paths: list[str]) -> SaveInputs:
        """The save a populate-on-miss runs: this restore's key, store and tier, these paths
        and the plain layout (the paths are already the hf folder when the layout is hf)."""
        return SaveInputs(
            key=self.key,
            path=list(paths),
            store=self.store,
            endpoint_url=self.endpoint_url,
            region=self.region,
            local_cache=self.local_cache,
            local_cache_size=self.local_cache_size,
            local_cache_mode=self.local_cache_mode,
            layout="",
            hf_repo=self.hf_repo,
            hf_revision=self.hf_revision,
        )
