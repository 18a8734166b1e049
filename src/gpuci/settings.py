"""Every environment variable gpu-ci reads, named once, with its default and its meaning.

Like huggingface_hub's ``constants.py``: a module reads ``settings.DRY_RUN.value(environ)``
(or ``.is_true``, ``.is_set``, ``.raw``, and ``.integer`` / ``.number``: one parse rule, one
error naming the variable) instead of spelling ``"GPUCI_DRY_RUN"`` itself, and
``docs/settings.md`` is generated from :data:`ALL` (``python -m gpuci.settings >
docs/settings.md``; tests/test_docs.py keeps it in step, and checks every ``GPUCI_*`` name in
``src/`` is declared here; tests/test_settings.py, that no other module spells one).

Inputs (``INPUT_<NAME>``) are not settings: each command's are declared by its specs in
:mod:`gpuci.commands`. The variables gpu-ci writes for the runner (``GITHUB_OUTPUT``'s outputs,
GitLab's dotenv ``GPUCI_<OUTPUT>``) are not listed either, only the files it writes them to.

Importing this module costs nothing but the table (no I/O): ``python -m gpuci --help`` loads it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ALL", "GROUPS", "Setting", "markdown"]

# Who sets a variable; the order of docs/settings.md's sections.
GROUPS = (
    "gpu-ci",
    "gpu-ci on a pod",
    "GitHub Actions",
    "GitLab CI",
    "AWS and S3",
    "RunPod",
    "Other",
)

ALL: list[Setting] = []
# What :meth:`Setting.number` reads: plain decimals only (no nan, inf, exponent or sign).
# Text, compiled by ``re`` on first use: most commands read no number, and a compile at import
# is a share of every start-up.
_NUMBER = r"[0-9]{1,18}(?:\.[0-9]{1,18})?|\.[0-9]{1,18}"


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, its default as text (``""``: unset) and why."""

    name: str
    default: str
    meaning: str
    group: str

    def value(self, environ: Mapping[str, str] | None = None) -> str:
        """The variable's text, stripped; the default when it is unset or blank."""
        return (self.raw(environ) or "").strip() or self.default

    def is_true(self, environ: Mapping[str, str] | None = None) -> bool:
        """True when the variable says ``true`` (any case), as the CI platforms write it."""
        return self.value(environ).lower() == "true"

    def is_set(self, environ: Mapping[str, str] | None = None) -> bool:
        """True when the variable is present and not blank (its value not read)."""
        return (self.raw(environ) or "").strip() != ""

    def raw(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The text as set, None when unset: for a variable whose empty value means something
        (``CUDA_VISIBLE_DEVICES=""`` hides every GPU)."""
        env = os.environ if environ is None else environ
        return env.get(self.name)

    def integer(self, environ: Mapping[str, str] | None = None, minimum: int = 0) -> int:
        """The value as a whole number of at least ``minimum`` (the default when unset).

        Raises:
            gpuci.errors.InputError: it is not one, in one line naming the variable.
        """
        text = self.value(environ)
        if text.isascii() and text.isdigit() and len(text) <= 18 and int(text) >= minimum:
            return int(text)
        raise self._bad(text, f"a whole number of at least {minimum}")

    def number(self, environ: Mapping[str, str] | None = None, minimum: float = 0.0) -> float:
        """The value as a finite number of at least ``minimum`` (seconds, a rate, a factor).

        Raises:
            gpuci.errors.InputError: it is not one, in one line naming the variable.
        """
        text = self.value(environ)
        if re.fullmatch(_NUMBER, text) and float(text) >= minimum:
            return float(text)
        raise self._bad(text, f"a number of at least {minimum:g}")

    def _bad(self, text: str, wanted: str) -> Exception:
        from gpuci.errors import InputError  # only on the error path: this module stays a table

        shown = text if len(text) <= 40 else text[:40] + "..."
        default = f"its default {self.default}" if self.default else "no value"
        return InputError(
            f"{self.name}={shown!r} is not {wanted}",
            f"set {self.name} to {wanted}, or unset it for {default}",
        )


class _Section:
    """The declarer of one section's rows (name, meaning, default): no row repeats its group."""

    def __init__(self, group: str) -> None:
        if group not in GROUPS:
            raise ValueError(f"unknown group {group}")
        self.group = group

    def __call__(self, name: str, meaning: str, default: str = "") -> Setting:
        setting = Setting(name, default, meaning, self.group)
        ALL.append(setting)
        return setting


_gpuci = _Section("gpu-ci")
_pod = _Section("gpu-ci on a pod")
_github = _Section("GitHub Actions")
_gitlab = _Section("GitLab CI")
_aws = _Section("AWS and S3")
_runpod = _Section("RunPod")
_other = _Section("Other")


# ----- gpu-ci: what a user or a workflow sets ---------------------------------------------------
DRY_RUN = _gpuci("GPUCI_DRY_RUN", "true: every command plans only (as --dry-run).", default="false")
PROBE = _gpuci(
    "GPUCI_PROBE",
    "true: a dry run may make read-only network probes (as --probe).",
    default="false",
)
DEBUG = _gpuci(
    "GPUCI_DEBUG", "Set: an internal error raises with its traceback instead of one line."
)
SUMMARY = _gpuci(
    "GPUCI_SUMMARY",
    "A file each command appends its Markdown summary to (outside GitHub's job summary).",
)
PROGRESS_INTERVAL = _gpuci(
    "GPUCI_PROGRESS_INTERVAL", "Seconds between progress lines of long transfers.", default="5"
)
JOURNAL = _gpuci(
    "GPUCI_JOURNAL",
    "The job journal (JSON lines the later steps read); default "
    "$RUNNER_TEMP/gpuci-journal.jsonl, else ./.gpuci/gpuci-journal.jsonl.",
)
DOTENV = _gpuci(
    "GPUCI_DOTENV", "GitLab: the dotenv report file outputs go to.", default="gpuci-outputs.env"
)
DOTENV_OUTPUTS = _gpuci(
    "GPUCI_DOTENV_OUTPUTS",
    "GitLab: which outputs the dotenv report carries (names, comma- or space-separated; all: "
    "every one); default: the few later jobs act on.",
)
DOTENV_LIMIT = _gpuci(
    "GPUCI_DOTENV_LIMIT", "GitLab: most variables in the dotenv report (its limit).", default="20"
)
STORE = _gpuci(
    "GPUCI_STORE",
    "The cache store when no store input is given: s3://bucket/prefix or file:///dir; default "
    "the embedded local store ($RUNNER_TOOL_CACHE/gpuci/store, else ~/.cache/gpuci/store).",
)
CACHE_NAMESPACE = _gpuci(
    "GPUCI_CACHE_NAMESPACE",
    "The refs namespace cache keys live in (refs/NAMESPACE/).",
    default="default",
)
LOCAL_CACHE = _gpuci(
    "GPUCI_LOCAL_CACHE",
    "The runner-local blob tier when no local-cache input is given: a folder, on, off or auto "
    "(the default: off on runners thrown away after the job - GitHub-hosted, GitLab.com hosted, "
    "gpu-ci RunPod runner pods - else on, at $RUNNER_TOOL_CACHE/gpuci/local or "
    "~/.cache/gpuci/local).",
)
CACHE_WORKERS = _gpuci(
    "GPUCI_CACHE_WORKERS", "A fixed connection count for cache transfers; default adaptive."
)
CACHE_DIRECT_IO = _gpuci(
    "GPUCI_CACHE_DIRECT_IO", "on: restores write with O_DIRECT (off by default).", default="off"
)
MULTIPART_THRESHOLD = _gpuci(
    "GPUCI_MULTIPART_THRESHOLD",
    "Bytes (or NMiB) from which a blob is uploaded in parts; lower it for a server with a "
    "small body limit.",
    default="67108864",
)
S3_TIMEOUT = _gpuci(
    "GPUCI_S3_TIMEOUT",
    "Seconds without progress that end one S3 request; 8x it bounds resolving or refreshing AWS "
    "credentials (botocore's chain), whose STS and SSO clients use it as their socket timeout.",
    default="30",
)
S3_MIN_RATE = _gpuci(
    "GPUCI_S3_MIN_RATE",
    "Bytes a second an S3 body must keep after GPUCI_S3_TIMEOUT's grace; one range's attempts "
    "share that deadline, so a trickling store ends the step within minutes.",
    default="262144",
)
FETCH_MIN_RATE = _gpuci(
    "GPUCI_FETCH_MIN_RATE",
    "Bytes a second (or a size such as 512KiB) a retry-fetch body must keep after the timeout "
    "input's grace, when no min-rate input is given; a slower response fails its attempt "
    "(retried, resuming). 0, none or off turns the check off.",
    default="262144",
)
GPU_HEALTH_STORE = _gpuci(
    "GPUCI_GPU_HEALTH_STORE",
    "The per-GPU health record (s3:// or file://) when no health-store input is given.",
)
GPU_HEALTH_ENDPOINT_URL = _gpuci(
    "GPUCI_GPU_HEALTH_ENDPOINT_URL", "The S3 endpoint of the GPU health store."
)
NODE_NAME = _gpuci(
    "GPUCI_NODE_NAME", "This machine's name in the GPU health record; default the hostname."
)
DATA_CENTER = _gpuci("GPUCI_DATA_CENTER", "This machine's data centre in the GPU health record.")
METRICS_HISTORY = _gpuci(
    "GPUCI_METRICS_HISTORY",
    "The metrics history store (s3:// or file://) when no history input is given.",
)
METRICS_HISTORY_ENDPOINT_URL = _gpuci(
    "GPUCI_METRICS_HISTORY_ENDPOINT_URL", "The S3 endpoint of the metrics history store."
)
PODS_LEDGER = _gpuci(
    "GPUCI_PODS_LEDGER",
    "The pods ledger (s3:// or file://) when no ledger input is given; default "
    "~/.cache/gpuci/pods-ledger (this machine only).",
)
PODS_LEDGER_ENDPOINT_URL = _gpuci(
    "GPUCI_PODS_LEDGER_ENDPOINT_URL", "The S3 endpoint of the pods ledger."
)
PODS_POLL_S = _gpuci("GPUCI_PODS_POLL_S", "Seconds between polls while a pod starts.", default="5")
PODS_MAX_ATTEMPTS = _gpuci(
    "GPUCI_PODS_MAX_ATTEMPTS", "Tries of one RunPod API request (transient failures).", default="6"
)
RUNPOD_PROXY_URL = _gpuci(
    "GPUCI_RUNPOD_PROXY_URL",
    "The template of a pod's proxy URL (a test server's).",
    default="https://{pod_id}-{port}.proxy.runpod.net",
)
RUNNER_TOKEN = _gpuci(
    "GPUCI_RUNNER_TOKEN",
    "GitHub token that registers and deletes one-job runners (pods up --runner github, down, "
    "reap); masked.",
)
GITHUB_ENTERPRISE = _gpuci(
    "GPUCI_GITHUB_ENTERPRISE",
    "The GitHub enterprise (its slug) whose runner list quarantine and runners release also "
    "search for a runner by name, after the repository's and the organisation's.",
)
GITLAB_TOKEN = _gpuci(
    "GPUCI_GITLAB_TOKEN", "GitLab token (api scope) for MR notes, runners and quarantine; masked."
)

# ----- gpu-ci on a pod: set by `pods up` in the pod's environment, read by its boot scripts -----
OWNER = _pod("GPUCI_OWNER", "The pod's owner (budget and cost).")
RUN_URL = _pod("GPUCI_RUN_URL", "The CI run that made the pod.", default="local")
EXPIRES_AT = _pod("GPUCI_EXPIRES_AT", "When the pod stops itself (UTC, ISO 8601).")
EXPIRES_EPOCH = _pod(
    "GPUCI_EXPIRES_EPOCH", "The same, in epoch seconds, for the self-stop timer.", default="0"
)
WRAPPER = _pod("GPUCI_WRAPPER", "The self-stop timer's shell, which runs the start command.")
START_COMMAND = _pod("GPUCI_START_COMMAND", "The user's start command, run by the wrapper.")
RUNPOD_API_URL_ON_POD = _pod(
    "GPUCI_RUNPOD_API_URL", "The API the pod's self-stop calls.", default="https://api.runpod.io"
)
SELF_STOP_ACTION = _pod(
    "GPUCI_SELF_STOP_ACTION", "What the self-stop does: stop or terminate.", default="stop"
)
SELF_STOP_RETRY_S = _pod(
    "GPUCI_SELF_STOP_RETRY_S", "Seconds between self-stop attempts.", default="30"
)
HANDOVER_RETRY_S = _pod(
    "GPUCI_HANDOVER_RETRY_S",
    "First wait, in seconds, between tries of the smoke verdict's rename (six tries, doubling).",
    default="1",
)
POD_NAME = _pod("GPUCI_POD_NAME", "The pod's name, renamed with its verdict.", default="gpuci")
SMOKE = _pod("GPUCI_SMOKE", "1: run gpu-smoke on the pod before hand-over.")
SMOKE_PYTHON = _pod(
    "GPUCI_SMOKE_PYTHON", "The interpreter with gpu-ci on the pod.", default="python3"
)
PACKAGE = _pod(
    "GPUCI_PACKAGE",
    "Where a smoking pod whose image lacks gpu-ci pip-installs it from (a pinned URL; the GitLab "
    "pods template sets its pinned source archive). The templates' own jobs do not use it: they "
    "run the pinned source's bootstrap.sh.",
)
POD_SITE = _pod(
    "GPUCI_POD_SITE",
    "Where a pod installs GPUCI_PACKAGE for its smoke (pip --target, only for the smoke).",
    default="~/.cache/gpuci/pod-site",
)
RUNNER_PLATFORM = _pod("GPUCI_RUNNER_PLATFORM", "github or gitlab: the one-job runner to start.")
RUNNER_NAME_ON_POD = _pod("GPUCI_RUNNER_NAME", "The runner's registered name.")
RUNNER_ID = _pod("GPUCI_RUNNER_ID", "The runner's id on its platform.")
RUNNER_SCOPE = _pod("GPUCI_RUNNER_SCOPE", "repo or org: where it is registered.", default="repo")
RUNNER_JITCONFIG = _pod(
    "GPUCI_RUNNER_JITCONFIG", "GitHub's just-in-time runner config (secret; unset once read)."
)
RUNNER_IDLE_S = _pod(
    "GPUCI_RUNNER_IDLE_S", "Seconds a runner waits for its job before ending.", default="600"
)
RUNNER_REPORT_S = _pod(
    "GPUCI_RUNNER_REPORT_S", "Seconds between the runner's status reports.", default="30"
)
RUNNER_DIR = _pod("GPUCI_RUNNER_DIR", "Where the image keeps the actions runner (searched first).")
RUNNER_HOME = _pod(
    "GPUCI_RUNNER_HOME",
    "Where the runner is unpacked when the image has none.",
    default="~/gpuci-actions-runner",
)
RUNNER_RELEASE_URL = _pod(
    "GPUCI_RUNNER_RELEASE_URL",
    "Where the actions runner release is downloaded (a mirror; the sha256 still holds).",
    default="https://github.com/actions/runner/releases/download",
)
RUNNER_MAX_BYTES = _pod(
    "GPUCI_RUNNER_MAX_BYTES", "Most bytes of the runner release a pod takes.", default="1073741824"
)
ACTIONS_RUNNER_VERSION = _pod(
    "GPUCI_ACTIONS_RUNNER_VERSION", "The actions runner release to install."
)
ACTIONS_RUNNER_SHA256 = _pod("GPUCI_ACTIONS_RUNNER_SHA256", "Its tarball's sha256 (64 hex digits).")
ACTIONS_RUNNER_MIN_VERSION = _pod(
    "GPUCI_ACTIONS_RUNNER_MIN_VERSION", "The oldest runner the image may bring."
)
GITLAB_URL = _pod("GPUCI_GITLAB_URL", "The GitLab instance the runner serves.")
GITLAB_API_URL = _pod("GPUCI_GITLAB_API_URL", "Its REST API root.")
GITLAB_RUNNER_TOKEN = _pod(
    "GPUCI_GITLAB_RUNNER_TOKEN", "The GitLab runner's token (secret; unset once read)."
)
NVML_TIMEOUT = _gpuci(
    "GPUCI_NVML_TIMEOUT",
    "Seconds NVML may take to open and read every GPU (a stuck GPU or driver holds nvmlInit "
    "or a query for ever); past them gpu-setup and gpu-smoke fail with one line, exit 3.",
    default="120",
)
FAKE_NVML = _other(
    "GPUCI_FAKE_NVML",
    "Tests and demos: a fake NVML with these GPU profiles (e.g. h100-sxm,h100-sxm).",
)

# ----- GitHub Actions: set by the runner ------------------------------------------------------
GITHUB_ACTIONS = _github("GITHUB_ACTIONS", "true on a GitHub runner: GitHub output.")
GITHUB_OUTPUT = _github("GITHUB_OUTPUT", "The step's outputs file.")
GITHUB_ENV = _github("GITHUB_ENV", "The file of variables for later steps.")
GITHUB_PATH = _github("GITHUB_PATH", "The file of PATH entries for later steps.")
GITHUB_STATE = _github("GITHUB_STATE", "The step's state file.")
GITHUB_STEP_SUMMARY = _github("GITHUB_STEP_SUMMARY", "The job summary file.")
GITHUB_REPOSITORY = _github("GITHUB_REPOSITORY", "owner/name of the repository.")
GITHUB_SERVER_URL = _github(
    "GITHUB_SERVER_URL", "The GitHub server (GHES).", default="https://github.com"
)
GITHUB_API_URL = _github(
    "GITHUB_API_URL", "The REST API root (GHES).", default="https://api.github.com"
)
GITHUB_TOKEN = _github("GITHUB_TOKEN", "The job's token, where the workflow passes it (masked).")
GITHUB_RUN_ID = _github("GITHUB_RUN_ID", "The run's id (pod owner tags, provenance).")
GITHUB_RUN_ATTEMPT = _github("GITHUB_RUN_ATTEMPT", "The run's attempt.")
GITHUB_JOB = _github("GITHUB_JOB", "The job's id.")
GITHUB_SHA = _github("GITHUB_SHA", "The commit.")
GITHUB_REF = _github("GITHUB_REF", "The ref (a PR's number comes from it).")
GITHUB_EVENT_NAME = _github("GITHUB_EVENT_NAME", "The event (schedule: history).")
GITHUB_EVENT_PATH = _github("GITHUB_EVENT_PATH", "The event payload file.")
GITHUB_WORKFLOW = _github("GITHUB_WORKFLOW", "The workflow's name.")
GITHUB_WORKFLOW_REF = _github("GITHUB_WORKFLOW_REF", "The workflow file and ref.")
GITHUB_ACTOR = _github("GITHUB_ACTOR", "Who started the run (default pod owner).")
GITHUB_TRIGGERING_ACTOR = _github(
    "GITHUB_TRIGGERING_ACTOR", "Who triggered this attempt (default pod owner)."
)
RUNNER_NAME = _github("RUNNER_NAME", "The runner's name (quarantine, health).")
RUNNER_TEMP = _github("RUNNER_TEMP", "The job's temporary folder.")
RUNNER_WORKSPACE = _github(
    "RUNNER_WORKSPACE", "The runner's work folder (quarantine finds the .runner file)."
)
RUNNER_TOOL_CACHE = _github(
    "RUNNER_TOOL_CACHE", "The runner's tool cache: the local store and tier live here."
)
RUNNER_ENVIRONMENT = _github(
    "RUNNER_ENVIRONMENT", "github-hosted or self-hosted (provenance; the tier's auto policy)."
)

# ----- GitLab CI: set by the runner -----------------------------------------------------------
GITLAB_CI = _gitlab("GITLAB_CI", "true in a GitLab job: GitLab output.")
CI_API_V4_URL = _gitlab("CI_API_V4_URL", "The REST API root.")
CI_SERVER_URL = _gitlab("CI_SERVER_URL", "The GitLab server.")
CI_PROJECT_ID = _gitlab("CI_PROJECT_ID", "The project's id.")
CI_PROJECT_PATH = _gitlab("CI_PROJECT_PATH", "group/project.")
CI_PROJECT_URL = _gitlab("CI_PROJECT_URL", "The project's web URL.")
CI_JOB_TOKEN = _gitlab("CI_JOB_TOKEN", "The job's token (masked).")
CI_JOB_ID = _gitlab("CI_JOB_ID", "The job's id.")
CI_JOB_NAME = _gitlab("CI_JOB_NAME", "The job's name.")
CI_JOB_URL = _gitlab("CI_JOB_URL", "The job's web URL.")
CI_PIPELINE_ID = _gitlab("CI_PIPELINE_ID", "The pipeline's id.")
CI_PIPELINE_URL = _gitlab("CI_PIPELINE_URL", "The pipeline's web URL.")
CI_PIPELINE_SOURCE = _gitlab("CI_PIPELINE_SOURCE", "What started it (schedule).")
CI_COMMIT_SHA = _gitlab("CI_COMMIT_SHA", "The commit.")
CI_COMMIT_BRANCH = _gitlab("CI_COMMIT_BRANCH", "The branch.")
CI_COMMIT_REF_NAME = _gitlab("CI_COMMIT_REF_NAME", "The branch or tag.")
CI_DEFAULT_BRANCH = _gitlab("CI_DEFAULT_BRANCH", "The project's default branch.")
CI_MERGE_REQUEST_IID = _gitlab("CI_MERGE_REQUEST_IID", "The merge request.")
CI_RUNNER_ID = _gitlab("CI_RUNNER_ID", "The runner's id (quarantine).")
CI_RUNNER_DESCRIPTION = _gitlab("CI_RUNNER_DESCRIPTION", "The runner's description.")
CI_RUNNER_TAGS = _gitlab(
    "CI_RUNNER_TAGS", "The runner's tags (saas-* marks GitLab.com's hosted runners)."
)
CI_SERVER_HOST = _gitlab("CI_SERVER_HOST", "The GitLab server's host (gitlab.com).")
GITLAB_USER_LOGIN = _gitlab("GITLAB_USER_LOGIN", "Who started it (default owner).")

# ----- AWS and S3: the AWS conventions, read as botocore reads them ----------------------------
AWS_ACCESS_KEY_ID = _aws("AWS_ACCESS_KEY_ID", "S3 access key.")
AWS_SECRET_ACCESS_KEY = _aws("AWS_SECRET_ACCESS_KEY", "S3 secret key (masked).")
AWS_SESSION_TOKEN = _aws("AWS_SESSION_TOKEN", "Temporary credentials' token.")
AWS_SECURITY_TOKEN = _aws("AWS_SECURITY_TOKEN", "Its older name.")
AWS_PROFILE = _aws("AWS_PROFILE", "The AWS config profile.")
AWS_DEFAULT_PROFILE = _aws("AWS_DEFAULT_PROFILE", "Its older name.")
AWS_CONFIG_FILE = _aws("AWS_CONFIG_FILE", "The AWS config file.", default="~/.aws/config")
AWS_SHARED_CREDENTIALS_FILE = _aws(
    "AWS_SHARED_CREDENTIALS_FILE", "The AWS credentials file.", default="~/.aws/credentials"
)
AWS_WEB_IDENTITY_TOKEN_FILE = _aws(
    "AWS_WEB_IDENTITY_TOKEN_FILE", "OIDC token for STS (botocore resolves the role)."
)
AWS_ROLE_ARN = _aws("AWS_ROLE_ARN", "The role a web identity assumes.")
AWS_REGION = _aws("AWS_REGION", "The S3 region.")
AWS_DEFAULT_REGION = _aws("AWS_DEFAULT_REGION", "Its older name.")
AWS_ENDPOINT_URL = _aws("AWS_ENDPOINT_URL", "An S3-compatible endpoint.")
AWS_ENDPOINT_URL_S3 = _aws("AWS_ENDPOINT_URL_S3", "The same, for S3 only.")
AWS_IGNORE_CONFIGURED_ENDPOINT_URLS = _aws(
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true: ignore configured endpoints."
)
AWS_CA_BUNDLE = _aws("AWS_CA_BUNDLE", "CA certificates for the S3 endpoint.")
AWS_MAX_ATTEMPTS = _aws("AWS_MAX_ATTEMPTS", "Tries of one S3 request.")
AWS_RETRY_MODE = _aws("AWS_RETRY_MODE", "botocore's retry mode.", default="standard")
_BOTOCORE_ONLY = "Set: only botocore knows the endpoint, so the request goes through it."
AWS_USE_FIPS_ENDPOINT = _aws("AWS_USE_FIPS_ENDPOINT", _BOTOCORE_ONLY)
AWS_USE_DUALSTACK_ENDPOINT = _aws("AWS_USE_DUALSTACK_ENDPOINT", _BOTOCORE_ONLY)
AWS_S3_USE_ARN_REGION = _aws("AWS_S3_USE_ARN_REGION", _BOTOCORE_ONLY)
AWS_S3_DISABLE_MULTIREGION_ACCESS_POINTS = _aws(
    "AWS_S3_DISABLE_MULTIREGION_ACCESS_POINTS", _BOTOCORE_ONLY
)

# ----- RunPod ---------------------------------------------------------------------------------
RUNPOD_API_KEY = _runpod("RUNPOD_API_KEY", "The RunPod API key (masked).")
RUNPOD_API_URL = _runpod("RUNPOD_API_URL", "The RunPod API.", default="https://api.runpod.io")
RUNPOD_SSH_PUBLIC_KEYS = _runpod(
    "RUNPOD_SSH_PUBLIC_KEYS", "authorized_keys lines for pods up's SSH."
)
RUNPOD_SSH_PRIVATE_KEY = _runpod(
    "RUNPOD_SSH_PRIVATE_KEY", "The key pods exec connects with (masked)."
)
RUNPOD_POD_ID = _runpod("RUNPOD_POD_ID", "Set by RunPod on a pod: its id.")
RUNPOD_DC_ID = _runpod("RUNPOD_DC_ID", "Set by RunPod on a pod: its data centre.")

# ----- Other conventions ----------------------------------------------------------------------
XDG_CACHE_HOME = _other("XDG_CACHE_HOME", "Where ~/.cache is.", default="~/.cache")
HF_HOME = _other("HF_HOME", "Hugging Face's home (hub/ inside).", default="~/.cache/huggingface")
HF_HUB_CACHE = _other("HF_HUB_CACHE", "The hub cache (layout hf).")
BUILDKITE_COMMIT = _other("BUILDKITE_COMMIT", "Buildkite's commit (a manifest's producer).")
BUILDKITE_BUILD_ID = _other("BUILDKITE_BUILD_ID", "Buildkite's build (the producer's run).")
GIT_COMMIT = _other("GIT_COMMIT", "Jenkins' commit (a manifest's producer).")
BUILD_ID = _other("BUILD_ID", "Jenkins' build (the producer's run).")
CUDA_VISIBLE_DEVICES = _other(
    "CUDA_VISIBLE_DEVICES", "The GPUs this job may use (gpu-setup exports it)."
)
CUDA_DEVICE_ORDER = _other("CUDA_DEVICE_ORDER", "How CUDA numbers the GPUs.")
NVIDIA_DRIVER_CAPABILITIES = _other(
    "NVIDIA_DRIVER_CAPABILITIES", "What a container may use of the driver (smoke)."
)
DISCOURSE_API_KEY = _other("DISCOURSE_API_KEY", "notify's Discourse key (masked).")
DISCOURSE_API_USERNAME = _other(
    "DISCOURSE_API_USERNAME", "The user notify posts to Discourse as.", default="system"
)
NO_COLOR = _other("NO_COLOR", "Present: no colour in a terminal.")
SSL_CERT_FILE = _other(
    "SSL_CERT_FILE", "CA certificates for HTTPS downloads and REST (else certifi's)."
)
SSL_CERT_DIR = _other("SSL_CERT_DIR", "A folder of CA certificates, the same way.")


def markdown() -> str:
    """docs/settings.md: one table per group, in :data:`GROUPS` order."""
    out = [
        "# Settings",
        "",
        "<!-- Generated from src/gpuci/settings.py: "
        "python -m gpuci.settings > docs/settings.md -->",
        "",
        "Every environment variable gpu-ci reads, declared once in `src/gpuci/settings.py`. "
        "Inputs (`INPUT_<NAME>`, or a flag of the same name) are not listed: each command's "
        "are in its action's README.",
    ]
    for group in GROUPS:
        rows = [s for s in ALL if s.group == group]
        out += ["", f"## {group}", "", "| variable | default | meaning |", "|---|---|---|"]
        for s in rows:
            default = f"`{s.default}`" if s.default else ""
            meaning = s.meaning.replace("|", "\\|")
            out.append(f"| `{s.name}` | {default} | {meaning} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
