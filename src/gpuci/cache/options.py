"""The typed inputs of ``cache-weights restore`` and ``save``: one frozen dataclass each.

The store's upkeep sub-commands (prune, ls, pin, unpin) have theirs in
:mod:`gpuci.cache._upkeep.options`, so a restore, whose start-up is the whole cost of a warm hit,
does not build four classes it never uses.

Each field declares one input (:func:`gpuci.inputs.inp`): the CLI flags, ``INPUT_*``, the
actions and the docs tables are read from these classes; the Python API
(:mod:`gpuci.cache.api`) builds them directly.
"""

from __future__ import annotations

from typing import Protocol

from gpuci.inputs import inp, options

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


ENDPOINT_URL = inp("S3-compatible endpoint (MinIO, R2, Ceph...); default: AWS.")
_HF_REPO = inp("With layout hf: the repo, org/name or datasets/org/name.")
_HF_REVISION = inp("With layout hf: only this revision (a branch such as main, or a commit).")
_LAYOUT = inp(
    "plain: the paths as they are; hf: one Hugging Face repo in HF_HUB_CACHE form (blobs, "
    "snapshots, refs), usable with HF_HUB_OFFLINE=1.",
    default="plain",
    choices=("plain", "hf"),
)
_LOCAL_CACHE = inp(
    "Runner-local blob folder consulted before the store and filled by restores and saves: a "
    "folder, on, off or auto (default auto: off on runners thrown away after the job - "
    "GitHub-hosted, GitLab.com hosted, gpu-ci RunPod runner pods; else "
    "RUNNER_TOOL_CACHE/gpuci/local or ~/.cache/gpuci/local)."
)
_LOCAL_CACHE_MODE = inp(
    "How restored files relate to the local cache: copy (an independent file: a reflink where"
    " the filesystem can, else a copy; the default), verify (the same, hashing every file "
    "placed), link (hardlink files, read-only: trusts every job on the runner; only for a "
    "single-tenant runner). Saves always copy into the local cache, hashing what they copy. "
    "See docs/security.md.",
    default="copy",
    choices=("copy", "verify", "link"),
)
_LOCAL_CACHE_SIZE = inp(
    "Largest size of the local cache; least recently used files go first (0: no limit).",
    default="100GiB",
)
_PATH = inp(
    "Folders or files to cache, one per line (with layout hf: the hub cache folder, default "
    "HF_HUB_CACHE).",
    kind="lines",
)
REGION = inp("S3 region (default: from the AWS configuration).")
STORE = inp(
    "Where the cache lives: s3://bucket/prefix or file:///dir (default: the embedded local "
    "store under RUNNER_TOOL_CACHE or ~/.cache/gpuci/store)."
)


@options
class SaveInputs:
    """What ``cache-weights save`` is given."""

    key: str = inp("The exact cache key, e.g. weights-llama-3-8b-v1.", required=True)
    path: list[str] = _PATH
    store: str = STORE
    endpoint_url: str = ENDPOINT_URL
    region: str = REGION
    local_cache: str = _LOCAL_CACHE
    local_cache_size: str = _LOCAL_CACHE_SIZE
    local_cache_mode: str = _LOCAL_CACHE_MODE
    layout: str = _LAYOUT
    hf_repo: str = _HF_REPO
    hf_revision: str = _HF_REVISION
    follow_symlinks: str = inp(
        "Symlinks in the saved paths that point out of them: inside (default: skipped, with one "
        "warning; a link that stays inside is kept as a link) or all (the file behind each is "
        "saved as a file, each named in a warning). A link planted in a folder kept between "
        "jobs could otherwise make a trusted save upload a secret it points at.",
        default="inside",
        choices=("inside", "all"),
    )


@options
class RestoreInputs:
    """What ``cache-weights restore`` is given."""

    key: str = inp("The exact cache key, e.g. weights-llama-3-8b-v1 (optional with manifest).")
    manifest: str = inp(
        "sha256 of a manifest (as in provenance.json): that exact tree, whatever the keys "
        "name now. Verified like any restore; key and restore-keys then unused."
    )
    path: list[str] = _PATH
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
    local_cache: str = _LOCAL_CACHE
    local_cache_size: str = _LOCAL_CACHE_SIZE
    local_cache_mode: str = _LOCAL_CACHE_MODE
    include: list[str] = inp(
        "Restore only files matching these globs, one per line (*.safetensors, config.json; a"
        " glob with / matches the whole path).",
        kind="lines",
    )
    exclude: list[str] = inp("Skip files matching these globs, one per line.", kind="lines")
    layout: str = _LAYOUT
    hf_repo: str = _HF_REPO
    hf_revision: str = _HF_REVISION
    populate: str = inp(
        "Shell command run when the exact key misses (e.g. huggingface-cli download ...); the"
        " paths are then saved under key at once. Its text is never echoed."
    )

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
