"""``dry-run``: judge a workflow's gpu-ci steps on this machine before paying for a GPU."""

from __future__ import annotations

from gpuci.commands import Command
from gpuci.inputs import inp, options


@options
class DryRunInputs:
    """What ``dry-run`` is given (here, not in :mod:`gpuci.dryrun`: the registry imports no
    entry point)."""

    workflow: str = inp(
        "Path of the workflow file, e.g. .github/workflows/train.yml.", required=True
    )
    job: str = inp(
        "Only this job (default: every job; steps that are not gpu-ci are listed, not run)."
    )
    event: str = inp(
        "The event to plan for (github.event_name): default push when the workflow runs on "
        "push, else the first event it names."
    )
    ref: str = inp(
        "The ref to plan for (github.ref; a bare branch name means refs/heads/NAME).",
        default="refs/heads/main",
    )
    var: list[str] = inp(
        "A configuration variable the run would have (vars.NAME), as NAME=VALUE; repeat the "
        "flag for more. Once any is given, a variable not given is empty, as in act.",
        kind="lines",
    )
    vars_file: str = inp(
        "A file of variables (vars.*): a YAML or JSON mapping of NAME: VALUE, or a dotenv "
        "file of NAME=VALUE lines; --var beats it."
    )
    secret: list[str] = inp(
        "The NAME of a secret the run would have; repeat the flag for more. Only whether it "
        "exists is used (a value is never asked for or printed): secrets.NAME is non-empty, "
        "its text unknown; once any is named, a secret not named is empty, as in act.",
        kind="lines",
    )
    event_payload: str = inp(
        "A JSON file that is the event's payload (github.event), as act's -e: a PR's labels "
        "or draft flag, a dispatch's inputs; a field it lacks is null."
    )


COMMAND: Command[DryRunInputs] = Command(
    name="dry-run",
    help="Read a workflow as the runner will, and run each gpu-ci step's dry-run plan here "
    "(no network unless --probe).",
    target="gpuci.dryrun:run",
    options="gpuci.commands._dry_run:DryRunInputs",
    positional="workflow",
)
