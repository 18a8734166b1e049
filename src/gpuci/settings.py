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
        env = os.environ if environ is None else environ
        return env.get(self.name, "").strip() or self.default

    def is_true(self, environ: Mapping[str, str] | None = None) -> bool:
        """True when the variable says ``true`` (any case), as the CI platforms write it."""
        return self.value(environ).lower() == "true"

    def is_set(self, environ: Mapping[str, str] | None = None) -> bool:
        """True when the variable is present and not blank (its value not read)."""
        env = os.environ if environ is None else environ
        return env.get(self.name, "").strip() != ""

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


def _declare(name: str, default: str, meaning: str, group: str = "gpu-ci") -> Setting:
    if group not in GROUPS:
        raise ValueError(f"{name}: unknown group {group}")
    setting = Setting(name, default, meaning, group)
    ALL.append(setting)
    return setting


# ----- gpu-ci: what a user or a workflow sets ---------------------------------------------------
DRY_RUN = _declare("GPUCI_DRY_RUN", "false", "true: every command plans only (as --dry-run).")
PROBE = _declare(
    "GPUCI_PROBE", "false", "true: a dry run may make read-only network probes (as --probe)."
)
DEBUG = _declare(
    "GPUCI_DEBUG", "", "Set: an internal error raises with its traceback instead of one line."
)
SUMMARY = _declare(
    "GPUCI_SUMMARY",
    "",
    "A file each command appends its Markdown summary to (outside GitHub's job summary).",
)
PROGRESS_INTERVAL = _declare(
    "GPUCI_PROGRESS_INTERVAL", "5", "Seconds between progress lines of long transfers."
)
JOURNAL = _declare(
    "GPUCI_JOURNAL",
    "",
    "The job journal (JSON lines the later steps read); default "
    "$RUNNER_TEMP/gpuci-journal.jsonl, else ./.gpuci/gpuci-journal.jsonl.",
)
DOTENV = _declare(
    "GPUCI_DOTENV", "gpuci-outputs.env", "GitLab: the dotenv report file outputs go to."
)
DOTENV_OUTPUTS = _declare(
    "GPUCI_DOTENV_OUTPUTS",
    "",
    "GitLab: which outputs the dotenv report carries (names, comma- or space-separated; all: "
    "every one); default: the few later jobs act on.",
)
DOTENV_LIMIT = _declare(
    "GPUCI_DOTENV_LIMIT", "20", "GitLab: most variables in the dotenv report (its limit)."
)
STORE = _declare(
    "GPUCI_STORE",
    "",
    "The cache store when no store input is given: s3://bucket/prefix or file:///dir; default "
    "the embedded local store ($RUNNER_TOOL_CACHE/gpuci/store, else ~/.cache/gpuci/store).",
)
CACHE_NAMESPACE = _declare(
    "GPUCI_CACHE_NAMESPACE", "default", "The refs namespace cache keys live in (refs/NAMESPACE/)."
)
LOCAL_CACHE = _declare(
    "GPUCI_LOCAL_CACHE",
    "",
    "The runner-local blob tier when no local-cache input is given: a folder, on, off or auto "
    "(the default: off on runners thrown away after the job - GitHub-hosted, GitLab.com hosted, "
    "gpu-ci RunPod runner pods - else on, at $RUNNER_TOOL_CACHE/gpuci/local or "
    "~/.cache/gpuci/local).",
)
CACHE_WORKERS = _declare(
    "GPUCI_CACHE_WORKERS", "", "A fixed connection count for cache transfers; default adaptive."
)
CACHE_DIRECT_IO = _declare(
    "GPUCI_CACHE_DIRECT_IO", "off", "on: restores write with O_DIRECT (off by default)."
)
MULTIPART_THRESHOLD = _declare(
    "GPUCI_MULTIPART_THRESHOLD",
    "67108864",
    "Bytes (or NMiB) from which a blob is uploaded in parts; lower it for a server with a "
    "small body limit.",
)
S3_TIMEOUT = _declare(
    "GPUCI_S3_TIMEOUT",
    "30",
    "Seconds without progress that end one S3 request; 8x it bounds resolving or refreshing AWS "
    "credentials (botocore's chain), whose STS and SSO clients use it as their socket timeout.",
)
S3_MIN_RATE = _declare(
    "GPUCI_S3_MIN_RATE",
    "262144",
    "Bytes a second an S3 body must keep after GPUCI_S3_TIMEOUT's grace; one range's attempts "
    "share that deadline, so a trickling store ends the step within minutes.",
)
FETCH_MIN_RATE = _declare(
    "GPUCI_FETCH_MIN_RATE",
    "262144",
    "Bytes a second (or a size such as 512KiB) a retry-fetch body must keep after the timeout "
    "input's grace, when no min-rate input is given; a slower response fails its attempt "
    "(retried, resuming). 0, none or off turns the check off.",
)
GPU_HEALTH_STORE = _declare(
    "GPUCI_GPU_HEALTH_STORE",
    "",
    "The per-GPU health record (s3:// or file://) when no health-store input is given.",
)
GPU_HEALTH_ENDPOINT_URL = _declare(
    "GPUCI_GPU_HEALTH_ENDPOINT_URL", "", "The S3 endpoint of the GPU health store."
)
NODE_NAME = _declare(
    "GPUCI_NODE_NAME", "", "This machine's name in the GPU health record; default the hostname."
)
DATA_CENTER = _declare(
    "GPUCI_DATA_CENTER", "", "This machine's data centre in the GPU health record."
)
METRICS_HISTORY = _declare(
    "GPUCI_METRICS_HISTORY",
    "",
    "The metrics history store (s3:// or file://) when no history input is given.",
)
METRICS_HISTORY_ENDPOINT_URL = _declare(
    "GPUCI_METRICS_HISTORY_ENDPOINT_URL", "", "The S3 endpoint of the metrics history store."
)
PODS_LEDGER = _declare(
    "GPUCI_PODS_LEDGER",
    "",
    "The pods ledger (s3:// or file://) when no ledger input is given; default "
    "~/.cache/gpuci/pods-ledger (this machine only).",
)
PODS_LEDGER_ENDPOINT_URL = _declare(
    "GPUCI_PODS_LEDGER_ENDPOINT_URL", "", "The S3 endpoint of the pods ledger."
)
PODS_POLL_S = _declare("GPUCI_PODS_POLL_S", "5", "Seconds between polls while a pod starts.")
PODS_MAX_ATTEMPTS = _declare(
    "GPUCI_PODS_MAX_ATTEMPTS", "6", "Tries of one RunPod API request (transient failures)."
)
RUNPOD_PROXY_URL = _declare(
    "GPUCI_RUNPOD_PROXY_URL",
    "https://{pod_id}-{port}.proxy.runpod.net",
    "The template of a pod's proxy URL (a test server's).",
)
RUNNER_TOKEN = _declare(
    "GPUCI_RUNNER_TOKEN",
    "",
    "GitHub token that registers and deletes one-job runners (pods up --runner github, down, "
    "reap); masked.",
)
GITHUB_ENTERPRISE = _declare(
    "GPUCI_GITHUB_ENTERPRISE",
    "",
    "The GitHub enterprise (its slug) whose runner list quarantine and runners release also "
    "search for a runner by name, after the repository's and the organisation's.",
)
GITLAB_TOKEN = _declare(
    "GPUCI_GITLAB_TOKEN",
    "",
    "GitLab token (api scope) for MR notes, runners and quarantine; masked.",
)

