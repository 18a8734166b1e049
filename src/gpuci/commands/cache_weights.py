"""``cache-weights``: a content-addressed, S3-backed cache for datasets and model weights."""

from gpuci.commands import Command, Output
from gpuci.inputs import Input

STORE_INPUTS = (
    Input(
        "store",
        "Where the cache lives: s3://bucket/prefix or file:///dir (default: the "
        "embedded local store under RUNNER_TOOL_CACHE or ~/.cache/gpuci/store).",
        "str",
    ),
    Input("endpoint-url", "S3-compatible endpoint (MinIO, R2, Ceph...); default: AWS.", "str"),
    Input("region", "S3 region (default: from the AWS configuration).", "str"),
)

KEY = Input("key", "The exact cache key, e.g. weights-llama-3-8b-v1.", "str", required=True)
PATH = Input(
    "path",
    "Folders or files to cache, one per line (with layout hf: the hub cache folder, "
    "default HF_HUB_CACHE).",
    "lines",
)
TIER_INPUTS = (
    Input(
        "local-cache",
        "Runner-local blob folder consulted before the store and filled by restores and saves: "
        "a folder, on, off or auto (default auto: off on runners thrown away after the job - "
        "GitHub-hosted, GitLab.com hosted, gpu-ci RunPod runner pods; else "
        "RUNNER_TOOL_CACHE/gpuci/local or ~/.cache/gpuci/local).",
        "str",
    ),
    Input(
        "local-cache-size",
        "Largest size of the local cache; least recently used files go first (0: no limit).",
        "str",
        "100GiB",
    ),
    Input(
        "local-cache-mode",
        "How restored files relate to the local cache: copy (an independent file: a reflink "
        "where the filesystem can, else a copy; the default), verify (the same, hashing every "
        "file placed), link (hardlink files, read-only: trusts every job on the runner; only for "
        "a single-tenant runner). Saves always copy into the local cache, hashing what they "
        "copy. See docs/security.md.",
        "str",
        "copy",
        choices=("copy", "verify", "link"),
    ),
)
HF_INPUTS = (
    Input(
        "layout",
        "plain: the paths as they are; hf: one Hugging Face repo in HF_HUB_CACHE form "
        "(blobs, snapshots, refs), usable with HF_HUB_OFFLINE=1.",
        "str",
        "plain",
        choices=("plain", "hf"),
    ),
    Input("hf-repo", "With layout hf: the repo, org/name or datasets/org/name.", "str"),
    Input(
        "hf-revision",
        "With layout hf: only this revision (a branch such as main, or a commit).",
        "str",
    ),
)

CACHE_OUTPUTS = (
    Output(
        "cache-hit",
        "true only when the exact key matched (with manifest: when that tree was restored); "
        "always true or false.",
    ),
    Output(
        "matched-key",
        "The key that matched (exact or via restore-keys); empty on a miss and for a restore "
        "by manifest (no key is looked up).",
    ),
    Output(
        "manifest",
        "sha256 of the manifest restored (or, with populate, saved): the digest a restore by "
        "manifest asked for.",
    ),
    Output(
        "bytes-downloaded",
        "Bytes of the tree's files fetched from the store (the few KiB of manifest and ref "
        "are not counted).",
    ),
    Output("bytes-from-local", "Bytes of the tree's files placed from the runner-local cache."),
    Output("bytes-uploaded", "With populate: bytes its save sent to the store; else 0."),
    Output("files", "Files in the tree."),
    Output("seconds", "Wall time."),
    Output(
        "connections",
        "Connections the download settled on (adaptive, or GPUCI_CACHE_WORKERS when set); "
        "0 when nothing came from the store.",
    ),
)

SAVE_OUTPUTS = (
    Output(
        "outcome",
        "saved (a new key), updated (the key now names this tree), unchanged (the key already "
        "named this tree; nothing uploaded), same-content (another job saved the same tree at "
        "once), lost-race (another job's tree won; the warning names its manifest, and on a "
        "store that ignores conditional writes the ref is read back to tell); in a dry run "
        "would-save or would-update.",
    ),
    Output("manifest", "sha256 of the manifest the key names after this save."),
    Output(
        "bytes-uploaded",
        "Bytes sent to the store: new blobs and packs, the manifest and the ref (0 when "
        "unchanged).",
    ),
    Output("files", "Files in the tree."),
    Output("seconds", "Wall time."),
    Output(
        "connections",
        "Connections the upload settled on (adaptive, or GPUCI_CACHE_WORKERS when set); "
        "0 when nothing was uploaded.",
    ),
)

MANIFEST = Input(
    "manifest",
    "sha256 of a manifest (as in provenance.json): that exact tree, whatever the keys name now.",
    "str",
)

