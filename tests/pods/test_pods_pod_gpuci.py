"""gpu-ci onto a stock image for the smoke before handover: ``up`` gives the pod a pinned
``GPUCI_PACKAGE`` (the action's own repository at the commit its ref names), and a pod whose
image has no gpu-ci installs it and then smokes; a refused install is named in one line.

The pod's image is simulated by a python whose path hides gpu-ci (a stub ``gpuci`` that will
not import); what it installs is a source archive of this checkout, pinned by ``#sha256=``, whose
requirements.lock pins one toy wheel pip finds offline (pod_sources); what the pod runs to
install it: test_pods_pod_install.py.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest
from pod_host import PodHost
from pod_sources import gpuci_files, offline_pip, pinned, source_archive, toy_lock, wheel

from gpuci.pods.health import _handover as handover
from gpuci.pods.health import _pod_gpuci as pod_gpuci

GPU = "NVIDIA GeForce RTX 4090"
UP = dict(gpu_types=GPU, image="runpod/pytorch", command="sleep 600", ttl="30m", owner="alice")
SMOKE = dict(UP, smoke="true")
SHA = "0123456789abcdef0123456789abcdef01234567"


REAL_TIME_CLOCK = True  # the conftest's ``clock``: the pods' own timers run on the real time
BAD_DCS = ()  # the conftest's ``host``: pods boot with this checkout's gpu-ci, healthy GPUs


def _posted_env(fake) -> dict[str, str]:
    (call,) = fake.calls("POST", "/v2/pods")
    return call.body["env"]


def _stock_image(tmp_path: Path) -> str:
    """A PYTHONPATH on which ``import gpuci`` fails, as on an image without gpu-ci."""
    stub = tmp_path / "no-gpuci"
    (stub / "gpuci").mkdir(parents=True)
    (stub / "gpuci" / "__init__.py").write_text("raise ImportError('not on this image')\n")
    return str(stub)


def test_the_pod_gets_the_action_source_at_the_commit_its_ref_names(fake, run, host, api):
    api.state.commits["octo/gpu-ci@v1"] = SHA
    res = run("up", smoke="true", gpuci_source="octo/gpu-ci@v1", extra_env=api.github_env(), **UP)
    assert res.code == 0, res.stdout + res.stderr
    assert _posted_env(fake)["GPUCI_PACKAGE"] == f"git+https://github.com/octo/gpu-ci@{SHA}"
    asked = [p for _, p, _ in api.state.requests if "/commits/" in p]
    assert len(asked) == 1 and asked[0].endswith("/repos/octo/gpu-ci/commits/v1")


def test_a_commit_ref_is_used_as_it_is_without_asking(fake, run, host):
    res = run("up", smoke="true", gpuci_source=f"octo/gpu-ci@{SHA}", **UP)
    assert res.code == 0, res.stdout
    assert _posted_env(fake)["GPUCI_PACKAGE"] == f"git+https://github.com/octo/gpu-ci@{SHA}"


def test_a_ref_that_does_not_resolve_is_one_warning_and_no_install(fake, run, host, api):
    res = run("up", smoke="true", gpuci_source="octo/gpu-ci@v9", extra_env=api.github_env(), **UP)
    assert res.code == 0, res.stdout
    assert "GPUCI_PACKAGE" not in _posted_env(fake)
    (line,) = [a["message"] for a in res.json["annotations"] if "octo/gpu-ci@v9" in a["message"]]
    assert "could not resolve" in line and "\n" not in line and "commit SHA" in line


def test_an_unpinned_url_is_planned_with_a_warning_and_none_sends_nothing(run):
    url = "https://x.test/gpu-ci/v1.tar.gz"
    said: list[str] = []
    assert pod_gpuci.resolve(url, {}, said.append) == url
    (line,) = said
    assert "names no commit or hash" in line and "#sha256=" in line
    assert pod_gpuci.resolve("none", {"GPUCI_PACKAGE": url}, said.append) == ""
    plan = run("up", dry_run=True, smoke="true", gpuci_source="octo/gpu-ci@v1", **UP)
    body = plan.json["report"]["plan"]["requests"][0]["body"]
    assert body["env"]["GPUCI_PACKAGE"] == "git+https://github.com/octo/gpu-ci@v1"


def test_the_default_outside_actions_is_gpuci_package(fake, run, host):
    url = f"git+https://example.test/gpu-ci@{SHA}"
    res = run("up", smoke="true", extra_env={"GPUCI_PACKAGE": url}, **UP)
    assert res.code == 0, res.stdout
    assert _posted_env(fake)["GPUCI_PACKAGE"] == url
    assert not any("GPUCI_PACKAGE" in a["message"] for a in res.json["annotations"])


def test_the_gpuci_sources_credentials_are_masked_for_the_runners_log(run):
    """The pod needs a private archive's user:token, so up sends it; in Actions it is
    registered with the runner's masker first, so no later line of any step shows it."""
    url = f"https://deploy:{SECRET}@x.test/gpu-ci.tar.gz#sha256={'a' * 64}"
    github = {"GITHUB_ACTIONS": "true"}
    plan = run("up", dry_run=True, smoke="true", gpuci_source=url, extra_env=github, **UP)
    assert f"::add-mask::{SECRET}" in plan.stderr.splitlines()


