"""``pods``: ephemeral GPU pods on RunPod from CI (up, ls, stop, start, down, reap, cost).

The key is read from ``RUNPOD_API_KEY`` (masked at once), the API base from ``RUNPOD_API_URL``.
"""

from gpuci.commands import Command, Output
from gpuci.inputs import Input

OWNER = Input(
    "owner",
    "Who the pod is for (budget and cost attribution); default: the CI identity "
    "(GITHUB_TRIGGERING_ACTOR/GITHUB_ACTOR, GITLAB_USER_LOGIN, git's user). Another owner "
    "needs a delegation in the budgets file.",
    "str",
)
LEDGER = Input(
    "ledger",
    "Where pod events and budget reservations are kept, shared by every runner: "
    "s3://bucket/prefix (the cache's bucket will do) or file:///dir; a bare path is a folder. "
    "Default: env GPUCI_PODS_LEDGER, else ~/.cache/gpuci/pods-ledger (this machine only).",
    "str",
)
NOTIFY = Input(
    "notify",
    "Where to tell people, one target per line: an http(s) webhook (Slack/Discord JSON), "
    "smtp://user:pass@host:587?from=..&to=.. (STARTTLS), or discourse+https://forum/t/ID "
    "(key in DISCOURSE_API_KEY). Masked; failures only warn.",
    "lines",
    secret=True,
)
POD_ID = Input("pod-id", "Pod id(s), comma-separated.", "list")
RUNNER_SCOPE = Input(
    "runner-scope",
    "Where GitHub runners are registered: repo (GITHUB_REPOSITORY) or org (its owner).",
    "str",
    "repo",
    choices=("repo", "org"),
)
HEALTH_STORE = Input(
    "health-store",
    "The per-GPU health record gpu-smoke writes (s3://bucket/prefix or file:///dir; "
    "default: GPUCI_GPU_HEALTH_STORE; empty: not consulted).",
    "str",
)
RUNNER_INPUTS = (
    Input(
        "runner",
        "Make the pod a just-in-time CI runner for one job: github (token in "
        "GPUCI_RUNNER_TOKEN) or gitlab (token in GPUCI_GITLAB_TOKEN); default: none.",
        "str",
        choices=("github", "gitlab"),
    ),
    Input(
        "runner-labels",
        "The runner's labels (GitHub) or tags (GitLab), comma-separated: this run's only, "
        "e.g. run-123 (default in CI: run-$GITHUB_RUN_ID / pipeline-$CI_PIPELINE_ID); a label "
        "without the run's id is refused, since another job could take the runner.",
        "list",
    ),
    Input("runner-group-id", "GitHub runner group id.", "int", "1", minimum=1),
    RUNNER_SCOPE,
    Input(
        "runner-idle-timeout",
        "A runner that has not started a job after this stops, and its pod terminates.",
        "duration",
        "10m",
    ),
    Input(
        "runner-wait-online",
        "With runner: wait (within timeout) until the platform lists the runner online, so a "
        "refused runner fails this step instead of leaving the job queued.",
        "bool",
        "true",
    ),
    Input(
        "runner-version",
        "Pin the actions/runner release a GitHub runner pod installs (with runner-sha256); "
        "default: the newest release, resolved when up runs.",
        "str",
    ),
    Input(
        "runner-sha256",
        "The sha256 of actions-runner-linux-x64-<runner-version>.tar.gz (its release notes).",
        "str",
    ),
)
_CLEANS_RUNNERS = (
    " With GPUCI_RUNNER_TOKEN / GPUCI_GITLAB_TOKEN set, also deletes gpu-ci runners whose pod "
    "is gone and terminates runner pods whose runner is gone."
)

