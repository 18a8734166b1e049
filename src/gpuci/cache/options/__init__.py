"""The typed inputs of ``cache-weights restore`` and ``save``: one frozen dataclass each.

The store's upkeep sub-commands (prune, ls, pin, unpin) have theirs in
:mod:`gpuci.cache._upkeep.options`, and :class:`SaveInputs` is built on first use (``_save.py``),
so a restore, whose start-up is the whole cost of a warm hit, does not build classes it never
uses (a dataclass's methods are compiled anew in every process: docs/benchmarks.md, "Figures
behind the code").

Each field declares one input (:func:`gpuci.inputs.inp`): the CLI flags, ``INPUT_*``, the
actions and the docs tables are read from these classes; the Python API
(:mod:`gpuci.cache.api`) builds them directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from gpuci.cache.options._specs import (
    ENDPOINT_URL,
    HF_REPO,
    HF_REVISION,
    LAYOUT,
    LOCAL_CACHE,
    LOCAL_CACHE_MODE,
    LOCAL_CACHE_SIZE,
    PATH,
    REGION,
    STORE,
)
from gpuci.inputs import inp, options

if TYPE_CHECKING:
    from gpuci.cache.options._save import SaveInputs

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


@options
class RestoreInputs:
    """What ``cache-weights restore`` is given."""

    key: str = inp("The exact cache key, e.g. weights-llama-3-8b-v1 (optional with manifest).")
    manifest: str = inp(
        "sha256 of a manifest (as in provenance.json): that exact tree, whatever the keys "
        "name now. Verified like any restore; key and restore-keys then unused."
    )
    path: list[str] = PATH
    restore_keys: list[str] = inp(
        "Key prefixes to fall back to, one per line, tried in order; the newest match of the "
        "first prefix that matches wins.",
        kind="lines",
    )
    store: str = STORE
    endpoint_url: str = ENDPOINT_URL
    region: str = REGION
    fail_on_miss: bool = inp("Fail the step when no key matches.", default="false")
    lookup_only: bool = inp(
        "Only check whether the key would hit; download nothing.", default="false"
    )
    local_cache: str = LOCAL_CACHE
    local_cache_size: str = LOCAL_CACHE_SIZE
    local_cache_mode: str = LOCAL_CACHE_MODE
    include: list[str] = inp(
        "Restore only files matching these globs, one per line (*.safetensors, config.json; a"
        " glob with / matches the whole path).",
        kind="lines",
    )
    exclude: list[str] = inp("Skip files matching these globs, one per line.", kind="lines")
    layout: str = LAYOUT
    hf_repo: str = HF_REPO
    hf_revision: str = HF_REVISION
    populate: str = inp(
        "Shell command run when the exact key misses (e.g. huggingface-cli download ...); the"
        " paths are then saved under key at once. Its text is never echoed."
    )

    def save_inputs(self, paths: list[str]) -> SaveInputs:
        """The save a populate-on-miss runs: this restore's key, store and tier, these paths
        and the plain layout (the paths are already the hf folder when the layout is hf)."""
        from gpuci.cache.options._save import SaveInputs

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


def __getattr__(name: str) -> Any:
    """``SaveInputs``, its module imported (and the class built) on first use."""
    if name == "SaveInputs":
        from gpuci.cache.options._save import SaveInputs

        return SaveInputs
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
