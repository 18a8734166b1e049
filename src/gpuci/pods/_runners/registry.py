"""Just-in-time CI runners on pods: register one with GitHub or GitLab, and clean up after.

A runner pod takes exactly one job: GitHub's just-in-time configuration (``run.sh
--jitconfig``) de-registers itself after one job; GitLab's ``run-single --max-builds 1``
exits after one and the pod deletes its own runner. The registration is made here, in CI,
with an admin token that never leaves CI; the pod receives only the one-runner credential
(the JIT configuration or the ``glrt-`` token), in its create request's env, masked here the
moment it arrives.

Runners and pods are matched by name: a runner is named ``gpuci-<nonce>-<epoch>`` from its
pod's tag nonce and the registration time, and the pod carries that name (and the runner's
id and scope) in its env. ``down``/``reap`` delete gpu-ci runners whose pod is gone (once
older than ``ORPHAN_GRACE_S``: the runner is registered before its pod is placed) and
terminate runner pods whose runner is gone (its one job is over, or it was deleted).

The platform calls are in ``gpuci.pods._runners.api``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuci import settings
from gpuci.errors import GpuciError, InputError
from gpuci.pods._runners import labels as run_labels
from gpuci.pods._runners.api import (
    GITHUB_TOKEN_HELP,
    GITHUB_TOKEN_MAKE,
    GITLAB_TOKEN_HELP,
    GitHubRunners,
    GitLabRunners,
    Listed,
)
from gpuci.pods._runpod.naming import PodTag
from gpuci.pods.options import UpInputs

PLATFORMS = ("github", "gitlab")
# CUDA 12.4 devel + Python 3.11 + PyTorch, root, curl and coreutils (sha256sum, tar): what the
# gpu-ci actions and a training job need, the image the pod examples already use (cached on
# many RunPod hosts, so it starts fast). No actions runner inside: the start script installs
# the pinned release (gpuci.pods._runners.boot) or finds one baked into a custom image.
DEFAULT_IMAGE = "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04"

NAME_PREFIX = "gpuci-"
_NAME = re.compile(r"^gpuci-[0-9a-f]{6}-(\d{9,11})$")
# A runner without a pod is garbage only once its pod can no longer be on its way: up
# registers first, then walks the candidates (placement-timeout, default 10m) and creates.
ORPHAN_GRACE_S = 30 * 60

# The pod's env: public facts (shown in plans) and the one credential (never shown).
ENV_PLATFORM = settings.RUNNER_PLATFORM.name
ENV_NAME = settings.RUNNER_NAME_ON_POD.name
ENV_ID = settings.RUNNER_ID.name
ENV_SCOPE = settings.RUNNER_SCOPE.name
ENV_IDLE_S = settings.RUNNER_IDLE_S.name
ENV_JITCONFIG = settings.RUNNER_JITCONFIG.name
ENV_GITLAB_RUNNER_TOKEN = settings.GITLAB_RUNNER_TOKEN.name
ENV_GITLAB_URL = settings.GITLAB_URL.name
ENV_GITLAB_API_URL = settings.GITLAB_API_URL.name
SECRET_ENV = (ENV_JITCONFIG, ENV_GITLAB_RUNNER_TOKEN)
PLACEHOLDER = {
    ENV_JITCONFIG: "<encoded_jit_config from GitHub: made at run time, masked>",
    ENV_GITLAB_RUNNER_TOKEN: "<glrt- token from GitLab: made at run time, masked>",
}


def runner_name(tag: PodTag, now: float) -> str:
    """The runner's name: its pod's tag nonce and the registration time."""
    return f"{NAME_PREFIX}{tag.nonce}-{int(now)}"


def registered_at(name: str) -> float | None:
    """When a gpu-ci runner was registered (from its name); None for other runners."""
    m = _NAME.match(name)
    return float(m.group(1)) if m else None


@dataclass
class Registration:
    """A runner made for one pod: its name and id, and the env the pod needs to run it."""

    name: str
    runner_id: int | None
    env: dict[str, str] = field(repr=False)  # holds the credential: never printed


@dataclass
class Target:
    """Where runners are registered: the platform, its API, the scope and the admin token."""

    platform: str
    api_url: str
    scope: str  # "repo:owner/name", "org:owner" or "project:ID"
    token: str = field(default="", repr=False)
    server_url: str = ""  # GitLab: what gitlab-runner connects to

    def client(self, **kwargs: Any) -> GitHubRunners | GitLabRunners:
        """The platform's runner client; ``kwargs`` bound it (``timeout``, ``attempts``)."""
        cls = GitHubRunners if self.platform == "github" else GitLabRunners
        return cls(self.api_url, self.token, self.scope, **kwargs)


