"""``cache-weights``: a content-addressed, S3-backed cache for datasets and model weights."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuci.commands import Command, Output

if TYPE_CHECKING:
    from gpuci.cache._upkeep.options import LsInputs, PinInputs, PruneInputs, UnpinInputs
    from gpuci.cache.options import RestoreInputs, SaveInputs

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


RESTORE: Command[RestoreInputs] = Command(
    name="restore",
    help="Restore a cached tree: exact key, else the newest restore-keys prefix match, "
    "or one manifest by digest.",
    outputs=(
        *CACHE_OUTPUTS,
        Output("populated", "true when the populate command ran and its result was saved."),
    ),
    target="gpuci.cache._restore.command:run",
    options="gpuci.cache.options:RestoreInputs",
    actions=("actions/cache-weights", "actions/cache-weights/restore"),
)

SAVE: Command[SaveInputs] = Command(
    name="save",
    help="Save a tree under a key, uploading only the blobs the store lacks.",
    outputs=SAVE_OUTPUTS,
    target="gpuci.cache._save.command:run",
    options="gpuci.cache.options:SaveInputs",
    actions=("actions/cache-weights/save",),
)

PRUNE: Command[PruneInputs] = Command(
    name="prune",
    help="Delete keys unused for a while, then the manifests and blobs nothing names any more.",
    target="gpuci.cache._upkeep.prune:run",
    options="gpuci.cache._upkeep.options:PruneInputs",
)

LS: Command[LsInputs] = Command(
    name="ls",
    help="List cached keys with their sizes, ages and last use (or, with pins, the pins).",
    target="gpuci.cache._upkeep.listing:run",
    options="gpuci.cache._upkeep.options:LsInputs",
)

PIN_OUTPUTS = (
    Output("manifest", "sha256 of the manifest."),
    Output("pinned", "true when the manifest is pinned after this step; always true or false."),
)

PIN: Command[PinInputs] = Command(
    name="pin",
    help="Keep one manifest, and all it reaches, from prune whatever its keys do.",
    outputs=PIN_OUTPUTS,
    target="gpuci.cache._upkeep.pins:run_pin",
    options="gpuci.cache._upkeep.options:PinInputs",
)

UNPIN: Command[UnpinInputs] = Command(
    name="unpin",
    help="Remove a pin; the next prune treats the manifest like any other.",
    outputs=PIN_OUTPUTS,
    target="gpuci.cache._upkeep.pins:run_unpin",
    options="gpuci.cache._upkeep.options:UnpinInputs",
)

COMMAND: Command[None] = Command(
    name="cache-weights",
    help="Restore and save datasets and model weights through a content-addressed cache.",
    subcommands=(RESTORE, SAVE, LS, PRUNE, PIN, UNPIN),
)