UP = Command(
    name="up",
    help="Create a GPU pod on the first preferred GPU type that places; wait until ready.",
    inputs=(
        Input(
            "gpu-types",
            "RunPod GPU type ids in preference order, comma-separated "
            "(e.g. NVIDIA GeForce RTX 4090,NVIDIA L40S).",
            "list",
            required=True,
        ),
        Input(
            "image",
            "Container image (required without runner; with runner, default "
            "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04).",
            "str",
        ),
        Input(
            "command",
            "Container start command; wrapped by the self-stop timer (without it the timer is "
            "off and only down/reap end the pod). Not with runner (gpu-ci starts the runner).",
            "str",
        ),
        Input("env", "Pod environment, one KEY=VALUE per line.", "lines"),
        Input("ports", "Exposed ports, e.g. 8000/http,22/tcp.", "list"),
        Input("disk-gb", "Container disk in GB.", "int", "50", minimum=1),
        Input("gpu-count", "GPUs per pod.", "int", "1", minimum=1),
        Input("cloud", "RunPod cloud tier.", "str", "SECURE", choices=("SECURE", "COMMUNITY")),
        Input("data-centers", "Data centre ids to try, in order (default: any).", "list"),
        Input("ttl", "Lifetime: the pod stops itself and is reaped after this.", "duration", "1h"),
        OWNER,
        LEDGER,
        Input(
            "budgets",
            "The budgets file in the repository: per-owner and default USD per period, the "
            "period, delegations (protect it with CODEOWNERS).",
            "str",
            ".gpuci/budgets.yml",
        ),
        Input(
            "budget-usd",
            "Refuse the pod if the owner's spend would pass this; can only lower the "
            "budgets file's amount.",
            "float",
        ),
        Input(
            "budget-period",
            "The period budget-usd covers when there is no budgets file.",
            "duration",
            "30d",
        ),
        Input(
            "reap-interval",
            "How often the reaper runs: the budget counts each pod for ttl plus this, the "
            "longest it can outlive a failed self-stop.",
            "duration",
            "15m",
        ),
        Input(
            "health-url",
            "Wait until this URL answers 2xx: a full URL ({pod_id} is replaced) or a path on "
            "the first http port's proxy URL, e.g. /v1/models.",
            "str",
        ),
        Input("timeout", "How long to wait for RUNNING and health.", "duration", "20m"),
        NOTIFY,
        Input(
            "ssh-public-keys",
            "Start the pod with SSH for these authorized_keys lines (one per line; default: env "
            "RUNPOD_SSH_PUBLIC_KEYS); publishes 22/tcp and outputs ssh-command.",
            "lines",
        ),
        Input(
            "placement-timeout",
            "Keep walking the candidates with backoff this long while none places.",
            "duration",
            "10m",
        ),
        HEALTH_STORE,
        Input(
            "avoid-failed-days",
            "Keep off data centres where a GPU failed gpu-smoke (hardware) in this many days, "
            "per the health record; RunPod names no machine, so the data centre is the unit. "
            "0: off.",
            "int",
            "7",
            minimum=0,
        ),
        Input(
            "smoke",
            "Run gpu-smoke on the pod before it is handed over (before the runner starts, or "
            "before command); a hardware failure stops that pod and up places another in "
            "another data centre. A stock image installs gpu-ci for it (gpuci-source). Default: "
            "true with runner.",
            "bool",
        ),
        Input(
            "gpuci-source",
            "Where a smoking pod whose image lacks gpu-ci installs it: OWNER/REPO@REF (resolved to "
            "its commit, installed from git at that SHA), a pip URL pinned by @<commit SHA> or "
            "#sha256=, or none. Default: this action at the ref the workflow used; outside "
            "Actions, env GPUCI_PACKAGE.",
            "str",
            action_default="${{ github.action_repository }}@${{ github.action_ref }}",
        ),
        Input(
            "smoke-attempts",
            "Pods up may place in all when gpu-smoke finds a hardware failure, within the one "
            "budget reservation.",
            "int",
            "2",
            minimum=1,
        ),
        *RUNNER_INPUTS,
    ),
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
    target="gpuci.pods.lifecycle.up:up",
    typed="gpuci.pods.options:UpInputs",
)