# ----- gpu-ci on a pod: set by `pods up` in the pod's environment, read by its boot scripts -----
_POD = "gpu-ci on a pod"
OWNER = _declare("GPUCI_OWNER", "", "The pod's owner (budget and cost).", _POD)
RUN_URL = _declare("GPUCI_RUN_URL", "local", "The CI run that made the pod.", _POD)
EXPIRES_AT = _declare("GPUCI_EXPIRES_AT", "", "When the pod stops itself (UTC, ISO 8601).", _POD)
EXPIRES_EPOCH = _declare(
    "GPUCI_EXPIRES_EPOCH", "0", "The same, in epoch seconds, for the self-stop timer.", _POD
)
WRAPPER = _declare(
    "GPUCI_WRAPPER", "", "The self-stop timer's shell, which runs the start command.", _POD
)
START_COMMAND = _declare(
    "GPUCI_START_COMMAND", "", "The user's start command, run by the wrapper.", _POD
)
RUNPOD_API_URL_ON_POD = _declare(
    "GPUCI_RUNPOD_API_URL",
    "https://api.runpod.io",
    "The API the pod's self-stop calls.",
    _POD,
)
SELF_STOP_ACTION = _declare(
    "GPUCI_SELF_STOP_ACTION", "stop", "What the self-stop does: stop or terminate.", _POD
)
SELF_STOP_RETRY_S = _declare(
    "GPUCI_SELF_STOP_RETRY_S", "30", "Seconds between self-stop attempts.", _POD
)
HANDOVER_RETRY_S = _declare(
    "GPUCI_HANDOVER_RETRY_S",
    "1",
    "First wait, in seconds, between tries of the smoke verdict's rename (six tries, doubling).",
    _POD,
)
POD_NAME = _declare("GPUCI_POD_NAME", "gpuci", "The pod's name, renamed with its verdict.", _POD)
SMOKE = _declare("GPUCI_SMOKE", "", "1: run gpu-smoke on the pod before hand-over.", _POD)
SMOKE_PYTHON = _declare(
    "GPUCI_SMOKE_PYTHON", "python3", "The interpreter with gpu-ci on the pod.", _POD
)
PACKAGE = _declare(
    "GPUCI_PACKAGE",
    "",
    "Where a smoking pod whose image lacks gpu-ci pip-installs it from (a pinned URL; the GitLab "
    "pods template sets its pinned source archive). The templates' own jobs do not use it: they "
    "run the pinned source's bootstrap.sh.",
    _POD,
)
POD_SITE = _declare(
    "GPUCI_POD_SITE",
    "~/.cache/gpuci/pod-site",
    "Where a pod installs GPUCI_PACKAGE for its smoke (pip --target, only for the smoke).",
    _POD,
)
RUNNER_PLATFORM = _declare(
    "GPUCI_RUNNER_PLATFORM", "", "github or gitlab: the one-job runner to start.", _POD
)
RUNNER_NAME_ON_POD = _declare("GPUCI_RUNNER_NAME", "", "The runner's registered name.", _POD)
RUNNER_ID = _declare("GPUCI_RUNNER_ID", "", "The runner's id on its platform.", _POD)
RUNNER_SCOPE = _declare("GPUCI_RUNNER_SCOPE", "repo", "repo or org: where it is registered.", _POD)
RUNNER_JITCONFIG = _declare(
    "GPUCI_RUNNER_JITCONFIG",
    "",
    "GitHub's just-in-time runner config (secret; unset once read).",
    _POD,
)
RUNNER_IDLE_S = _declare(
    "GPUCI_RUNNER_IDLE_S", "600", "Seconds a runner waits for its job before ending.", _POD
)
RUNNER_REPORT_S = _declare(
    "GPUCI_RUNNER_REPORT_S", "30", "Seconds between the runner's status reports.", _POD
)
RUNNER_DIR = _declare(
    "GPUCI_RUNNER_DIR", "", "Where the image keeps the actions runner (searched first).", _POD
)
RUNNER_HOME = _declare(
    "GPUCI_RUNNER_HOME",
    "~/gpuci-actions-runner",
    "Where the runner is unpacked when the image has none.",
    _POD,
)
RUNNER_RELEASE_URL = _declare(
    "GPUCI_RUNNER_RELEASE_URL",
    "https://github.com/actions/runner/releases/download",
    "Where the actions runner release is downloaded (a mirror; the sha256 still holds).",
    _POD,
)
RUNNER_MAX_BYTES = _declare(
    "GPUCI_RUNNER_MAX_BYTES", "1073741824", "Most bytes of the runner release a pod takes.", _POD
)
ACTIONS_RUNNER_VERSION = _declare(
    "GPUCI_ACTIONS_RUNNER_VERSION", "", "The actions runner release to install.", _POD
)
ACTIONS_RUNNER_SHA256 = _declare(
    "GPUCI_ACTIONS_RUNNER_SHA256", "", "Its tarball's sha256 (64 hex digits).", _POD
)
ACTIONS_RUNNER_MIN_VERSION = _declare(
    "GPUCI_ACTIONS_RUNNER_MIN_VERSION", "", "The oldest runner the image may bring.", _POD
)
GITLAB_URL = _declare("GPUCI_GITLAB_URL", "", "The GitLab instance the runner serves.", _POD)
GITLAB_API_URL = _declare("GPUCI_GITLAB_API_URL", "", "Its REST API root.", _POD)
GITLAB_RUNNER_TOKEN = _declare(
    "GPUCI_GITLAB_RUNNER_TOKEN", "", "The GitLab runner's token (secret; unset once read).", _POD
)
NVML_TIMEOUT = _declare(
    "GPUCI_NVML_TIMEOUT",
    "120",
    "Seconds NVML may take to open and read every GPU (a stuck GPU or driver holds nvmlInit "
    "or a query for ever); past them gpu-setup and gpu-smoke fail with one line, exit 3.",
)
FAKE_NVML = _declare(
    "GPUCI_FAKE_NVML",
    "",
    "Tests and demos: a fake NVML with these GPU profiles (e.g. h100-sxm,h100-sxm).",
    "Other",
)

