"""The pods sub-commands' inputs, one frozen dataclass each, parsed once at the edge.

Each field declares one input (:func:`gpuci.inputs.inp`); ``gpuci.commands._pods`` reads the
flags, ``INPUT_*`` and ``actions/gpu-pod`` from these classes, and
``gpuci.commands._dispatch.run_command`` builds one per run, so the phases read fields, which mypy
checks. Declared here because pods may not import the command registry (tests/test_imports.py).
"""

from __future__ import annotations

from gpuci.inputs import inp, options

__all__ = [
    "CostInputs",
    "DownInputs",
    "ExecInputs",
    "LsInputs",
    "ReapInputs",
    "StartInputs",
    "StopInputs",
    "UpInputs",
]


_BUDGETS = inp(
    "The budgets file in the repository: per-owner and default USD per period, the "
    "period, delegations (protect it with CODEOWNERS).",
    default=".gpuci/budgets.yml",
)
_HEALTH_STORE = inp(
    "The per-GPU health record gpu-smoke writes (s3://bucket/prefix or file:///dir; default: "
    "GPUCI_GPU_HEALTH_STORE; empty: not consulted)."
)
_LEDGER = inp(
    "Where pod events and budget reservations are kept, shared by every runner: "
    "s3://bucket/prefix (the cache's bucket will do) or file:///dir; a bare path is a folder."
    " Default: env GPUCI_PODS_LEDGER, else ~/.cache/gpuci/pods-ledger (this machine only)."
)
_NOTIFY = inp(
    "Where to tell people, one target per line: an http(s) webhook (Slack/Discord JSON), "
    "smtp://user:pass@host:587?from=..&to=.. (STARTTLS), or discourse+https://forum/t/ID (key"
    " in DISCOURSE_API_KEY). Masked; failures only warn.",
    kind="lines",
    secret=True,
)
_OWNER = inp(
    "Who the pod is for (budget and cost attribution); default: the CI identity "
    "(GITHUB_TRIGGERING_ACTOR/GITHUB_ACTOR, GITLAB_USER_LOGIN, git's user). Another owner "
    "needs a delegation in the budgets file."
)
_POD_ID = inp("Pod id(s), comma-separated.")
_RUNNER_SCOPE = inp(
    "Where GitHub runners are registered: repo (GITHUB_REPOSITORY) or org (its owner).",
    default="repo",
    choices=("repo", "org"),
)