def target(
    platform: str,
    environ: Mapping[str, str],
    mask: Callable[[str | None], None],
    scope: str = "repo",
    need_token: bool = True,
) -> Target:
    """The registration target from the CI's env; bad or missing settings: exit 2, one line."""
    if platform == "github":
        token = settings.RUNNER_TOKEN.value(environ)
        job_token = settings.GITHUB_TOKEN.value(environ)
        mask(token)
        mask(job_token)
        if need_token and not token:
            if job_token:
                raise InputError(f"{settings.RUNNER_TOKEN.name} is not set; " + GITHUB_TOKEN_HELP)
            raise InputError(f"{settings.RUNNER_TOKEN.name} is not set", hint=GITHUB_TOKEN_MAKE)
        if token and token == job_token:
            raise InputError(
                f"{settings.RUNNER_TOKEN.name} is the job's GITHUB_TOKEN; " + GITHUB_TOKEN_HELP
            )
        repository = settings.GITHUB_REPOSITORY.value(environ)
        if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repository):
            raise InputError(
                "GITHUB_REPOSITORY is not set (owner/name)",
                hint="run inside GitHub Actions or set GITHUB_REPOSITORY=owner/name",
            )
        where = f"org:{repository.split('/')[0]}" if scope == "org" else f"repo:{repository}"
        api = settings.GITHUB_API_URL.value(environ)
        return Target("github", api.rstrip("/"), where, token)
    token = settings.GITLAB_TOKEN.value(environ)
    mask(token)
    mask(settings.CI_JOB_TOKEN.raw(environ))
    if need_token and not token:
        raise InputError(f"{settings.GITLAB_TOKEN.name} is not set", hint=GITLAB_TOKEN_HELP)
    if token and token == settings.CI_JOB_TOKEN.value(environ):
        raise InputError(
            f"{settings.GITLAB_TOKEN.name} is the job's CI_JOB_TOKEN; " + GITLAB_TOKEN_HELP
        )
    api = settings.CI_API_V4_URL.value(environ)
    server = settings.CI_SERVER_URL.value(environ).rstrip("/")
    if not api and server:
        api = server + "/api/v4"
    if not api:
        raise InputError(
            "CI_API_V4_URL is not set", hint="run inside GitLab CI or set CI_API_V4_URL"
        )
    api = api.rstrip("/")
    if not server:
        server = api[: -len("/api/v4")] if api.endswith("/api/v4") else api
    project = settings.CI_PROJECT_ID.value(environ)
    if not project:
        raise InputError(
            "CI_PROJECT_ID is not set", hint="run inside GitLab CI or set CI_PROJECT_ID"
        )
    return Target("gitlab", api, f"project:{project}", token, server)


def pod_env(
    tgt: Target, name: str, runner_id: int | None, credential: str, idle_s: float
) -> dict[str, str]:
    """What the start script reads (gpuci.pods._runners.boot): public facts and one credential."""
    env = {
        ENV_PLATFORM: tgt.platform,
        ENV_NAME: name,
        ENV_ID: "" if runner_id is None else str(runner_id),
        ENV_SCOPE: tgt.scope,
        ENV_IDLE_S: str(max(1, int(idle_s))),
        settings.SELF_STOP_ACTION.name: "terminate",  # a stopped runner pod is of no use to anyone
    }
    if tgt.platform == "github":
        env[ENV_JITCONFIG] = credential
    else:
        env.update(
            {
                ENV_GITLAB_RUNNER_TOKEN: credential,
                ENV_GITLAB_URL: tgt.server_url,
                ENV_GITLAB_API_URL: tgt.api_url,
            }
        )
    return env


def register(
    tgt: Target,
    name: str,
    labels: Sequence[str],
    group_id: int,
    idle_s: float,
    mask: Callable[[str | None], None],
) -> Registration:
    """Register the runner; its credential is masked before anything else happens.

    Raises:
        InputError: another gpu-ci runner already has one of ``labels`` (GitHub); the new
            one is deleted first.
    """
    with tgt.client() as client:
        credential, runner_id = client.register(name, labels, group_id)
        mask(credential)
        if tgt.platform == "github":  # after: a refused token reads nothing (and says why)
            try:
                _refuse_taken(client.listed(), name, labels)
            except InputError:
                client.delete(runner_id)
                raise
            except GpuciError:  # the listing is a check, not a step: its failure blocks nothing
                pass
    return Registration(name, runner_id, pod_env(tgt, name, runner_id, credential, idle_s))