# ----- GitHub Actions: set by the runner ------------------------------------------------------
_GH = "GitHub Actions"
GITHUB_ACTIONS = _declare("GITHUB_ACTIONS", "", "true on a GitHub runner: GitHub output.", _GH)
GITHUB_OUTPUT = _declare("GITHUB_OUTPUT", "", "The step's outputs file.", _GH)
GITHUB_ENV = _declare("GITHUB_ENV", "", "The file of variables for later steps.", _GH)
GITHUB_PATH = _declare("GITHUB_PATH", "", "The file of PATH entries for later steps.", _GH)
GITHUB_STATE = _declare("GITHUB_STATE", "", "The step's state file.", _GH)
GITHUB_STEP_SUMMARY = _declare("GITHUB_STEP_SUMMARY", "", "The job summary file.", _GH)
GITHUB_REPOSITORY = _declare("GITHUB_REPOSITORY", "", "owner/name of the repository.", _GH)
GITHUB_SERVER_URL = _declare(
    "GITHUB_SERVER_URL", "https://github.com", "The GitHub server (GHES).", _GH
)
GITHUB_API_URL = _declare(
    "GITHUB_API_URL", "https://api.github.com", "The REST API root (GHES).", _GH
)
GITHUB_TOKEN = _declare(
    "GITHUB_TOKEN", "", "The job's token, where the workflow passes it (masked).", _GH
)
GITHUB_RUN_ID = _declare("GITHUB_RUN_ID", "", "The run's id (pod owner tags, provenance).", _GH)
GITHUB_RUN_ATTEMPT = _declare("GITHUB_RUN_ATTEMPT", "", "The run's attempt.", _GH)
GITHUB_JOB = _declare("GITHUB_JOB", "", "The job's id.", _GH)
GITHUB_SHA = _declare("GITHUB_SHA", "", "The commit.", _GH)
GITHUB_REF = _declare("GITHUB_REF", "", "The ref (a PR's number comes from it).", _GH)
GITHUB_EVENT_NAME = _declare("GITHUB_EVENT_NAME", "", "The event (schedule: history).", _GH)
GITHUB_EVENT_PATH = _declare("GITHUB_EVENT_PATH", "", "The event payload file.", _GH)
GITHUB_WORKFLOW = _declare("GITHUB_WORKFLOW", "", "The workflow's name.", _GH)
GITHUB_WORKFLOW_REF = _declare("GITHUB_WORKFLOW_REF", "", "The workflow file and ref.", _GH)
GITHUB_ACTOR = _declare("GITHUB_ACTOR", "", "Who started the run (default pod owner).", _GH)
GITHUB_TRIGGERING_ACTOR = _declare(
    "GITHUB_TRIGGERING_ACTOR", "", "Who triggered this attempt (default pod owner).", _GH
)
RUNNER_NAME = _declare("RUNNER_NAME", "", "The runner's name (quarantine, health).", _GH)
RUNNER_TEMP = _declare("RUNNER_TEMP", "", "The job's temporary folder.", _GH)
RUNNER_WORKSPACE = _declare(
    "RUNNER_WORKSPACE", "", "The runner's work folder (quarantine finds the .runner file).", _GH
)
RUNNER_TOOL_CACHE = _declare(
    "RUNNER_TOOL_CACHE", "", "The runner's tool cache: the local store and tier live here.", _GH
)
RUNNER_ENVIRONMENT = _declare(
    "RUNNER_ENVIRONMENT",
    "",
    "github-hosted or self-hosted (provenance; the tier's auto policy).",
    _GH,
)

