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
PATH = Input("path", "Folders or files to cache, one per line.", "lines", required=True)

CACHE_OUTPUTS = (
    Output("cache-hit", "true only when the exact key matched; always true or false."),
    Output("matched-key", "The key that matched (exact or via restore-keys); empty on a miss."),
    Output("manifest", "sha256 of the manifest restored or saved."),
    Output("bytes-downloaded", "Bytes fetched from the store."),
    Output("bytes-uploaded", "Bytes sent to the store."),
    Output("files", "Files in the tree."),
    Output("seconds", "Wall time."),
)

RESTORE = Command(
    name="restore",
    help="Restore a cached tree: exact key, else the newest restore-keys prefix match.",
    inputs=(
        KEY,
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
    ),
    outputs=CACHE_OUTPUTS,
    target="gpuci.cache.restore:run",
    actions=("actions/cache-weights", "actions/cache-weights/restore"),
)

SAVE = Command(
    name="save",
    help="Save a tree under a key, uploading only the blobs the store lacks.",
    inputs=(KEY, PATH, *STORE_INPUTS),
    outputs=CACHE_OUTPUTS,
    target="gpuci.cache.save:run",
    actions=("actions/cache-weights/save",),
)

LS = Command(
    name="ls",
    help="List cached keys with their sizes and ages.",
    inputs=(Input("prefix", "Only keys starting with this prefix.", "str"), *STORE_INPUTS),
    target="gpuci.cache.listing:run",
)

COMMAND = Command(
    name="cache-weights",
    help="Restore and save datasets and model weights through a content-addressed cache.",
    subcommands=(RESTORE, SAVE, LS),
)
