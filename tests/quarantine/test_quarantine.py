"""gpu-smoke's ``on-failure: quarantine`` and ``runners release``, as a runner runs them.

Each test runs the CLI (its own ``main``, in this process: what it does is tested here, not
its process) with the fake NVML (an A GPU with ECC errors is a hardware verdict) against fake
GitHub and GitLab runner APIs on 127.0.0.1, and searches every line of output for every token.
A token must not be printed by any path, the interpreter's exit included (what a finalizer or
a thread says then): the quarantine of each forge and a refusing forge's warning run in a
process of their own (``process=True``), so that their whole output is searched.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from forges.fake_forges import FakeForges
from forges.forge_base import GH
from gpuci_testing import clean_env, run_cli, run_cli_here, run_python
from loopback_http import JsonAPIHandler, LoopbackHTTPServer

BAD_GPU = "h200:ecc+=1,h200"
GOOD_GPU = "h200,h200"


@pytest.fixture
def api() -> Iterator[FakeForges]:
    with FakeForges() as server:
        yield server


def gh(api: FakeForges, **extra: str) -> dict[str, str]:
    """A GitHub Actions job on a self-hosted runner, against the fake GitHub."""
    return api.github_env(GITHUB_ACTIONS="true", **extra)


def gl(api: FakeForges, **extra: str) -> dict[str, str]:
    """A GitLab CI job on runner CI_RUNNER_ID, against the fake GitLab."""
    return api.gitlab_env(GITLAB_CI="true", **extra)


def cli(tmp_path: Path, api: FakeForges, *args: str, process: bool = False, **env: str):
    """``gpuci ARGS`` with ``env``, in this process or (``process``) a fresh interpreter; no
    token in its output or in the files it wrote."""
    environ = clean_env(
        GPUCI_JOURNAL=str(tmp_path / "journal.jsonl"),
        GITHUB_OUTPUT=str(tmp_path / "out"),
        GITHUB_STEP_SUMMARY=str(tmp_path / "summary"),
        **env,
    )
    if process:
        proc = run_cli(*args, env=environ, cwd=tmp_path, timeout=120)
    else:
        proc = run_cli_here(*args, env=environ, cwd=tmp_path)
    # ::add-mask:: is how a token is masked: the runner never shows that line
    shown = (proc.stdout + proc.stderr).splitlines()
    everything = "\n".join(ln for ln in shown if not ln.startswith("::add-mask::"))
    for path in tmp_path.iterdir():
        if path.is_file():
            everything += path.read_text(errors="replace")
    for secret in api.secrets():
        assert secret not in everything, "a token reached the output"
    return proc


def smoke(
    tmp_path: Path, api: FakeForges, nvml: str, *args: str, process: bool = False, **env: str
):
    return cli(
        tmp_path, api, "gpu-smoke", "--framework", "none", *args, process=process,
        GPUCI_FAKE_NVML=nvml, **env,
    )  # fmt: skip


def quarantine_smoke(
    tmp_path: Path,
    api: FakeForges,
    nvml: str,
    labels: str,
    *args: str,
    process: bool = False,
    **env: str,
):
    """gpu-smoke with ``on-failure: quarantine`` (and the labels to take off, when given)."""
    flags = ["--on-failure", "quarantine", *(["--quarantine-labels", labels] if labels else [])]
    return smoke(tmp_path, api, nvml, *flags, *args, process=process, **env)


def release(
    tmp_path: Path, api: FakeForges, name: str, *flags: str, nvml: str | None = None, **env: str
):
    """``runners release NAME --labels gpu-large`` with ``flags``; with ``nvml``, the smoke it
    runs first reads that fake NVML, health checks only."""
    if nvml is not None:
        flags, env = ("--framework", "none", *flags), {**env, "GPUCI_FAKE_NVML": nvml}
    return cli(tmp_path, api, "runners", "release", name, "--labels", "gpu-large", *flags, **env)


def lines(proc, prefix: str) -> list[str]:
    return [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith(prefix)]


def test_a_hardware_failure_removes_exactly_the_configured_labels_of_exactly_this_runner(
    tmp_path, api
):
    for i in range(3):  # the runner is on the third page (page size 2)
        api.state.add(f"other-{i}", "/repos/octo/gpu", ["gpu-large"])
    similar = api.state.add("gpu-node-1", "/repos/octo/gpu", ["gpu-large", "gpu-small"])
    longer = api.state.add("gpu-node-10", "/repos/octo/gpu", ["gpu-large", "gpu-small"])
    this = api.state.add("gpu-node-1x", "/repos/octo/gpu", ["gpu-large", "gpu-small", "keep"])
    before = {r.id: r.names() for r in api.state.runners.values()}

    env = gh(api, RUNNER_NAME="gpu-node-1x")
    proc = quarantine_smoke(tmp_path, api, BAD_GPU, "gpu-large,gpu-small", process=True, **env)

    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert this.names() == ["self-hosted", "Linux", "X64", "keep", "gpuci-quarantined"]
    for runner in api.state.runners.values():
        if runner is not this:
            assert runner.names() == before[runner.id]
    assert similar.names() == before[similar.id] and longer.names() == before[longer.id]
    writes = api.state.writes()
    assert [(m, p.rsplit("/", 1)[-1]) for m, p, _ in writes] == [
        ("DELETE", "gpu-large"),
        ("DELETE", "gpu-small"),
        ("POST", "labels"),
    ]
    assert all(f"/runners/{this.id}/" in p for _, p, _ in writes)
    quarantined = [ln for ln in lines(proc, "::error") if "quarantined" in ln]
    assert len(quarantined) == 1
    text = quarantined[0]
    assert "runner gpu-node-1x" in text and "gpu0:health" in text
    assert "GPU 0 (GPU-" in text and "bus " in text
    assert "python -m gpuci runners release gpu-node-1x --labels gpu-large,gpu-small" in text
    assert not [ln for ln in lines(proc, "::warning") if "quarantin" in ln]


def test_an_organisation_runner_is_found_in_the_org_list(tmp_path, api):
    this = api.state.add("org-gpu", "/orgs/octo", ["gpu-large"])
    proc = quarantine_smoke(tmp_path, api, BAD_GPU, "gpu-large", **gh(api, RUNNER_NAME="org-gpu"))
    assert proc.returncode == 1
    assert "gpu-large" not in this.names() and "gpuci-quarantined" in this.names()


def test_an_environment_error_or_a_pass_does_not_quarantine(tmp_path, api):
    this = api.state.add("gpu-node", "/repos/octo/gpu", ["gpu-large"])
    env = gh(api, RUNNER_NAME="gpu-node")
    no_gpu = quarantine_smoke(tmp_path, api, "no-driver", "gpu-large", **env)
    assert no_gpu.returncode == 3, no_gpu.stdout + no_gpu.stderr
    passed = quarantine_smoke(tmp_path, api, GOOD_GPU, "gpu-large", **env)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert this.names() == ["self-hosted", "Linux", "X64", "gpu-large"]
    assert api.state.requests == []  # the API was never asked


def test_a_read_only_label_is_refused_before_the_smoke(tmp_path, api):
    api.state.add("gpu-node", "/repos/octo/gpu", ["gpu-large"])
    proc = quarantine_smoke(
        tmp_path, api, BAD_GPU, "gpu-large,Linux", **gh(api, RUNNER_NAME="gpu-node")
    )
    assert proc.returncode == 2
    assert "read-only runner labels" in proc.stdout + proc.stderr
    assert api.state.requests == []


def test_without_the_token_one_warning_and_the_same_verdict(tmp_path, api):
    this = api.state.add("gpu-node", "/repos/octo/gpu", ["gpu-large"])
    env = gh(api, RUNNER_NAME="gpu-node")
    del env["GPUCI_RUNNER_TOKEN"]
    proc = quarantine_smoke(tmp_path, api, BAD_GPU, "gpu-large", **env)
    assert proc.returncode == 1
    warnings = [ln for ln in lines(proc, "::warning") if "not quarantined" in ln]
    assert len(warnings) == 1 and "GPUCI_RUNNER_TOKEN is not set" in warnings[0]
    assert "gpu-large" in this.names() and api.state.requests == []
    assert json.loads((tmp_path / "gpuci-smoke-report.json").read_text())["passed"] is False


def test_a_refusing_forge_is_one_warning_and_the_same_verdict(tmp_path, api):
    api.state.add("gpu-node", "/repos/octo/gpu", ["gpu-large"])
    env = gh(api, RUNNER_NAME="gpu-node", GPUCI_RUNNER_TOKEN=api.state.job_token)
    proc = quarantine_smoke(tmp_path, api, BAD_GPU, "gpu-large", process=True, **env)
    assert proc.returncode == 1
    warnings = [ln for ln in lines(proc, "::warning") if "not quarantined" in ln]
    assert len(warnings) == 1 and "Administration" in warnings[0]
    assert "Traceback" not in proc.stderr


def test_release_restores_the_labels_after_a_passing_smoke_or_with_force(tmp_path, api):
    this = api.state.add("gpu-node", "/repos/octo/gpu", ["gpu-large", "keep"])
    env = gh(api, RUNNER_NAME="gpu-node")
    assert quarantine_smoke(tmp_path, api, BAD_GPU, "gpu-large", **env).returncode == 1
    assert "gpu-large" not in this.names()

    still_bad = release(tmp_path, api, "gpu-node", nvml=BAD_GPU, **env)
    assert still_bad.returncode == 1, still_bad.stdout + still_bad.stderr
    assert "not released" in still_bad.stdout + still_bad.stderr
    assert "gpu-large" not in this.names()

    elsewhere = release(tmp_path, api, "gpu-node", nvml=GOOD_GPU, **{**env, "RUNNER_NAME": "other"})
    assert elsewhere.returncode == 2 and "gpu-large" not in this.names()

    healed = release(tmp_path, api, "gpu-node", nvml=GOOD_GPU, **env)
    assert healed.returncode == 0, healed.stdout + healed.stderr
    assert sorted(this.names()) == sorted(["self-hosted", "Linux", "X64", "keep", "gpu-large"])

    assert quarantine_smoke(tmp_path, api, BAD_GPU, "gpu-large", **env).returncode == 1
    laptop = {k: v for k, v in env.items() if k not in ("RUNNER_NAME", "GITHUB_ACTIONS")}
    forced = release(tmp_path, api, "gpu-node", "--force", **laptop)
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert "gpu-large" in this.names() and "gpuci-quarantined" not in this.names()


def test_gitlab_pauses_ci_runner_id_and_release_unpauses(tmp_path, api):
    api.state.next_id = 40
    other = api.state.add("gpu-a", "project:42")
    this = api.state.add("gpu-b", "project:42")
    env = gl(api, CI_RUNNER_ID=str(this.id), CI_RUNNER_DESCRIPTION="gpu-b")
    proc = quarantine_smoke(tmp_path, api, BAD_GPU, "", process=True, **env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert this.paused and not other.paused
    assert api.state.writes() == [("PUT", f"/gitlab/api/v4/runners/{this.id}", {"paused": True})]
    text = proc.stdout + proc.stderr
    assert f"runner gpu-b (id {this.id}; paused) quarantined" in text
    assert f"python -m gpuci runners release {this.id} --forge gitlab" in text

    back = cli(tmp_path, api, "runners", "release", str(this.id), "--force", **gl(api))
    assert back.returncode == 0, back.stdout + back.stderr
    assert not this.paused


def test_gitlab_without_the_token_warns_once(tmp_path, api):
    this = api.state.add("gpu-b", "project:42")
    env = gl(api, CI_RUNNER_ID=str(this.id))
    del env["GPUCI_GITLAB_TOKEN"]
    proc = quarantine_smoke(tmp_path, api, BAD_GPU, "", **env)
    assert proc.returncode == 1
    text = proc.stdout + proc.stderr
    assert text.count("runner not quarantined: GPUCI_GITLAB_TOKEN is not set") == 1
    assert not this.paused


def test_a_configured_label_the_runner_lacks_is_skipped_and_named_in_the_annotation(tmp_path, api):
    this = api.state.add("gpu-node", "/repos/octo/gpu", ["gpu-large"])
    proc = quarantine_smoke(
        tmp_path, api, BAD_GPU, "gpu-large,gpu-xl", **gh(api, RUNNER_NAME="gpu-node")
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert this.names() == ["self-hosted", "Linux", "X64", "gpuci-quarantined"]
    deletes = [p for m, p, _ in api.state.writes() if m == "DELETE"]
    assert len(deletes) == 1 and deletes[0].endswith("/labels/gpu-large")
    assert "labels gpu-large removed" in proc.stdout + proc.stderr


def test_an_unknown_runner_is_one_warning_and_nothing_changes(tmp_path, api):
    other = api.state.add("gpu-node-2", "/repos/octo/gpu", ["gpu-large"])
    proc = quarantine_smoke(tmp_path, api, BAD_GPU, "gpu-large", **gh(api, RUNNER_NAME="gpu-node"))
    assert proc.returncode == 1
    warnings = [ln for ln in lines(proc, "::warning") if "not quarantined" in ln]
    assert len(warnings) == 1 and "no self-hosted runner named exactly 'gpu-node'" in warnings[0]
    assert other.names() == ["self-hosted", "Linux", "X64", "gpu-large"]
    assert api.state.writes() == []


NO_HTTPX = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] == 'httpx':
            raise ImportError(f'{name} is blocked', name=name)
        return None
sys.meta_path.insert(0, Block())
from gpuci.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_on_an_image_without_httpx_the_verdict_stands_with_one_warning(tmp_path, api):
    this = api.state.add("gpu-node", "/repos/octo/gpu", ["gpu-large"])
    env = clean_env(
        GPUCI_FAKE_NVML=BAD_GPU,
        GITHUB_OUTPUT=str(tmp_path / "out"),
        GITHUB_STEP_SUMMARY=str(tmp_path / "summary"),
        **gh(api, RUNNER_NAME="gpu-node"),
    )
    command = "gpu-smoke --framework none --on-failure quarantine --quarantine-labels gpu-large"
    proc = run_python("-c", NO_HTTPX, *command.split(), env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    warnings = [ln for ln in lines(proc, "::warning") if "not quarantined" in ln]
    assert len(warnings) == 1 and "httpx is not installed" in warnings[0]
    assert "gpu-large" in this.names() and api.state.requests == []


def _runner_root(tmp_path: Path, agent_id: int, url: str) -> dict[str, str]:
    """A runner's root with the ``.runner`` file actions/runner writes (a UTF-8 BOM first),
    and the job variables that point into it."""
    root = tmp_path / "actions-runner"
    (root / "_work" / "_temp").mkdir(parents=True)
    info = {"agentId": agent_id, "agentName": "gpu-twin", "poolId": 1, "gitHubUrl": url}
    (root / ".runner").write_text("\ufeff" + json.dumps(info), encoding="utf-8")
    return {"RUNNER_TEMP": str(root / "_work" / "_temp")}


def test_an_org_and_a_repo_runner_of_one_name_the_runner_file_picks_this_one(tmp_path, api):
    repo_twin = api.state.add("gpu-twin", "/repos/octo/gpu", ["gpu-large"])
    org_twin = api.state.add("gpu-twin", "/orgs/octo", ["gpu-large"])
    files = _runner_root(tmp_path, org_twin.id, f"{api.base}/octo")
    proc = quarantine_smoke(
        tmp_path, api, BAD_GPU, "gpu-large", **gh(api, RUNNER_NAME="gpu-twin", **files)
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "gpu-large" not in org_twin.names() and "gpuci-quarantined" in org_twin.names()
    assert "gpu-large" in repo_twin.names()  # the healthy twin keeps its label


def test_twins_without_a_runner_file_are_named_and_left_alone(tmp_path, api):
    repo_twin = api.state.add("gpu-twin", "/repos/octo/gpu", ["gpu-large"])
    org_twin = api.state.add("gpu-twin", "/orgs/octo", ["gpu-large"])
    proc = quarantine_smoke(tmp_path, api, BAD_GPU, "gpu-large", **gh(api, RUNNER_NAME="gpu-twin"))
    assert proc.returncode == 1
    assert "gpu-large" in repo_twin.names() and "gpu-large" in org_twin.names()
    warned = [ln for ln in lines(proc, "::warning") if "runners are named 'gpu-twin'" in ln]
    assert len(warned) == 1 and api.state.writes() == []


def test_a_label_is_matched_whatever_its_case_as_github_does(tmp_path, api):
    this = api.state.add("gpu-node", "/repos/octo/gpu", ["GPU-Large"])
    proc = quarantine_smoke(tmp_path, api, BAD_GPU, "gpu-large", **gh(api, RUNNER_NAME="gpu-node"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert this.names() == ["self-hosted", "Linux", "X64", "gpuci-quarantined"]
    assert "labels GPU-Large removed" in proc.stdout + proc.stderr


def test_a_runner_at_githubs_100_labels_loses_its_label_first_so_the_marker_fits(tmp_path, api):
    this = api.state.add("gpu-node", "/repos/octo/gpu", [f"l{i}" for i in range(96)] + ["gpu-xl"])
    proc = quarantine_smoke(tmp_path, api, BAD_GPU, "gpu-xl", **gh(api, RUNNER_NAME="gpu-node"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert len(this.names()) == 100 and "gpu-xl" not in this.names()
    assert "gpuci-quarantined" in this.names()
    assert not [ln for ln in lines(proc, "::warning") if "quarantin" in ln]


def test_a_runner_with_none_of_the_labels_is_one_warning_naming_its_labels(tmp_path, api):
    this = api.state.add("gpu-node", "/repos/octo/gpu", ["gpu-h200"])  # runs-on: gpu-h200
    proc = quarantine_smoke(tmp_path, api, BAD_GPU, "gpu-large", **gh(api, RUNNER_NAME="gpu-node"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (warned,) = [ln for ln in lines(proc, "::warning") if "quarantin" in ln]
    assert (
        f"runner gpu-node (id {this.id}) not taken out of service: it has none of gpu-large; "
        "its labels are self-hosted, Linux, X64, gpu-h200" in warned
    )
    assert not [ln for ln in lines(proc, "::error") if "quarantined" in ln]
    assert this.names() == ["self-hosted", "Linux", "X64", "gpu-h200"]
    assert api.state.writes() == []  # no marker on a runner still in service


def test_a_marker_refused_after_the_labels_are_gone_is_said_with_the_way_back(tmp_path, api):
    this = api.state.add("gpu-node", "/repos/octo/gpu", ["gpu-large"])
    labels = f"{GH}/repos/octo/gpu/actions/runners/{this.id}/labels"
    api.state.answers[("POST", labels)] = (422, {"message": "Validation Failed"}, {})
    proc = quarantine_smoke(tmp_path, api, BAD_GPU, "gpu-large", **gh(api, RUNNER_NAME="gpu-node"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert this.names() == ["self-hosted", "Linux", "X64"]  # out of service, unmarked
    (said,) = [ln for ln in lines(proc, "::error") if "quarantined" in ln]
    assert "labels gpu-large removed; not marked gpuci-quarantined" in said and "HTTP 422" in said
    assert "return it with: python -m gpuci runners release gpu-node --labels gpu-large" in said
    assert not [ln for ln in lines(proc, "::warning") if "quarantin" in ln]


def test_a_label_refused_after_another_was_removed_names_both_and_the_way_back(tmp_path, api):
    this = api.state.add("gpu-node", "/repos/octo/gpu", ["gpu-large", "gpu-small"])
    small = f"{GH}/repos/octo/gpu/actions/runners/{this.id}/labels/gpu-small"
    api.state.answers[("DELETE", small)] = (422, {"message": "Validation Failed"}, {})
    proc = quarantine_smoke(
        tmp_path, api, BAD_GPU, "gpu-large,gpu-small", **gh(api, RUNNER_NAME="gpu-node")
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert this.names() == ["self-hosted", "Linux", "X64", "gpu-small"]
    (warned,) = [ln for ln in lines(proc, "::warning") if "quarantin" in ln]
    assert f"runner gpu-node (id {this.id}) only partly taken out of service" in warned
    assert "labels gpu-large removed, then" in warned and "it keeps gpu-small" in warned
    assert "python -m gpuci runners release gpu-node --labels gpu-large,gpu-small" in warned
    assert "not quarantined" not in warned


def test_an_enterprise_runner_is_searched_when_the_enterprise_is_named(tmp_path, api):
    this = api.state.add("ent-gpu", "/enterprises/acme", ["gpu-large"])
    env = gh(api, RUNNER_NAME="ent-gpu")
    unnamed = quarantine_smoke(tmp_path, api, BAD_GPU, "gpu-large", **env)
    assert unnamed.returncode == 1 and "gpu-large" in this.names()
    assert "octo/gpu's or octo's runner lists" in unnamed.stdout + unnamed.stderr

    env["GPUCI_GITHUB_ENTERPRISE"] = "acme"
    proc = quarantine_smoke(tmp_path, api, BAD_GPU, "gpu-large", **env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert this.names() == ["self-hosted", "Linux", "X64", "gpuci-quarantined"]
    back = release(tmp_path, api, "ent-gpu", "--force", **env)
    assert back.returncode == 0, back.stdout + back.stderr
    assert "gpu-large" in this.names() and "gpuci-quarantined" not in this.names()


def test_an_org_and_an_enterprise_runner_of_one_name_are_named_and_left_alone(tmp_path, api):
    org_twin = api.state.add("gpu-twin", "/orgs/octo", ["gpu-large"])
    ent_twin = api.state.add("gpu-twin", "/enterprises/acme", ["gpu-large"])
    env = gh(api, RUNNER_NAME="gpu-twin", GPUCI_GITHUB_ENTERPRISE="acme")
    proc = quarantine_smoke(tmp_path, api, BAD_GPU, "gpu-large", **env)
    (warned,) = [ln for ln in lines(proc, "::warning") if "not quarantined" in ln]
    assert f"the organisation octo (id {org_twin.id})" in warned
    assert f"the enterprise acme (id {ent_twin.id})" in warned
    assert api.state.writes() == []


def test_a_group_runner_is_paused_only_by_the_groups_owner_as_gitlab_allows(tmp_path, api):
    this = api.state.add("gpu-group", "group:7")
    env = gl(api, CI_RUNNER_ID=str(this.id))
    as_maintainer = quarantine_smoke(tmp_path, api, BAD_GPU, "", **env)
    assert as_maintainer.returncode == 1 and not this.paused
    text = as_maintainer.stdout + as_maintainer.stderr
    (warned,) = [ln for ln in text.splitlines() if "runner not quarantined" in ln]
    assert "HTTP 403" in warned and "Owner of its group (group runner)" in warned

    api.state.roles["group:7"] = "owner"
    as_owner = quarantine_smoke(tmp_path, api, BAD_GPU, "", **env)
    assert as_owner.returncode == 1 and this.paused


def test_an_enterprise_runners_own_file_finds_it_without_the_setting(tmp_path, api):
    ent_twin = api.state.add("gpu-twin", "/enterprises/acme", ["gpu-large"])
    repo_twin = api.state.add("gpu-twin", "/repos/octo/gpu", ["gpu-large"])
    files = _runner_root(tmp_path, ent_twin.id, f"{api.base}/enterprises/acme")
    env = gh(api, RUNNER_NAME="gpu-twin", **files)
    proc = quarantine_smoke(tmp_path, api, BAD_GPU, "gpu-large", **env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "gpu-large" not in ent_twin.names() and "gpu-large" in repo_twin.names()


def test_an_enterprise_runners_own_file_the_token_may_not_read_says_so(tmp_path, api):
    """The file's enterprise runner, a token without manage_runners:enterprise: the refusal
    was dropped for the name's search, which said "no self-hosted runner named ... in
    octo/gpu's or octo's runner lists", false, and without the token's fix."""
    this = api.state.add("ent-gpu", "/enterprises/acme", ["gpu-large"])
    one = f"{GH}/enterprises/acme/actions/runners/{this.id}"
    api.state.answers[("GET", one)] = (403, {"message": "Must have admin rights"}, {})
    files = _runner_root(tmp_path, this.id, f"{api.base}/enterprises/acme")
    env = gh(api, RUNNER_NAME="ent-gpu", **files)
    proc = quarantine_smoke(tmp_path, api, BAD_GPU, "gpu-large", **env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (warned,) = [ln for ln in lines(proc, "::warning") if "not quarantined" in ln]
    assert "HTTP 403" in warned and "manage_runners:enterprise" in warned
    assert "no self-hosted runner named" not in warned
    assert "Traceback" not in proc.stdout + proc.stderr


class _AnswersUnpaused(JsonAPIHandler):
    """A GitLab whose PUT /runners/:id answers 200 and a runner still taking jobs (one that
    ignored ``paused``, as GitLab before 14.8 does)."""

    answer: dict = {}

    def do_PUT(self) -> None:
        self._body()
        self._reply(200, type(self).answer)


@pytest.mark.parametrize(
    "answer",
    [{"id": 7, "paused": False, "active": True}, {"id": 7, "active": True}, {"id": 7}],
    ids=["paused-false", "before-14.8", "neither"],
)
def test_a_gitlab_answer_that_the_runner_is_not_paused_is_not_quarantined(tmp_path, api, answer):
    _AnswersUnpaused.answer = answer
    with LoopbackHTTPServer(_AnswersUnpaused) as gitlab:
        url = f"http://127.0.0.1:{gitlab.port}/api/v4"
        env = gl(api, CI_RUNNER_ID="7", CI_RUNNER_DESCRIPTION="gpu-b", CI_API_V4_URL=url)
        proc = quarantine_smoke(tmp_path, api, BAD_GPU, "", **env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    text = proc.stdout + proc.stderr
    (warned,) = [ln for ln in text.splitlines() if "quarantined" in ln]
    assert "runner not quarantined: GitLab answered PUT /runners/7 with" in warned
    assert "runner 7 was not paused" in warned


def test_release_off_the_runner_needs_proof_this_is_it_or_force(tmp_path, api):
    this = api.state.add("gpu-twin", "/repos/octo/gpu", ["gpuci-quarantined"])
    laptop = {k: v for k, v in gh(api).items() if k != "GITHUB_ACTIONS"}
    elsewhere = release(tmp_path, api, "gpu-twin", nvml=GOOD_GPU, **laptop)
    assert elsewhere.returncode == 2, elsewhere.stdout + elsewhere.stderr
    (said,) = [
        ln for ln in (elsewhere.stdout + elsewhere.stderr).splitlines() if "this machine" in ln
    ]
    assert "nothing says this machine is runner 'gpu-twin'" in said and "--force" in said
    assert "gpu-large" not in this.names() and api.state.writes() == []

    files = _runner_root(tmp_path, this.id, f"{api.base}/octo/gpu")  # its .runner: gpu-twin
    on_it = release(tmp_path, api, "gpu-twin", nvml=GOOD_GPU, **laptop, **files)
    assert on_it.returncode == 0, on_it.stdout + on_it.stderr
    assert "gpu-large" in this.names() and "gpuci-quarantined" not in this.names()


# str.isdigit() passes "²" and 5,000 digits, and int() refuses both: before, each was an
# internal error (exit 3), of the release command, or of the smoke's last step over its verdict.
NOT_AN_ID = pytest.mark.parametrize("rid", ["²", "9" * 5000], ids=["superscript", "5000-digits"])


@NOT_AN_ID
def test_a_gitlab_release_of_no_plain_number_is_bad_input(tmp_path, api, rid):
    proc = cli(tmp_path, api, "runners", "release", rid, "--force", **gl(api))
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text
    assert "internal error" not in text and "released by numeric id" in text
    assert max(len(ln) for ln in text.splitlines()) < 1000  # the name is not echoed whole
    assert api.state.writes() == []


@NOT_AN_ID
def test_a_ci_runner_id_of_no_plain_number_is_one_warning_and_the_same_verdict(tmp_path, api, rid):
    env = gl(api, CI_RUNNER_ID=rid)
    proc = quarantine_smoke(tmp_path, api, BAD_GPU, "", **env)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1, text
    assert "internal error" not in text and "is not a runner id" in text
    assert api.state.writes() == []


def _hardware_verdict():
    from gpuci.errors import ExitCode
    from gpuci.runtime import Result

    result = Result(command="gpu-smoke", exit_code=ExitCode.CHECK_FAILED)
    result.report = {"checks": [{"name": "health", "gpu": 0, "status": "fail", "reason": "ECC"}]}
    return result


@pytest.mark.parametrize("forge", ["github", "gitlab"])
def test_a_cancel_midway_finds_the_way_back_already_in_the_log(monkeypatch, api, forge):
    """The runner's SIGTERM ends the process at once (and Ctrl-C raises wherever it lands):
    before, one between the first change and the annotation left the runner out of service
    with no word in the log. Now the way back is logged before the first change."""
    import io

    from gpuci import quarantine
    from gpuci.forges import _runner_admin as admin
    from gpuci.gpu.options import SmokeInputs
    from gpuci.runtime import Runtime

    logged = io.StringIO()

    def cancelled(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt  # where the cancel lands: the first change

    if forge == "github":
        api.state.add("gpu-node", "/repos/octo/gpu", ["gpu-large"])
        env = gh(api, RUNNER_NAME="gpu-node")
        monkeypatch.setattr(admin.GitHubRunnerLabels, "remove_label", cancelled)
        back = "python -m gpuci runners release gpu-node --labels gpu-large"
    else:
        this = api.state.add("gpu-b", "project:42")
        env = gl(api, CI_RUNNER_ID=str(this.id))
        monkeypatch.setattr(admin.GitLabRunnerPause, "set_paused", cancelled)
        back = f"python -m gpuci runners release {this.id} --forge gitlab"
    inputs = SmokeInputs(on_failure="quarantine", quarantine_labels=["gpu-large"])
    rt = Runtime(env, stdout=io.StringIO(), stderr=logged)
    with pytest.raises(KeyboardInterrupt):
        quarantine.after_verdict(_hardware_verdict(), inputs, rt)
    assert f"put it back with: {back}" in logged.getvalue()


def test_an_api_url_that_is_no_url_is_one_warning_and_the_same_verdict(tmp_path, api):
    """Before: httpx.InvalidURL out of the forge client: the smoke's verdict (exit 1) became
    an internal error (exit 3)."""
    this = api.state.add("gpu-b", "project:42")
    env = gl(api, CI_RUNNER_ID=str(this.id), CI_API_V4_URL="http://[::1")
    proc = quarantine_smoke(tmp_path, api, BAD_GPU, "", **env)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1, text
    assert "internal error" not in text and "runner not quarantined: CI_API_V4_URL=" in text


NOT_A_REPOSITORY = pytest.mark.parametrize(
    "repository", ["octo/g\npu", "octo/gpu\x1b", "octo/gpu/../../orgs/x", "octo/gpu?x=1", "../x"]
)


@NOT_A_REPOSITORY
def test_a_repository_that_is_no_owner_name_is_bad_input_for_release(tmp_path, api, repository):
    """Before: a control character was httpx.InvalidURL (an internal error), and ``..`` or
    ``?`` went into the API path as they were."""
    proc = release(tmp_path, api, "gpu-node", "--force", "--repository", repository, **gh(api))
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text
    assert "internal error" not in text and "runners release needs owner/name" in text
    assert api.state.writes() == []


@NOT_A_REPOSITORY
def test_a_github_repository_that_is_no_owner_name_is_one_warning(tmp_path, api, repository):
    api.state.add("gpu-node", "/repos/octo/gpu", ["gpu-large"])
    env = gh(api, RUNNER_NAME="gpu-node", GITHUB_REPOSITORY=repository)
    proc = quarantine_smoke(tmp_path, api, BAD_GPU, "gpu-large", **env)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1, text
    assert "internal error" not in text and "is not owner/name" in text
    assert api.state.writes() == []


def test_the_bus_ids_of_a_stuck_nvml_are_left_out_not_waited_for(monkeypatch):
    """The GPU just found failing is the one most likely to hold NVML: before, reading its bus
    id (after the labels were gone, before the annotation saying so) waited with it."""
    import threading

    from gpuci import quarantine
    from gpuci.gpu import _nvml

    released = threading.Event()

    class _Answered:
        def __enter__(self):
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def close(self) -> None:
            pass

        def snapshot(self):
            from types import SimpleNamespace

            return SimpleNamespace(gpus=[SimpleNamespace(index=0, pci_bus_id="0000:18:00.0")])

    def stuck(_env):
        released.wait(30)  # a test of the old code fails after this, rather than hangs
        return _Answered()

    monkeypatch.setattr(_nvml, "open_nvml", stuck)
    try:
        assert quarantine._bus_ids({"GPUCI_NVML_TIMEOUT": "0.05"}) == {}
    finally:
        released.set()


@pytest.mark.parametrize("planted", ["another runner", "no runner"])
def test_a_runner_file_a_job_planted_does_not_let_a_bad_runner_escape(tmp_path, api, planted):
    """``.runner`` lies in the runner's root, which a PR's job on it can write: one naming
    another runner's id (or none at all) made the lookup answer "no such runner", and the
    failing runner stayed in service. The name (``RUNNER_NAME``, the runner's own) decides
    then: the file names another runner, so it is not this one's."""
    this = api.state.add("gpu-node", "/repos/octo/gpu", ["gpu-large"])
    other = api.state.add("gpu-other", "/repos/octo/gpu", ["gpu-large"])
    agent = other.id if planted == "another runner" else 999_999
    files = _runner_root(tmp_path, agent, f"{api.base}/octo/gpu")
    proc = quarantine_smoke(
        tmp_path, api, BAD_GPU, "gpu-large", **gh(api, RUNNER_NAME="gpu-node", **files)
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "gpu-large" not in this.names() and "gpuci-quarantined" in this.names()
    assert other.names()[-1] == "gpu-large"  # the healthy runner keeps its label
    assert not [ln for ln in lines(proc, "::warning") if "quarantin" in ln]