# ----- GitLab CI: set by the runner -----------------------------------------------------------
_GL = "GitLab CI"
GITLAB_CI = _declare("GITLAB_CI", "", "true in a GitLab job: GitLab output.", _GL)
CI_API_V4_URL = _declare("CI_API_V4_URL", "", "The REST API root.", _GL)
CI_SERVER_URL = _declare("CI_SERVER_URL", "", "The GitLab server.", _GL)
CI_PROJECT_ID = _declare("CI_PROJECT_ID", "", "The project's id.", _GL)
CI_PROJECT_PATH = _declare("CI_PROJECT_PATH", "", "group/project.", _GL)
CI_PROJECT_URL = _declare("CI_PROJECT_URL", "", "The project's web URL.", _GL)
CI_JOB_TOKEN = _declare("CI_JOB_TOKEN", "", "The job's token (masked).", _GL)
CI_JOB_ID = _declare("CI_JOB_ID", "", "The job's id.", _GL)
CI_JOB_NAME = _declare("CI_JOB_NAME", "", "The job's name.", _GL)
CI_JOB_URL = _declare("CI_JOB_URL", "", "The job's web URL.", _GL)
CI_PIPELINE_ID = _declare("CI_PIPELINE_ID", "", "The pipeline's id.", _GL)
CI_PIPELINE_URL = _declare("CI_PIPELINE_URL", "", "The pipeline's web URL.", _GL)
CI_PIPELINE_SOURCE = _declare("CI_PIPELINE_SOURCE", "", "What started it (schedule).", _GL)
CI_COMMIT_SHA = _declare("CI_COMMIT_SHA", "", "The commit.", _GL)
CI_COMMIT_BRANCH = _declare("CI_COMMIT_BRANCH", "", "The branch.", _GL)
CI_COMMIT_REF_NAME = _declare("CI_COMMIT_REF_NAME", "", "The branch or tag.", _GL)
CI_DEFAULT_BRANCH = _declare("CI_DEFAULT_BRANCH", "", "The project's default branch.", _GL)
CI_MERGE_REQUEST_IID = _declare("CI_MERGE_REQUEST_IID", "", "The merge request.", _GL)
CI_RUNNER_ID = _declare("CI_RUNNER_ID", "", "The runner's id (quarantine).", _GL)
CI_RUNNER_DESCRIPTION = _declare("CI_RUNNER_DESCRIPTION", "", "The runner's description.", _GL)
CI_RUNNER_TAGS = _declare(
    "CI_RUNNER_TAGS", "", "The runner's tags (saas-* marks GitLab.com's hosted runners).", _GL
)
CI_SERVER_HOST = _declare("CI_SERVER_HOST", "", "The GitLab server's host (gitlab.com).", _GL)
GITLAB_USER_LOGIN = _declare("GITLAB_USER_LOGIN", "", "Who started it (default owner).", _GL)