def unregister(tgt: Target, name: str, runner_id: int | None, **bound: Any) -> str:
    """Delete the runner by id, or by name when the id never came back (a lost answer);
    ``bound`` limits each call (a cancelled job's cleanup: ``timeout``, ``attempts``)."""
    with tgt.client(**bound) as client:
        if runner_id is None:
            found = [r for r in client.listed() if r.name == name]
            if not found:
                return "not registered"
            runner_id = found[0].runner_id
        return "deleted" if client.delete(runner_id) else "already gone"


def _refuse_taken(listed: Sequence[Any], name: str, labels: Sequence[str]) -> None:
    """Two ``up``s of one run (matrix legs) with the same labels would take each other's
    runner: GitHub gives a job to any runner with all its labels. Refused before any pod."""
    wanted = {label.lower() for label in labels}
    for other in listed:
        shared = sorted(lb for lb in other.labels if lb.lower() in wanted)
        if other.name != name and other.name.startswith(NAME_PREFIX) and shared:
            raise InputError(
                f"runner-labels {', '.join(shared)} are already on runner {other.name} (another "
                "leg of this run?): either job could take either runner",
                hint="give each up labels of its own and route its job by them, e.g. "
                "runner-labels: run-${{ github.run_id }}-${{ strategy.job-index }}; a runner "
                "an earlier attempt left behind goes with pods down or reap",
            )


def scope_of(pod: Mapping[str, Any]) -> tuple[str, str, str, int | None] | None:
    """``(platform, scope, runner name, runner id)`` of a runner pod, else None."""
    env = pod.get("env") or {}
    platform, name = env.get(ENV_PLATFORM), env.get(ENV_NAME)
    if platform not in PLATFORMS or not isinstance(name, str) or not name:
        return None
    rid = str(env.get(ENV_ID) or "")  # RunPod's answer: "²" is isdigit() but no int()
    ok = rid.isascii() and rid.isdigit()
    return platform, str(env.get(ENV_SCOPE) or ""), name, int(rid) if ok else None


@dataclass
class Sweep:
    """What ``down``/``reap`` found: runners whose pod is gone, pods whose runner is gone."""

    orphan_runners: list[Listed] = field(default_factory=list)
    runnerless_pods: list[str] = field(default_factory=list)


def sweep(
    tgt: Target,
    pods: Sequence[Mapping[str, Any]],
    listed: Sequence[Listed],
    now: float,
    ours: Collection[str] = (),
) -> Sweep:
    """Match this target's gpu-ci runners with the pods that carry their names.

    ``pods`` must be listed before ``listed``: a pod's runner is registered before the pod,
    so a pod whose name is missing from the later runner list has lost its runner for good.
    A runner named in ``ours`` (this CI run's, from the ledger: its pod was created, so it is
    not on its way) needs no grace.
    """
    here = [(p, s) for p in pods if (s := scope_of(p)) and s[:2] == (tgt.platform, tgt.scope)]
    on_pods = {s[2] for _, s in here}
    names = {r.name for r in listed}
    out = Sweep()
    for runner in listed:
        born = registered_at(runner.name)
        if born is None or runner.name in on_pods:
            continue
        if now - born >= ORPHAN_GRACE_S or runner.name in ours:
            out.orphan_runners.append(runner)
    out.runnerless_pods = [str(p["id"]) for p, s in here if s[2] not in names]
    return out


def targets_for_cleanup(
    environ: Mapping[str, str], mask: Callable[[str | None], None], scope: str
) -> tuple[list[Target], list[str]]:
    """The platforms ``down``/``reap`` can clean (their admin token is set), and why not."""
    out, why = [], []
    for platform, token in (("github", settings.RUNNER_TOKEN), ("gitlab", settings.GITLAB_TOKEN)):
        if not token.is_set(environ):
            why.append(f"{platform}: {token.name} is not set")
            continue
        try:
            out.append(target(platform, environ, mask, scope))
        except GpuciError as exc:
            why.append(f"{platform}: {exc.message}")
    return out, why