@options
class UpInputs:
    gpu_types: list[str] = inp(
        "RunPod GPU type ids in preference order, comma-separated (e.g. NVIDIA GeForce RTX "
        "4090,NVIDIA L40S).",
        required=True,
    )
    image: str = inp(
        "Container image (required without runner; with runner, default "
        "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04)."
    )
    command: str = inp(
        "Container start command; wrapped by the self-stop timer (without it the timer is off"
        " and only down/reap end the pod). Not with runner (gpu-ci starts the runner)."
    )
    env: list[str] = inp("Pod environment, one KEY=VALUE per line.", kind="lines")
    ports: list[str] = inp("Exposed ports, e.g. 8000/http,22/tcp.")
    disk_gb: int = inp("Container disk in GB.", default="50", minimum=1)
    gpu_count: int = inp("GPUs per pod.", default="1", minimum=1)
    cloud: str = inp("RunPod cloud tier.", default="SECURE", choices=("SECURE", "COMMUNITY"))
    data_centers: list[str] = inp("Data centre ids to try, in order (default: any).")
    ttl: float = inp(
        "Lifetime: the pod stops itself and is reaped after this. With a budget, ttl plus the"
        " reap interval is at most 31 days (a reservation holds no longer).",
        kind="duration",
        default="1h",
    )
    owner: str = _OWNER
    ledger: str = _LEDGER
    budgets: str = _BUDGETS
    budget_usd: float | None = inp(
        "Refuse the pod if the owner's spend would pass this; can only lower the budgets "
        "file's amount."
    )
    budget_period: float = inp(
        "The period budget-usd covers when there is no budgets file.",
        kind="duration",
        default="30d",
    )
    reap_interval: float = inp(
        "How often the reaper runs: the budget counts each pod for ttl plus this, the longest"
        " it can outlive a failed self-stop. Only lengthens the budgets file's reap-interval"
        " (else 15m), never shortens it.",
        kind="duration",
        default="15m",
    )
    health_url: str = inp(
        "Wait until this URL answers 2xx: a full URL ({pod_id} is replaced) or a path on the "
        "first http port's proxy URL, e.g. /v1/models."
    )
    timeout: float = inp("How long to wait for RUNNING and health.", kind="duration", default="20m")
    notify: list[str] = _NOTIFY
    ssh_public_keys: list[str] = inp(
        "Start the pod with SSH for these authorized_keys lines (one per line; default: env "
        "RUNPOD_SSH_PUBLIC_KEYS); publishes 22/tcp and outputs ssh-command.",
        kind="lines",
    )
    placement_timeout: float = inp(
        "Keep walking the candidates with backoff this long while none places.",
        kind="duration",
        default="10m",
    )
    health_store: str = _HEALTH_STORE
    avoid_failed_days: int = inp(
        "Keep off data centres where a GPU failed gpu-smoke (hardware) in this many days, per"
        " the health record; RunPod names no machine, so the data centre is the unit. 0: off.",
        default="7",
        minimum=0,
    )
    smoke: bool | None = inp(
        "Run gpu-smoke on the pod before it is handed over (before the runner starts, or "
        "before command); a hardware failure stops that pod and up places another in another "
        "data centre. A stock image installs gpu-ci for it (gpuci-source). gpu-smoke's own "
        "inputs (checks, min-gemm-tflops, ...) go to the pod as INPUT_* lines in env. Default: "
        "true with runner."
    )
    gpuci_source: str = inp(
        "Where a smoking pod whose image lacks gpu-ci installs it: OWNER/REPO@REF (resolved to "
        "its commit, installed from git at that SHA), a git URL pinned by @<commit SHA> or a "
        "source archive's URL with #sha256= (its requirements.lock pins the dependencies; a "
        "wheel cannot), or none. Default: this action at the ref the workflow used; outside "
        "Actions, env GPUCI_PACKAGE.",
        action_default="${{ github.action_repository }}@${{ github.action_ref }}",
    )
    smoke_attempts: int = inp(
        "Pods up may place in all when gpu-smoke finds a hardware failure, within the one "
        "budget reservation.",
        default="2",
        minimum=1,
    )
    runner: str = inp(
        "Make the pod a just-in-time CI runner for one job: github (token in "
        "GPUCI_RUNNER_TOKEN) or gitlab (token in GPUCI_GITLAB_TOKEN); default: none.",
        choices=("github", "gitlab"),
    )
    runner_labels: list[str] = inp(
        "The runner's labels (GitHub) or tags (GitLab), comma-separated: this run's only, "
        "e.g. run-123 (default in CI: run-$GITHUB_RUN_ID / pipeline-$CI_PIPELINE_ID); a label"
        " without the run's id is refused, since another job could take the runner."
    )
    runner_group_id: int = inp("GitHub runner group id.", default="1", minimum=1)
    runner_scope: str = _RUNNER_SCOPE
    runner_idle_timeout: float = inp(
        "A runner that has not started a job after this stops, and its pod terminates.",
        kind="duration",
        default="10m",
    )
    runner_wait_online: bool = inp(
        "With runner: wait (within timeout) until the platform lists the runner online, so a "
        "refused runner fails this step instead of leaving the job queued.",
        default="true",
    )
    runner_version: str = inp(
        "Pin the actions/runner release a GitHub runner pod installs (with runner-sha256); "
        "default: the newest release, resolved when up runs."
    )
    runner_sha256: str = inp(
        "The sha256 of actions-runner-linux-x64-<runner-version>.tar.gz (its release notes)."
    )


@options
class LsInputs:
    owner: str = _OWNER
    all: bool = inp("Include pods gpu-ci did not create.", default="false")
    ledger: str = _LEDGER


@options
class StopInputs:
    pod_id: list[str] = _POD_ID
    ledger: str = _LEDGER


@options
class StartInputs:
    pod_id: list[str] = _POD_ID
    ttl: float | None = inp(
        "New lifetime from now; with a budget, at most 31 days with the reap interval.",
        kind="duration",
    )
    ledger: str = _LEDGER
    budgets: str = _BUDGETS


@options
class DownInputs:
    pod_id: list[str] = _POD_ID
    ledger: str = _LEDGER
    runner_scope: str = _RUNNER_SCOPE


@options
class ReapInputs:
    owner: str = _OWNER
    grace: float = inp("Extra time after expiry before reaping.", kind="duration", default="0")
    untagged_older_than: float | None = inp(
        "Also stop (never terminate) pods gpu-ci did not create that are older than this, "
        "e.g. 12h, and name them (default: off).",
        kind="duration",
    )
    ledger: str = _LEDGER
    notify: list[str] = _NOTIFY
    runner_scope: str = _RUNNER_SCOPE
    health_store: str = _HEALTH_STORE
    failure_days: int = inp(
        "Name the nodes (data centre, GPU UUID, pod, host) with two or more hardware failures"
        " in the GPU health record in this many days. 0: off.",
        default="7",
        minimum=0,
    )


@options
class CostInputs:
    owner: str = inp("Only this owner.")
    period: float = inp("How far back.", kind="duration", default="30d")
    ledger: str = _LEDGER
    notify: list[str] = inp(
        "Send this summary to these targets (see up's notify): for a scheduled report.",
        kind="lines",
        secret=True,
    )


@options
class ExecInputs:
    pod_id: list[str] = _POD_ID
    command: str = inp("The command line to run on the pod.", required=True)
    timeout: float = inp("How long the command may run.", kind="duration", default="10m")