# ----- AWS and S3: the AWS conventions, read as botocore reads them ----------------------------
_AWS = "AWS and S3"
AWS_ACCESS_KEY_ID = _declare("AWS_ACCESS_KEY_ID", "", "S3 access key.", _AWS)
AWS_SECRET_ACCESS_KEY = _declare("AWS_SECRET_ACCESS_KEY", "", "S3 secret key (masked).", _AWS)
AWS_SESSION_TOKEN = _declare("AWS_SESSION_TOKEN", "", "Temporary credentials' token.", _AWS)
AWS_SECURITY_TOKEN = _declare("AWS_SECURITY_TOKEN", "", "Its older name.", _AWS)
AWS_PROFILE = _declare("AWS_PROFILE", "", "The AWS config profile.", _AWS)
AWS_DEFAULT_PROFILE = _declare("AWS_DEFAULT_PROFILE", "", "Its older name.", _AWS)
AWS_CONFIG_FILE = _declare("AWS_CONFIG_FILE", "~/.aws/config", "The AWS config file.", _AWS)
AWS_SHARED_CREDENTIALS_FILE = _declare(
    "AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials", "The AWS credentials file.", _AWS
)
AWS_WEB_IDENTITY_TOKEN_FILE = _declare(
    "AWS_WEB_IDENTITY_TOKEN_FILE", "", "OIDC token for STS (botocore resolves the role).", _AWS
)
AWS_ROLE_ARN = _declare("AWS_ROLE_ARN", "", "The role a web identity assumes.", _AWS)
AWS_REGION = _declare("AWS_REGION", "", "The S3 region.", _AWS)
AWS_DEFAULT_REGION = _declare("AWS_DEFAULT_REGION", "", "Its older name.", _AWS)
AWS_ENDPOINT_URL = _declare("AWS_ENDPOINT_URL", "", "An S3-compatible endpoint.", _AWS)
AWS_ENDPOINT_URL_S3 = _declare("AWS_ENDPOINT_URL_S3", "", "The same, for S3 only.", _AWS)
AWS_IGNORE_CONFIGURED_ENDPOINT_URLS = _declare(
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "", "true: ignore configured endpoints.", _AWS
)
AWS_CA_BUNDLE = _declare("AWS_CA_BUNDLE", "", "CA certificates for the S3 endpoint.", _AWS)
AWS_MAX_ATTEMPTS = _declare("AWS_MAX_ATTEMPTS", "", "Tries of one S3 request.", _AWS)
AWS_RETRY_MODE = _declare("AWS_RETRY_MODE", "standard", "botocore's retry mode.", _AWS)
_BOTOCORE_ONLY = "Set: only botocore knows the endpoint, so the request goes through it."
AWS_USE_FIPS_ENDPOINT = _declare("AWS_USE_FIPS_ENDPOINT", "", _BOTOCORE_ONLY, _AWS)
AWS_USE_DUALSTACK_ENDPOINT = _declare("AWS_USE_DUALSTACK_ENDPOINT", "", _BOTOCORE_ONLY, _AWS)
AWS_S3_USE_ARN_REGION = _declare("AWS_S3_USE_ARN_REGION", "", _BOTOCORE_ONLY, _AWS)
AWS_S3_DISABLE_MULTIREGION_ACCESS_POINTS = _declare(
    "AWS_S3_DISABLE_MULTIREGION_ACCESS_POINTS", "", _BOTOCORE_ONLY, _AWS
)

