"""After gpu-smoke's verdict: take a runner whose GPU failed out of the pool, and give it back.

A hardware verdict (exit 1 with failed checks that are findings about the GPU) on a
self-hosted runner with ``on-failure: quarantine``: on GitHub the configured labels are removed
from exactly this runner (its id from its ``.runner`` file, else ``RUNNER_NAME`` matched
exactly in the repository's, organisation's and ``GPUCI_GITHUB_ENTERPRISE``'s runner lists)
and ``gpuci-quarantined`` added;
on GitLab the runner ``CI_RUNNER_ID`` is paused. An environment error (exit 2 or 3), a skip,
a framework that cannot start or a check stopped by gpu-ci's own error is never a reason. The
job still fails with the verdict; one annotation names the runner, the GPU and the way back
(``python -m gpuci runners release``).
Without the token, or when the forge refuses, the verdict stands and one warning says the
runner was not quarantined: the smoke never passes or crashes because of it. gpu-smoke calls
:func:`after_verdict` as its last step (:mod:`gpuci.gpu._smoke.command`).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from gpuci import settings, untrusted_json
from gpuci.errors import ExitCode, GpuciError, InfraError, InputError
from gpuci.gpu._smoke.checks import ENVIRONMENT_REASON, about_the_gpu
from gpuci.gpu.options import SmokeChecks, SmokeInputs
from gpuci.inputs import inp, options
from gpuci.redact import excerpt
from gpuci.runtime import Result, Runtime

__all__ = [
    "ENVIRONMENT_REASON",
    "TITLE",
    "Finding",
    "ReleaseInputs",
    "after_verdict",
    "check_labels",
    "hardware_findings",
    "release",
]

TITLE = "gpu-smoke quarantine"
QUARANTINE_LABEL = "gpuci-quarantined"
# The labels a runner application reports itself (actions/runner's OS and architecture
# names): GitHub marks them read-only and refuses to remove them. Compared case-insensitively.
READ_ONLY_LABELS = frozenset(
    {"self-hosted", "linux", "windows", "macos", "x64", "x86", "arm", "arm64"}
)


@dataclass(frozen=True)
class Finding:
    """One failed check, with the GPU it is about."""

    label: str  # "gpu0:health"
    reason: str
    gpu: int | None


def check_labels(labels: list[str]) -> None:
    """Refuse labels GitHub will not remove (read-only) before the smoke spends its budget:
    InputError naming them."""
    refused = [lb for lb in labels if lb.lower() in READ_ONLY_LABELS | {QUARANTINE_LABEL}]
    if refused:
        raise InputError(
            f"quarantine-labels names {', '.join(refused)}: read-only runner labels (or our "
            "own marker) that cannot be removed",
            hint="name the custom labels your GPU jobs use in runs-on, e.g. gpu-large",
        )


def hardware_findings(result: Result) -> list[Finding]:
    """The failed checks that are findings about the GPU; none unless the verdict is exit 1."""
    if result.exit_code != ExitCode.CHECK_FAILED:
        return []
    found = []
    for check in result.report.get("checks") or []:
        if not isinstance(check, dict) or check.get("status") != "fail":
            continue
        reason = str(check.get("reason") or "")
        if not about_the_gpu(reason):
            continue
        gpu = check.get("gpu")
        label = f"gpu{gpu}:{check.get('name')}" if isinstance(gpu, int) else str(check.get("name"))
        found.append(Finding(label, reason, gpu if isinstance(gpu, int) else None))
    return found


def after_verdict(result: Result, inp: SmokeInputs, rt: Runtime) -> Result:
    """Quarantine this runner when ``on-failure`` asks and the verdict is about hardware."""
    if inp.on_failure != "quarantine" or rt.dry_run:
        return result
    findings = hardware_findings(result)
    if not findings:
        if result.exit_code == ExitCode.CHECK_FAILED:
            result.warning(
                "runner not quarantined: the failed checks say the framework could not start "
                "or gpu-ci itself failed (an environment error), not that the GPU is bad",
                TITLE,
            )
        return result
    env = rt.environ
    try:
        if settings.GITLAB_CI.raw(env) == "true":
            where, back = _pause_gitlab(env, rt)
        elif settings.GITHUB_ACTIONS.raw(env) == "true":
            where, back = _unlabel_github(env, rt, list(inp.quarantine_labels))
        else:
            raise _NotDone(
                "not on a GitHub Actions or GitLab CI runner (GITHUB_ACTIONS/GITLAB_CI unset)"
            )
    except _NotDone as exc:
        result.warning(f"{exc.lead}: {exc}", TITLE)
        return result
    except GpuciError as exc:  # the forge refused or is down: the verdict stands
        result.warning(f"runner not quarantined: {exc.one_line()}", TITLE)
        return result
    gpus = _gpu_text(result, findings, env)
    checks = "; ".join(f"{f.label} ({excerpt(f.reason, 120)})" for f in findings)
    result.error(
        f"runner {where} quarantined: {gpus} failed {checks}; return it with: {back}", TITLE
    )
    result.report["quarantine"] = {"runner": where, "release": back}
    return result


def _admin() -> Any:
    """The forge clients, imported only to quarantine or release (httpx: not on every image)."""
    try:
        from gpuci.forges import _runner_admin as runner_admin
    except ImportError as exc:
        raise _NotDone(f"the forge client cannot load ({exc.name} is not installed)") from None
    return runner_admin


#: ``.runner`` is a few hundred bytes of JSON; anything larger is not the runner's.
MAX_RUNNER_FILE = 64 * 1024


def _identity(environ: Any, admin: Any) -> Any:
    """This runner's id and scope from the ``.runner`` file actions/runner writes in its root
    (``agentId``, and ``gitHubUrl``: ``https://host/owner`` for an organisation runner,
    ``https://host/owner/repo`` for a repository's, ``https://host/enterprises/e``); the root
    is two folders above ``RUNNER_TEMP`` or ``RUNNER_WORKSPACE`` (``<root>/_work/...``). None
    when no such file is readable: the caller falls back to the name. ``admin``:
    :mod:`gpuci.forges._runner_admin`, loaded only here."""
    for found in _runner_files(environ):
        rid, url = found.get("agentId"), found.get("gitHubUrl")
        if isinstance(rid, bool) or not isinstance(rid, int) or not isinstance(url, str):
            continue
        parts = [p for p in urlsplit(url).path.split("/") if p]
        if len(parts) == 2 and parts[0] == "enterprises":
            return admin.Identity(rid, f"/enterprises/{quote(parts[1], safe='')}")
        if len(parts) == 1:
            return admin.Identity(rid, f"/orgs/{quote(parts[0], safe='')}")
        if len(parts) == 2:
            return admin.Identity(
                rid, f"/repos/{quote(parts[0], safe='')}/{quote(parts[1], safe='')}"
            )
    return None


def _runner_files(environ: Any) -> Iterator[dict[str, Any]]:
    """The readable ``.runner`` files (JSON objects) in the runner's root: two folders above
    ``RUNNER_TEMP`` or ``RUNNER_WORKSPACE``."""
    roots = {
        Path(v).parent.parent
        for v in (settings.RUNNER_TEMP.raw(environ), settings.RUNNER_WORKSPACE.raw(environ))
        if v
    }
    for root in sorted(roots):
        try:
            text = untrusted_json.read_text(root / ".runner", MAX_RUNNER_FILE).lstrip("\ufeff")
            found = untrusted_json.loads(text)
        except (OSError, untrusted_json.Unusable):
            continue
        if isinstance(found, dict):
            yield found


class _NotDone(Exception):
    """Why the runner was not quarantined (a warning, never a failure of its own); ``lead``
    says how much of it was done, when not simply nothing."""

    def __init__(self, why: str, lead: str = "runner not quarantined") -> None:
        super().__init__(why)
        self.lead = lead


def _token(env: Any, setting: settings.Setting, rt: Runtime) -> str:
    token = setting.value(env)
    if not token:
        raise _NotDone(f"{setting.name} is not set (see docs/quarantine.md for the token it needs)")
    rt.mask(token)
    return token


def _unlabel_github(env: Any, rt: Runtime, labels: list[str]) -> tuple[str, str]:
    name = str(settings.RUNNER_NAME.raw(env) or "")
    repository = str(settings.GITHUB_REPOSITORY.raw(env) or "")
    if not labels:
        raise _NotDone("quarantine-labels is empty: name the labels your GPU jobs use")
    if not name or "/" not in repository:
        raise _NotDone("RUNNER_NAME or GITHUB_REPOSITORY is not set")
    if not _is_repository(repository):
        raise _NotDone(f"GITHUB_REPOSITORY={excerpt(repository, 80)!r} is not owner/name")
    token = _token(env, settings.RUNNER_TOKEN, rt)
    api = settings.GITHUB_API_URL.value(env)
    admin = _admin()
    with admin.GitHubRunnerLabels(api, token) as client:
        try:  # this runner: its id from its own .runner file, else its name plus scope
            runner = client.locate(
                name, repository, _identity(env, admin), settings.GITHUB_ENTERPRISE.value(env)
            )
        except admin.Ambiguous as exc:
            raise _NotDone(exc.one_line()) from None
        if runner is None:
            raise _NotDone(_nowhere(name, repository, env))
        back = f"python -m gpuci runners release {name} --labels {','.join(labels)}"
        _saying_first(rt, f"runner {name} (id {runner.runner_id})", back)
        what = _take_labels(client, runner, labels, back)
    return f"{name} (id {runner.runner_id}; {what})", back


def _take_labels(client: Any, runner: Any, labels: list[str], back: str) -> str:
    """Remove the runner's quarantine labels, then mark it; what was done, in words.

    Removing comes first: it is what takes the runner out of service, and it frees a label
    slot for the marker. Every failure says truthfully what was already done: a refusal
    before any label is gone is raised as it is (nothing done); some removed, then a
    refusal, is :class:`_NotDone` naming them and ``back``; a marker refused after the
    labels are gone leaves the runner out of service, said in the returned words.
    A runner with none of the labels stays in service, unmarked: :class:`_NotDone`.
    """
    where = f"runner {runner.name} (id {runner.runner_id})"
    present = {lb.lower(): lb for lb in runner.labels}
    todo = list(dict.fromkeys(present[lb.lower()] for lb in labels if lb.lower() in present))
    removed: list[str] = []
    tried = 0
    try:
        for label in todo:
            if client.remove_label(runner, label):  # False: gone already
                removed.append(label)
            tried += 1
    except GpuciError as exc:
        if not removed:
            raise
        raise _NotDone(
            f"labels {', '.join(removed)} removed, then {exc.one_line()}; it keeps "
            f"{', '.join(todo[tried:])}; put it back with: {back}",
            lead=f"{where} only partly taken out of service",
        ) from None
    if not removed:
        raise _NotDone(
            f"it has none of {', '.join(labels)}; its labels are {', '.join(runner.labels)}",
            lead=f"{where} not taken out of service",
        )
    what = f"labels {', '.join(removed)} removed"
    try:
        client.add_labels(runner, [QUARANTINE_LABEL])
    except GpuciError as exc:
        return f"{what}; not marked {QUARANTINE_LABEL}: {exc.one_line()}"
    return what


def _nowhere(name: str, repository: str, env: Any) -> str:
    """Where a runner was looked for by name and not found, in words."""
    owner = repository.partition("/")[0]
    lists = f"{repository}'s or {owner}'s runner lists"
    if enterprise := settings.GITHUB_ENTERPRISE.value(env):
        lists = f"{repository}'s, {owner}'s or the enterprise {enterprise}'s runner lists"
    return f"no self-hosted runner named exactly {name!r} in {lists}"


def _pause_gitlab(env: Any, rt: Runtime) -> tuple[str, str]:
    rid = str(settings.CI_RUNNER_ID.raw(env) or "")
    if not rid:
        raise _NotDone("CI_RUNNER_ID is not set")
    if not _is_id(rid):
        raise _NotDone(f"CI_RUNNER_ID={excerpt(rid, 40)!r} is not a runner id")
    token = _token(env, settings.GITLAB_TOKEN, rt)
    api = str(settings.CI_API_V4_URL.raw(env) or "")
    if not api:
        raise _NotDone("CI_API_V4_URL is not set")
    back = f"python -m gpuci runners release {rid} --forge gitlab"
    with _admin().GitLabRunnerPause(api, token) as client:
        _saying_first(rt, f"runner id {rid}", back)
        client.set_paused(int(rid), True)
    desc = str(settings.CI_RUNNER_DESCRIPTION.raw(env) or "")
    where = f"{desc} (id {rid}; paused)" if desc else f"id {rid} (paused)"
    return where, back


def _saying_first(rt: Runtime, runner: str, back: str) -> None:
    """The way back, in the log before the first change: a cancel (the runner's SIGTERM ends
    the process at once) or Ctrl-C midway left a runner out of service, no word said."""
    rt.log(
        f"{TITLE}: taking {runner} out of service; should this step end before it says it "
        f"did, put it back with: {back}"
    )


def _is_repository(text: str) -> bool:
    """``owner/name`` as GitHub spells them, and nothing that would change the API path it is
    put in (``..``, ``?``, ``#``, a control character: httpx.InvalidURL, an internal error)."""
    parts = text.split("/")
    return len(parts) == 2 and all(
        re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", p) and p.strip(".") for p in parts
    )


def _is_id(text: str) -> bool:
    """A GitLab runner id: ASCII digits, few enough for an integer (``str.isdigit()`` passes
    ``²``, and 5,000 digits, each of which ``int()`` refuses: an internal error)."""
    return text.isascii() and text.isdigit() and len(text) <= 18


def _gpu_text(result: Result, findings: list[Finding], env: Any) -> str:
    """``GPU 0 (GPU-..., bus 00000000:18:00.0)`` for each GPU a finding names."""
    uuids = {
        g.get("index"): g.get("uuid")
        for g in result.report.get("gpus") or []
        if isinstance(g, dict)
    }
    buses = _bus_ids(env)
    indexes = sorted({f.gpu for f in findings if f.gpu is not None})
    if not indexes:
        return "the node"
    parts = []
    for i in indexes:
        uuid = uuids.get(i) or "uuid unknown"
        bus = buses.get(i)
        parts.append(f"GPU {i} ({uuid}" + (f", bus {bus})" if bus else ")"))
    return ", ".join(parts)


#: Seconds the bus ids may take: a courtesy, read after the runner is out of service and
#: before the annotation that says so.
BUS_ID_WAIT = 10.0


def _bus_ids(env: Any) -> dict[int, str]:
    """PCI bus ids from NVML (the smoke's report lacks them); empty when NVML cannot answer."""
    from gpuci.gpu._nvml import open_nvml, within_deadline

    def read() -> dict[int, str]:
        with open_nvml(env) as session:
            return {g.index: g.pci_bus_id for g in session.snapshot().gpus if g.pci_bus_id}

    try:  # a GPU just found failing is the one most likely to hold NVML: bounded
        return within_deadline(env, read, "reading the bus ids", at_most=BUS_ID_WAIT)
    except Exception:  # the verdict is already made; the bus id is a courtesy
        return {}


# ----- the way back: ``python -m gpuci runners release NAME`` ---------------------------------
@options
class ReleaseInputs(SmokeChecks):
    """What ``runners release`` is given: the gpu-smoke it runs first, and the runner."""

    name: str = inp("The runner: its name on GitHub, its numeric id on GitLab.")
    labels: list[str] = inp(
        "GitHub: the labels to restore (the quarantine-labels the smoke removed)."
    )
    forge: str = inp(
        ("Which forge the runner belongs to (auto: GitLab inside GitLab CI, else GitHub)."),
        default="auto",
        choices=("auto", "github", "gitlab"),
    )
    repository: str = inp("GitHub owner/name (default: GITHUB_REPOSITORY).")
    force: bool = inp(
        "Release without running the smoke here (after a false alarm).", default="false"
    )

    def smoke_inputs(self) -> SmokeInputs:
        """The gpu-smoke release runs first: the same checks and minimums, no quarantine."""
        return SmokeInputs(**{f.name: getattr(self, f.name) for f in fields(SmokeChecks)})


def release(inp: ReleaseInputs, rt: Runtime) -> Result:
    """Give a quarantined runner back: after a passing smoke here, or with ``--force``.

    Raises InputError for a missing name or labels, a GitLab name that is no id, or a job on
    another runner; InfraError when the forge client is missing or the forge fails.
    """
    name = inp.name.strip()
    if not name:
        raise InputError("runners release needs the runner's name", hint="pass NAME")
    env = rt.environ
    forge = inp.forge or "auto"
    if forge == "auto":
        forge = "gitlab" if settings.GITLAB_CI.raw(env) == "true" else "github"
    labels = list(inp.labels)
    if forge == "github":
        if not labels:
            raise InputError(
                "runners release needs the labels to restore",
                hint="pass --labels with the quarantine-labels the smoke removed, e.g. gpu-large",
            )
        check_labels(labels)
    elif not _is_id(name):
        raise InputError(
            f"GitLab runners are released by numeric id, not {excerpt(name, 40)!r}",
            hint="pass the runner id the quarantine annotation names (CI_RUNNER_ID)",
        )
    if rt.dry_run:
        result = Result(command="runners release")
        result.headline = f"would release runner {name} on {forge}" + (
            "" if inp.force else " after a passing smoke here"
        )
        return result
    smoke_note = _smoke_first(inp, rt, name, forge) if not inp.force else None
    if isinstance(smoke_note, Result):
        return smoke_note  # the smoke failed: the runner stays out
    try:
        if forge == "github":
            done = _relabel_github(env, rt, name, labels, inp.repository)
        else:
            done = _unpause_gitlab(env, rt, int(name))
    except _NotDone as exc:
        raise InfraError(
            str(exc), hint="install gpu-ci from its lock file (it needs httpx)"
        ) from None
    result = Result(command="runners release")
    result.headline = done + (" (forced, no smoke)" if inp.force else f" ({smoke_note})")
    result.notice(result.headline, "runners release")
    return result


def _smoke_first(inp: ReleaseInputs, rt: Runtime, name: str, forge: str) -> str | Result:
    """Run gpu-smoke on this machine, which must be the runner; its Result when it fails."""
    _check_this_is(name, forge, rt.environ)
    from gpuci.gpu._smoke import smoke

    verdict = smoke(inp.smoke_inputs(), rt)
    if not verdict.ok:
        verdict.error(
            f"runner {name} not released: the smoke here did not pass "
            "(fix the node, or pass --force after a false alarm)",
            "runners release",
        )
        return verdict
    return "the smoke here passed"


def _check_this_is(name: str, forge: str, environ: Any) -> None:
    """Refuse (InputError) unless this machine says it is runner ``name``: the job's
    ``RUNNER_NAME`` (``CI_RUNNER_ID`` on GitLab), else on GitHub the name in the runner's own
    ``.runner`` file or the hostname (actions/runner's default name). A smoke of another
    machine's GPUs must never put a bad runner back into service."""
    setting = settings.RUNNER_NAME if forge == "github" else settings.CI_RUNNER_ID
    here = str(setting.raw(environ) or "")
    if here and here != name:
        raise InputError(
            f"this job runs on runner {here!r}, not {name!r}: a smoke here says nothing about it",
            hint="run release on the quarantined runner itself, or pass --force",
        )
    if here == name:
        return
    host = socket.gethostname()
    if forge == "github" and (
        name in (host, host.partition(".")[0])
        or any(f.get("agentName") == name for f in _runner_files(environ))
    ):
        return
    others = ", no .runner file names it and the hostname is not it" if forge == "github" else ""
    raise InputError(
        f"nothing says this machine is runner {name!r} ({setting.name} is not set{others}): "
        "a smoke here may say nothing about it",
        hint=f"run release on the quarantined runner itself (in a job there, or with "
        f"{setting.name}={name} in a shell on it), or pass --force after checking it by hand",
    )


def _relabel_github(env: Any, rt: Runtime, name: str, labels: list[str], repository: str) -> str:
    token = settings.RUNNER_TOKEN.value(env)
    if not token:
        raise InputError(
            f"{settings.RUNNER_TOKEN.name} is not set",
            hint="set it to a token with 'Administration: read and write' (docs/quarantine.md)",
        )
    rt.mask(token)
    repository = repository or str(settings.GITHUB_REPOSITORY.raw(env) or "")
    if not _is_repository(repository):
        said = f" ({excerpt(repository, 80)!r} is not one)" if repository else ""
        raise InputError(
            f"no repository: runners release needs owner/name{said}",
            hint="pass --repository owner/name or set GITHUB_REPOSITORY",
        )
    api = settings.GITHUB_API_URL.value(env)
    admin = _admin()
    with admin.GitHubRunnerLabels(api, token) as client:
        mine = _identity(env, admin) if settings.RUNNER_NAME.raw(env) == name else None
        runner = client.locate(name, repository, mine, settings.GITHUB_ENTERPRISE.value(env))
        if runner is None:
            raise InputError(
                _nowhere(name, repository, env),
                hint="check the name the quarantine annotation gave, and --repository (and "
                f"{settings.GITHUB_ENTERPRISE.name} for an enterprise runner)",
            )
        client.add_labels(runner, labels)
        if any(lb.lower() == QUARANTINE_LABEL for lb in runner.labels):
            client.remove_label(runner, QUARANTINE_LABEL)
    return f"runner {name} released: labels {', '.join(labels)} restored"


def _unpause_gitlab(env: Any, rt: Runtime, runner_id: int) -> str:
    token = settings.GITLAB_TOKEN.value(env)
    api = str(settings.CI_API_V4_URL.raw(env) or "")
    if not token or not api:
        raise InputError(
            f"{settings.GITLAB_TOKEN.name} or CI_API_V4_URL is not set",
            hint="set both (a token that can manage the runner; docs/quarantine.md)",
        )
    rt.mask(token)
    with _admin().GitLabRunnerPause(api, token) as client:
        client.set_paused(runner_id, False)
    return f"runner {runner_id} released: unpaused"
