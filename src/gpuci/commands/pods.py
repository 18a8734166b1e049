"""``pods``: ephemeral GPU pods on RunPod from CI (placeholder spec; filled by the pods work)."""

from gpuci.commands import Command

COMMAND = Command(
    name="pods",
    help="Deploy, list, stop, start and destroy ephemeral RunPod GPU pods; reap; costs.",
    target=None,
)