# ----- RunPod ---------------------------------------------------------------------------------
_RP = "RunPod"
RUNPOD_API_KEY = _declare("RUNPOD_API_KEY", "", "The RunPod API key (masked).", _RP)
RUNPOD_API_URL = _declare("RUNPOD_API_URL", "https://api.runpod.io", "The RunPod API.", _RP)
RUNPOD_SSH_PUBLIC_KEYS = _declare(
    "RUNPOD_SSH_PUBLIC_KEYS", "", "authorized_keys lines for pods up's SSH.", _RP
)
RUNPOD_SSH_PRIVATE_KEY = _declare(
    "RUNPOD_SSH_PRIVATE_KEY", "", "The key pods exec connects with (masked).", _RP
)
RUNPOD_POD_ID = _declare("RUNPOD_POD_ID", "", "Set by RunPod on a pod: its id.", _RP)
RUNPOD_DC_ID = _declare("RUNPOD_DC_ID", "", "Set by RunPod on a pod: its data centre.", _RP)

# ----- Other conventions ----------------------------------------------------------------------
_O = "Other"
XDG_CACHE_HOME = _declare("XDG_CACHE_HOME", "~/.cache", "Where ~/.cache is.", _O)
HF_HOME = _declare("HF_HOME", "~/.cache/huggingface", "Hugging Face's home (hub/ inside).", _O)
HF_HUB_CACHE = _declare("HF_HUB_CACHE", "", "The hub cache (layout hf).", _O)
BUILDKITE_COMMIT = _declare(
    "BUILDKITE_COMMIT", "", "Buildkite's commit (a manifest's producer).", _O
)
BUILDKITE_BUILD_ID = _declare(
    "BUILDKITE_BUILD_ID", "", "Buildkite's build (the producer's run).", _O
)
GIT_COMMIT = _declare("GIT_COMMIT", "", "Jenkins' commit (a manifest's producer).", _O)
BUILD_ID = _declare("BUILD_ID", "", "Jenkins' build (the producer's run).", _O)
CUDA_VISIBLE_DEVICES = _declare(
    "CUDA_VISIBLE_DEVICES", "", "The GPUs this job may use (gpu-setup exports it).", _O
)
CUDA_DEVICE_ORDER = _declare("CUDA_DEVICE_ORDER", "", "How CUDA numbers the GPUs.", _O)
NVIDIA_DRIVER_CAPABILITIES = _declare(
    "NVIDIA_DRIVER_CAPABILITIES", "", "What a container may use of the driver (smoke).", _O
)
DISCOURSE_API_KEY = _declare("DISCOURSE_API_KEY", "", "notify's Discourse key (masked).", _O)
DISCOURSE_API_USERNAME = _declare(
    "DISCOURSE_API_USERNAME", "system", "The user notify posts to Discourse as.", _O
)
NO_COLOR = _declare("NO_COLOR", "", "Present: no colour in a terminal.", _O)
SSL_CERT_FILE = _declare(
    "SSL_CERT_FILE", "", "CA certificates for HTTPS downloads and REST (else certifi's).", _O
)
SSL_CERT_DIR = _declare("SSL_CERT_DIR", "", "A folder of CA certificates, the same way.", _O)


def by_name() -> dict[str, Setting]:
    """Every declared setting, by variable name."""
    return {s.name: s for s in ALL}


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
