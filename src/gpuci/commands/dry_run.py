"""``dry-run``: judge a workflow's gpu-ci steps on this machine before paying for a GPU."""

from gpuci.commands import Command
from gpuci.inputs import Input

COMMAND = Command(
    name="dry-run",
    help="Read a workflow, find the gpu-ci steps and run each one's dry-run plan here.",
    inputs=(
        Input(
            "workflow",
            "Path of the workflow file, e.g. .github/workflows/train.yml.",
            "str",
            required=True,
        ),
        Input(
            "job",
            "Only this job (default: every job; steps that are not gpu-ci are listed, not run).",
            "str",
        ),
    ),
    target="gpuci.dryrun:run",
    positional="workflow",
)