def _stock_host(fake, clock, tmp_path: Path) -> PodHost:
    """Pods whose image has no gpu-ci, whose pip finds only the toy wheel."""
    env = {"PYTHONPATH": _stock_image(tmp_path), **offline_pip(tmp_path)}
    return PodHost(fake, tmp_path, (), **env).attach(clock)


def test_a_stock_image_installs_gpu_ci_then_smokes(fake, run, clock, tmp_path):
    host = _stock_host(fake, clock, tmp_path)
    source = pinned(source_archive(tmp_path, toy_lock(tmp_path)))
    res = run("up", smoke="true", gpuci_source=source, **UP)
    assert res.code == 0, res.stdout + res.stderr
    (log,) = host.booted.values()
    assert "installing gpu-ci for the smoke" in log, log
    pod = fake.pods[res.outputs["pod-id"]]
    assert pod["name"].endswith(" smoke passed"), log
    assert not any("handed over unchecked" in a["message"] for a in res.json["annotations"])


def test_a_refused_install_is_named_in_one_line(fake, run, clock, tmp_path):
    host = _stock_host(fake, clock, tmp_path)
    source = pinned(source_archive(tmp_path, toy_lock(tmp_path)))
    wrong = source.rsplit("=", 1)[0] + "=" + "0" * 64  # bytes that are not the pinned ones
    res = run("up", smoke="true", gpuci_source=wrong, **UP)
    assert res.code == 0, res.stdout + res.stderr
    (line,) = [a["message"] for a in res.json["annotations"] if "unchecked" in a["message"]]
    assert "gpu-ci install from GPUCI_PACKAGE failed" in line and "\n" not in line
    (log,) = host.booted.values()
    assert "smoke skipped" in log and "Traceback" not in log


def test_a_wheel_is_handed_over_unchecked_with_one_line_saying_why(fake, run, clock, tmp_path):
    """A pinned wheel pins gpu-ci alone: its dependencies would come unpinned from the index,
    so the pod installs nothing and the smoke is skipped, named in one line."""
    host = _stock_host(fake, clock, tmp_path)
    path = wheel(tmp_path / "gpuci-0.0.0-py3-none-any.whl", "gpuci", "0.0.0", gpuci_files())
    res = run("up", smoke="true", gpuci_source=pinned(path), **UP)
    assert res.code == 0, res.stdout + res.stderr
    (line,) = [a["message"] for a in res.json["annotations"] if "unchecked" in a["message"]]
    assert "requirements.lock" in line and "cannot be pinned" in line and "\n" not in line
    (log,) = host.booted.values()
    assert "smoke skipped" in log and "Traceback" not in log


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.example/x.tar.gz?v=@" + "a" * 40,  # a commit pins only a git URL
        "https://x.example/y.whl#egg=gpuci@" + "a" * 40,
        "https://user:s3cret@index.example/gpuci.tar.gz",
    ],
)
def test_a_url_pinned_by_nothing_warns_and_never_prints_its_credentials(url):
    warned: list[str] = []
    assert pod_gpuci.resolve(url, {}, warned.append) == url
    assert len(warned) == 1 and "names no commit or hash" in warned[0]
    assert "s3cret" not in warned[0]


def test_a_repository_of_dots_is_not_a_repository():
    warned: list[str] = []
    got = pod_gpuci.resolve("../..@main", {}, warned.append)
    assert got == "../..@main" and "names no commit or hash" in warned[0]  # a URL, unpinned


SECRET = "s3cretTok3n"


def test_credentials_in_gpuci_source_reach_no_name_log_or_warning(fake, run, clock, tmp_path):
    """urllib read the password as a port and its error quoted it: the pod wrote it into its
    log and, through RunPod's API, its name, and up printed it. Now the pod says why in one
    line without it (and no traceback), and up's warning holds none of it."""
    host = _stock_host(fake, clock, tmp_path)
    source = pinned(source_archive(tmp_path, toy_lock(tmp_path)))
    url = f"https://deploy:{SECRET}@localhost/gpu-ci.tar.gz#{source.split('#')[1]}"
    res = run("up", smoke="true", gpuci_source=url, **UP)
    assert res.code == 0, res.stdout + res.stderr
    (log,) = host.booted.values()
    pod = fake.pods[res.outputs["pod-id"]]
    for said in (log, pod["name"], res.stdout, res.stderr):
        assert SECRET not in said and "Traceback" not in said, said
    (line,) = [a["message"] for a in res.json["annotations"] if "unchecked" in a["message"]]
    assert "cannot download it" in line, line


@pytest.mark.parametrize("password", [SECRET, "p@ss w0rd!x"])
def test_up_takes_the_url_s_secret_out_of_what_a_pod_wrote(password: str):
    """The second line of defence: a secret that reached the pod's name anyway (as sent, or
    as the name's character set left it) never reaches up's warning."""
    package = f"https://deploy:{quote(password, safe='')}@h.example/g.tar.gz"
    pod = {"name": f"gpuci-1 smoke skipped: failed: port: deploy:{password}@h.example"}
    verdict = handover.verdict_of(pod)
    assert verdict is not None and verdict.kind == "skipped"
    said = handover.reason(verdict, package)
    assert "failed: port" in said and "h.example" in said, said
    assert "s3cret" not in said and "w0rd" not in said, said
