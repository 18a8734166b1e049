"""``dry-run``: judge a workflow's gpu-ci steps on this machine before paying for a GPU."""

from gpuci.commands import Command
from gpuci.inputs import Input

COMMAND = Command(
    name="dry-run",
    help="Read a workflow as the runner will, and run each gpu-ci step's dry-run plan here "
    "(no network unless --probe).",
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
        Input(
            "event",
            "The event to plan for (github.event_name): default push when the workflow runs on "
            "push, else the first event it names.",
            "str",
        ),
        Input(
            "ref",
            "The ref to plan for (github.ref; a bare branch name means refs/heads/NAME).",
            "str",
            default="refs/heads/main",
        ),
    ),
    target="gpuci.dryrun:run",
    typed="gpuci.dryrun:DryRunInputs",
    positional="workflow",
)
