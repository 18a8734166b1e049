"""The inputs ``cache-weights restore`` and ``save`` (and the upkeep sub-commands) share: where
the store is, the local tier, the paths and the layout, each declared once (:func:`inp`)."""

from __future__ import annotations

from gpuci.inputs import inp

ENDPOINT_URL = inp("S3-compatible endpoint (MinIO, R2, Ceph...); default: AWS.")
HF_REPO = inp("With layout hf: the repo, org/name or datasets/org/name.")
HF_REVISION = inp("With layout hf: only this revision (a branch such as main, or a commit).")
LAYOUT = inp(
    "plain: the paths as they are; hf: one Hugging Face repo in HF_HUB_CACHE form (blobs, "
    "snapshots, refs), usable with HF_HUB_OFFLINE=1.",
    default="plain",
    choices=("plain", "hf"),
)
LOCAL_CACHE = inp(
    "Runner-local blob folder consulted before the store and filled by restores and saves: a "
    "folder, on, off or auto (default auto: off on runners thrown away after the job - "
    "GitHub-hosted, GitLab.com hosted, gpu-ci RunPod runner pods; else "
    "RUNNER_TOOL_CACHE/gpuci/local or ~/.cache/gpuci/local)."
)
LOCAL_CACHE_MODE = inp(
    "How restored files relate to the local cache: copy (an independent file: a reflink where"
    " the filesystem can, else a copy; the default), verify (the same, hashing every file "
    "placed), link (hardlink files, read-only: trusts every job on the runner; only for a "
    "single-tenant runner). Saves always copy into the local cache, hashing what they copy. "
    "See docs/security.md.",
    default="copy",
    choices=("copy", "verify", "link"),
)
LOCAL_CACHE_SIZE = inp(
    "Largest size of the local cache; least recently used files go first (0: no limit).",
    default="100GiB",
)
PATH = inp(
    "Folders or files to cache, one per line (with layout hf: the hub cache folder, default "
    "HF_HUB_CACHE).",
    kind="lines",
)
REGION = inp("S3 region (default: from the AWS configuration).")
STORE = inp(
    "Where the cache lives: s3://bucket/prefix or file:///dir (default: the embedded local "
    "store under RUNNER_TOOL_CACHE or ~/.cache/gpuci/store)."
)