@dataclass
class Request:
    """One ``up --runner``: what to register, and the registration once it exists."""

    target: Target
    name: str
    labels: list[str]
    group_id: int
    idle_s: float
    registration: Registration | None = None
    notes: list[str] = field(default_factory=list)  # dry-run warnings (no token here, ...)
    warnings: list[str] = field(default_factory=list)  # for the result (a shared label)
    attempted: bool = False  # a registration was asked for and not refused

    @classmethod
    def from_inputs(
        cls,
        inp: UpInputs,
        environ: Mapping[str, str],
        mask: Callable[[str | None], None],
        tag: PodTag,
        now: float,
        dry_run: bool,
    ) -> Request | None:
        """None without ``runner``; bad combinations are exit 2 before anything is made."""
        platform = inp.runner
        if not platform:
            return None
        labels = [label.strip() for label in inp.runner_labels if label.strip()]
        labels = labels or run_labels.default_labels(platform, environ)
        if not labels:
            raise InputError(
                "runner-labels is required with runner outside CI",
                hint="pass e.g. --runner-labels run-$GITHUB_RUN_ID (the job's runs-on or tags)",
            )
        warnings = run_labels.check(platform, labels, environ)
        if inp.command:
            raise InputError(
                "command cannot be combined with runner: the pod's command is the runner",
                hint="drop command; the CI job that runs on the runner does the work",
            )
        idle = float(inp.runner_idle_timeout or 600)
        if idle <= 0:
            raise InputError("runner-idle-timeout must be positive", hint="e.g. 10m")
        scope = inp.runner_scope or "repo"
        notes: list[str] = []
        try:
            tgt = target(platform, environ, mask, scope, need_token=not dry_run)
        except InputError as exc:
            if not dry_run:
                raise
            notes.append(f"{exc.message}; a real run would stop here")
            tgt = _placeholder_target(platform, scope)
        if dry_run and not tgt.token:
            token_env = (
                settings.RUNNER_TOKEN if platform == "github" else settings.GITLAB_TOKEN
            ).name
            notes.append(f"{token_env} is not set; a real run would stop here")
        group = inp.runner_group_id or 1
        return cls(
            tgt,
            runner_name(tag, now),
            labels,
            group,
            idle,
            notes=notes + warnings,
            warnings=warnings,
        )

    def call(self) -> dict[str, Any]:
        """The registration request, for the plan (it holds no secret)."""
        with self.target.client() as client:
            found = client.jit_call(self.name, self.labels, self.group_id)
        return {**found, "url": self.target.api_url + found["path"]}

    def planned_env(self) -> dict[str, str]:
        """The pod env with the credential's placeholder, for a dry run's create body."""
        secret = PLACEHOLDER[
            ENV_JITCONFIG if self.target.platform == "github" else ENV_GITLAB_RUNNER_TOKEN
        ]
        return pod_env(self.target, self.name, None, secret, self.idle_s)

    def register(self, mask: Callable[[str | None], None]) -> dict[str, str]:
        """Register; the pod env (with the masked credential) for the create body."""
        self.attempted = True
        try:
            self.registration = register(
                self.target, self.name, self.labels, self.group_id, self.idle_s, mask
            )
        except InputError:  # refused (401/403/404/409/422): nothing was made
            self.attempted = False
            raise
        return self.registration.env

    def renew(self, name: str) -> None:
        """A new runner for a new pod (a registration is one-use): the next register makes it."""
        self.name, self.registration, self.attempted = name, None, False

    def unregister_quietly(self, log: Callable[[str], None], timeout: float = 0.0) -> str:
        """After a failed or cancelled ``up``: no runner may wait for a pod that never comes.

        Also when the registration's answer never came (5xx, a dropped connection, SIGTERM
        mid-call): the runner may exist all the same, so it is looked up by name. With
        ``timeout``, each call is bounded by it (two attempts). Returns what happened, in a
        few words ("" when nothing was registered)."""
        if not self.attempted:
            return ""
        rid = self.registration.runner_id if self.registration else None
        bound: dict[str, Any] = (
            {"timeout": timeout, "attempts": 2, "max_wait": 0.25} if timeout else {}
        )
        try:
            outcome = unregister(self.target, self.name, rid, **bound)
        except GpuciError as exc:
            log(f"warning: could not delete runner {self.name}: {exc.one_line()} (down/reap will)")
            return f"runner {self.name} not deleted (down/reap will)"
        log(f"runner {self.name}: {outcome} after the failure")
        self.attempted = False  # done: a second cleanup has nothing left to do
        return f"runner {self.name} {outcome}"


def _placeholder_target(platform: str, scope: str) -> Target:
    if platform == "github":
        where = "org:OWNER" if scope == "org" else "repo:OWNER/REPO"
        return Target("github", "https://api.github.com", where)
    return Target(
        "gitlab", "https://gitlab.com/api/v4", "project:PROJECT_ID", "", "https://gitlab.com"
    )