RESTORE = Command(
    name="restore",
    help="Restore a cached tree: exact key, else the newest restore-keys prefix match, "
    "or one manifest by digest.",
    inputs=(
        Input(
            "key",
            "The exact cache key, e.g. weights-llama-3-8b-v1 (optional with manifest).",
            "str",
        ),
        Input(
            MANIFEST.name,
            MANIFEST.help + " Verified like any restore; key and restore-keys then unused.",
            "str",
        ),
        PATH,
        Input(
            "restore-keys",
            "Key prefixes to fall back to, one per line, tried in order; "
            "the newest match of the first prefix that matches wins.",
            "lines",
        ),
        *STORE_INPUTS,
        Input("fail-on-miss", "Fail the step when no key matches.", "bool", "false"),
        Input(
            "lookup-only",
            "Only check whether the key would hit; download nothing.",
            "bool",
            "false",
        ),
        *TIER_INPUTS,
        Input(
            "include",
            "Restore only files matching these globs, one per line (*.safetensors, "
            "config.json; a glob with / matches the whole path).",
            "lines",
        ),
        Input("exclude", "Skip files matching these globs, one per line.", "lines"),
        *HF_INPUTS,
        Input(
            "populate",
            "Shell command run when the exact key misses (e.g. huggingface-cli download ...); "
            "the paths are then saved under key at once. Its text is never echoed.",
            "str",
        ),
    ),
    outputs=(
        *CACHE_OUTPUTS,
        Output("populated", "true when the populate command ran and its result was saved."),
    ),
    target="gpuci.cache.restore_command:run",
    typed="gpuci.cache.options:RestoreInputs",
    actions=("actions/cache-weights", "actions/cache-weights/restore"),
)

SAVE = Command(
    name="save",
    help="Save a tree under a key, uploading only the blobs the store lacks.",
    inputs=(KEY, PATH, *STORE_INPUTS, *TIER_INPUTS, *HF_INPUTS),
    outputs=SAVE_OUTPUTS,
    target="gpuci.cache.save:run",
    typed="gpuci.cache.options:SaveInputs",
    actions=("actions/cache-weights/save",),
)

PRUNE = Command(
    name="prune",
    help="Delete keys unused for a while, then the manifests and blobs nothing names any more.",
    inputs=(
        Input(
            "older-than",
            "Delete keys neither saved nor restored for this long (e.g. 14d).",
            "duration",
            required=True,
        ),
        Input(
            "keep",
            "Always keep the N newest keys of each prefix (key up to its last -).",
            "int",
            "0",
            minimum=0,
        ),
        Input("prefix", "Only consider keys starting with this prefix.", "str"),
        Input(
            "grace",
            "Unnamed manifests and blobs younger than this stay (a save may be running).",
            "duration",
            "6h",
        ),
        *STORE_INPUTS,
    ),
    target="gpuci.cache.prune:run",
    typed="gpuci.cache.upkeep_options:PruneInputs",
)

LS = Command(
    name="ls",
    help="List cached keys with their sizes, ages and last use (or, with pins, the pins).",
    inputs=(
        Input("prefix", "Only keys starting with this prefix.", "str"),
        Input("pins", "List the pinned manifests and their reasons instead.", "bool", "false"),
        *STORE_INPUTS,
    ),
    target="gpuci.cache.listing:run",
    typed="gpuci.cache.upkeep_options:LsInputs",
)

PIN_OUTPUTS = (
    Output("manifest", "sha256 of the manifest."),
    Output("pinned", "true when the manifest is pinned after this step; always true or false."),
)

PIN = Command(
    name="pin",
    help="Keep one manifest, and all it reaches, from prune whatever its keys do.",
    inputs=(
        Input(
            MANIFEST.name,
            "sha256 of the manifest to keep (as in provenance.json).",
            "str",
            required=True,
        ),
        Input(
            "reason",
            "Why it is kept (shown by ls --pins), e.g. 'model v3 data'.",
            "str",
            required=True,
        ),
        *STORE_INPUTS,
    ),
    outputs=PIN_OUTPUTS,
    target="gpuci.cache.pins:run_pin",
    typed="gpuci.cache.upkeep_options:PinInputs",
)

UNPIN = Command(
    name="unpin",
    help="Remove a pin; the next prune treats the manifest like any other.",
    inputs=(
        Input(MANIFEST.name, "sha256 of the pinned manifest.", "str", required=True),
        *STORE_INPUTS,
    ),
    outputs=PIN_OUTPUTS,
    target="gpuci.cache.pins:run_unpin",
    typed="gpuci.cache.upkeep_options:UnpinInputs",
)

COMMAND = Command(
    name="cache-weights",
    help="Restore and save datasets and model weights through a content-addressed cache.",
    subcommands=(RESTORE, SAVE, LS, PRUNE, PIN, UNPIN),
)
