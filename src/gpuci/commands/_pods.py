"""``pods``: ephemeral GPU pods on RunPod from CI (up, ls, stop, start, down, reap, cost).

The key is read from ``RUNPOD_API_KEY`` (masked at once), the API base from ``RUNPOD_API_URL``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuci.commands import Command, Output

if TYPE_CHECKING:
    from gpuci.pods.options import (
        CostInputs,
        DownInputs,
        ExecInputs,
        LsInputs,
        ReapInputs,
        StartInputs,
        StopInputs,
        UpInputs,
    )

_CLEANS_RUNNERS = (
    " With GPUCI_RUNNER_TOKEN / GPUCI_GITLAB_TOKEN set, also deletes gpu-ci runners whose pod "
    "is gone and terminates runner pods whose runner is gone."
)

UP: Command[UpInputs] = Command(
    name="up",
    help="Create a GPU pod on the first preferred GPU type that places; wait until ready.",
    outputs=(
        Output("pod-id", "The pod's id."),
        Output("status", "RUNNING after a real run, PLANNED in a dry run."),
        Output("cost-per-hr", "USD per hour billed for the pod."),
        Output("url", "Proxy URL of the first http port (empty without one)."),
        Output("gpu-type", "The GPU type that was placed."),
        Output("data-center", "The data centre the pod runs in."),
        Output("expires-at", "When the pod stops itself and becomes reapable (UTC)."),
        Output("ssh-command", "ssh USER@HOST -p PORT for the pod (empty without ssh keys)."),
        Output("runner-name", "The CI runner's name (empty without runner)."),
    ),
    target="gpuci.pods._lifecycle.up:up",
    options="gpuci.pods.options:UpInputs",
)

IDS_OUT = (
    Output("pod-ids", "The pods acted on, comma-separated."),
    Output("count", "How many."),
)


def _on_pods(name: str, help: str, module: str = "") -> Command[Any]:
    """A pods sub-command (function NAME of gpuci.pods._lifecycle.MODULE, NAME by default; inputs
    gpuci.pods.options.NameInputs) that acts on pods and names them (IDS_OUT)."""
    return Command(
        name=name,
        help=help,
        options=f"gpuci.pods.options:{name.capitalize()}Inputs",
        outputs=IDS_OUT,
        target=f"gpuci.pods._lifecycle.{module or name}:{name}",
    )


LS: Command[LsInputs] = _on_pods(
    "ls", "List gpu-ci pods with owner, GPU, cost per hour and expiry."
)
STOP: Command[StopInputs] = _on_pods(
    "stop", "Stop pods (GPU released, disk kept); already stopped is success.", "power"
)
START: Command[StartInputs] = _on_pods(
    "start", "Start stopped pods; ttl gives them a new expiry.", "power"
)
DOWN: Command[DownInputs] = _on_pods(
    "down",
    "Terminate pods by id, or all pods of this CI run; a missing pod is success." + _CLEANS_RUNNERS,
)
REAP: Command[ReapInputs] = _on_pods(
    "reap",
    "Terminate every gpu-ci pod past its expiry, naming owner, GPU, hours past TTL and cost; "
    "run it on a schedule." + _CLEANS_RUNNERS,
)

COST: Command[CostInputs] = Command(
    name="cost",
    help="Spend per owner and per GPU type, as a table and JSON.",
    outputs=(
        Output("total-usd", "Spend in the period (of the owner, if given)."),
        Output("live-usd-per-hr", "Cost per hour of the live pods."),
    ),
    target="gpuci.pods._budgets.cost:run_cost",
    options="gpuci.pods.options:CostInputs",
)

EXEC: Command[ExecInputs] = Command(
    name="exec",
    help="Run a command on a pod over SSH: pods exec --pod-id ID -- CMD (key from env "
    "RUNPOD_SSH_PRIVATE_KEY, masked).",
    outputs=(Output("exit-status", "The remote command's exit status."),),
    target="gpuci.pods._lifecycle.ssh:exec_on_pod",
    options="gpuci.pods.options:ExecInputs",
    positional="command",
    positional_rest=True,
)

COMMAND: Command[None] = Command(
    name="pods",
    help="Deploy, list, stop, start and destroy ephemeral RunPod GPU pods; reap; costs.",
    subcommands=(UP, LS, STOP, START, DOWN, REAP, COST, EXEC),
    actions=("actions/gpu-pod",),
    dispatch="action",
)
