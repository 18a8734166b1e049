"""The typed inputs of ``cache-weights save``, built only when a save (or a restore's populate)
needs them: a restore, whose start-up is the whole cost of a warm hit, never builds them."""

from __future__ import annotations

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

__all__ = ["SaveInputs"]


@options
class SaveInputs:
    """What ``cache-weights save`` is given."""

    key: str = inp("The exact cache key, e.g. weights-llama-3-8b-v1.", required=True)
    path: list[str] = PATH
    store: str = STORE
    endpoint_url: str = ENDPOINT_URL
    region: str = REGION
    local_cache: str = LOCAL_CACHE
    local_cache_size: str = LOCAL_CACHE_SIZE
    local_cache_mode: str = LOCAL_CACHE_MODE
    layout: str = LAYOUT
    hf_repo: str = HF_REPO
    hf_revision: str = HF_REVISION
    follow_symlinks: str = inp(
        "Symlinks in the saved paths that point out of them: inside (default: skipped, with one "
        "warning; a link that stays inside is kept as a link) or all (the file behind each is "
        "saved as a file, each named in a warning). A link planted in a folder kept between "
        "jobs could otherwise make a trusted save upload a secret it points at.",
        default="inside",
        choices=("inside", "all"),
    )