IDS_OUT = (
    Output("pod-ids", "The pods acted on, comma-separated."),
    Output("count", "How many."),
)


def _on_pods(name: str, help: str, *inputs: Input) -> Command:
    """A pods sub-command (module gpuci.pods.lifecycle.NAME) that acts on pods and names them
    (IDS_OUT)."""
    return Command(
        name=name,
        help=help,
        inputs=inputs,
        outputs=IDS_OUT,
        target=f"gpuci.pods.lifecycle.{name}:{name}",
        typed=f"gpuci.pods.options:{name.capitalize()}Inputs",
    )


LS = _on_pods(
    "ls",
    "List gpu-ci pods with owner, GPU, cost per hour and expiry.",
    OWNER,
    Input("all", "Include pods gpu-ci did not create.", "bool", "false"),
    LEDGER,
)
STOP = _on_pods(
    "stop", "Stop pods (GPU released, disk kept); already stopped is success.", POD_ID, LEDGER
)
START = _on_pods(
    "start",
    "Start stopped pods; ttl gives them a new expiry.",
    POD_ID,
    Input("ttl", "New lifetime from now.", "duration"),
    LEDGER,
)
DOWN = _on_pods(
    "down",
    "Terminate pods by id, or all pods of this CI run; a missing pod is success." + _CLEANS_RUNNERS,
    POD_ID,
    LEDGER,
    RUNNER_SCOPE,
)
REAP = _on_pods(
    "reap",
    "Terminate every gpu-ci pod past its expiry, naming owner, GPU, hours past TTL and cost; "
    "run it on a schedule." + _CLEANS_RUNNERS,
    OWNER,
    Input("grace", "Extra time after expiry before reaping.", "duration", "0"),
    Input(
        "untagged-older-than",
        "Also stop (never terminate) pods gpu-ci did not create that are older than this, "
        "e.g. 12h, and name them (default: off).",
        "duration",
    ),
    LEDGER,
    NOTIFY,
    RUNNER_SCOPE,
    HEALTH_STORE,
    Input(
        "failure-days",
        "Name the nodes (data centre, GPU UUID, pod, host) with two or more hardware failures "
        "in the GPU health record in this many days. 0: off.",
        "int",
        "7",
        minimum=0,
    ),
)

COST = Command(
    name="cost",
    help="Spend per owner and per GPU type, as a table and JSON.",
    inputs=(
        Input("owner", "Only this owner.", "str"),
        Input("period", "How far back.", "duration", "30d"),
        LEDGER,
        Input(
            "notify",
            "Send this summary to these targets (see up's notify): for a scheduled report.",
            "lines",
            secret=True,
        ),
    ),
    outputs=(
        Output("total-usd", "Spend in the period (of the owner, if given)."),
        Output("live-usd-per-hr", "Cost per hour of the live pods."),
    ),
    target="gpuci.pods.budgets.cost:run_cost",
    typed="gpuci.pods.options:CostInputs",
)

EXEC = Command(
    name="exec",
    help="Run a command on a pod over SSH: pods exec --pod-id ID -- CMD (key from env "
    "RUNPOD_SSH_PRIVATE_KEY, masked).",
    inputs=(
        POD_ID,
        Input("command", "The command line to run on the pod.", "str", required=True),
        Input("timeout", "How long the command may run.", "duration", "10m"),
    ),
    outputs=(Output("exit-status", "The remote command's exit status."),),
    target="gpuci.pods.lifecycle.ssh:exec_on_pod",
    typed="gpuci.pods.options:ExecInputs",
    positional="command",
    positional_rest=True,
)

COMMAND = Command(
    name="pods",
    help="Deploy, list, stop, start and destroy ephemeral RunPod GPU pods; reap; costs.",
    subcommands=(UP, LS, STOP, START, DOWN, REAP, COST, EXEC),
    actions=("actions/gpu-pod",),
    dispatch="action",
)
