"""No secret prints, in part or in full: redact first, then cut; every URL redacted; a pod
plan names env variables without their values."""

from __future__ import annotations

import json
import os

import pytest

from forges.fake_github import FakeGitHub
from gpuci import redact
from gpuci.redact import excerpt, redact_url, redact_urls
from gpuci_testing import clean_env, run_cli

KEY = "rpa_SECRETKEY0123456789abcdef"


def leaked_part(text: str, secret: str, shortest: int = 6) -> str | None:
    """The longest piece (>= ``shortest`` chars) of ``secret`` that ``text`` shows, outside
    the ``::add-mask::`` lines that register it."""
    shown = "\n".join(ln for ln in text.splitlines() if "::add-mask::" not in ln)
    for size in range(len(secret), shortest - 1, -1):
        for start in range(len(secret) - size + 1):
            if secret[start : start + size] in shown:
                return secret[start : start + size]
    return None


# ----- redact first, then cut ------------------------------------------------------------------
def test_a_github_token_straddling_the_cut_is_not_printed_in_part(tmp_path):
    with FakeGitHub() as github:
        token = github.state.github_token
        message = "x" * 190 + token + " and more"  # the old cut at 200 fell inside the token
        github.state.answers[("GET", "/api/v3/repos/o/r/issues/7/comments")] = (
            422,
            {"message": message},
            {},
        )
        env = github.pull_request_env(tmp_path, "o/r", 7)
        proc = run_cli("report", "--comment", "--gpu-minutes", "1", env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "xxxxxxxx" in proc.stdout  # the message was printed...
    assert leaked_part(proc.stdout + proc.stderr, token) is None  # ...without a piece of it


def test_a_runpod_key_straddling_the_cut_is_not_printed_in_part(runpod):
    url = runpod(418, ("y" * 190 + KEY + " tail").encode())  # not JSON: the raw text
    env = clean_env(RUNPOD_API_KEY=KEY, RUNPOD_API_URL=url, GITHUB_ACTIONS="false")
    proc = run_cli("pods", "ls", env=env)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "yyyyyyyy" in proc.stdout
    assert leaked_part(proc.stdout + proc.stderr, KEY) is None


def test_excerpt_redacts_before_it_cuts():
    redact.register(KEY)
    text = "z" * 195 + KEY
    assert excerpt(text, 200) == "z" * 195 + "***"  # the whole key went, then nothing to cut
    assert (
        leaked_part(
            excerpt("q" * 180 + "ghp_tokenvalue99", 190, ["ghp_tokenvalue99"]),
            "ghp_tokenvalue99",
            4,
        )
        is None
    )


# ----- every URL printed is redacted -----------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:hunter2pass@h:9/p?token=tok3n&a=1", "http://***@h:9/p?token=***&a=1"),
        ("file://user:hunter2pass@/srv/cache", "file://***@/srv/cache"),
        (
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA1&X-Amz-Signature=abc&x-id=GetObject",
            "https://b.s3.amazonaws.com/k?X-Amz-Credential=***&X-Amz-Signature=***&x-id=GetObject",
        ),
        ("https://h/cb#access_token=tok3n", "https://h/cb#access_token=***"),
        ("https://h/p?opaqueTOKENvalue", "https://h/p?***"),
        ("http://[::1", "***"),
    ],
)
def test_redact_url(url, shown):
    assert redact_url(url) == shown
    assert redact_urls(f"see ({url}).") == f"see ({shown})."
    assert redact_urls(redact_urls(url)) == redact_urls(url)  # twice is once


@pytest.mark.parametrize("extra", [[], ["--json"], ["--dry-run", "--json"]])
def test_a_password_in_endpoint_url_is_never_printed(tmp_path, extra):
    env = clean_env(
        AWS_ACCESS_KEY_ID="AKIAEXAMPLE",
        AWS_SECRET_ACCESS_KEY="secretsecret",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_MAX_ATTEMPTS="2",  # a retry prints what eight tries do, less 30 s of backoff
    )
    endpoint = "http://user:hunter2pass@127.0.0.1:9/?token=tok3n"
    proc = run_cli(
        "cache-weights",
        "restore",
        "--key",
        "k",
        "--path",
        str(tmp_path / "p"),
        "--store",
        "s3://bucket/p",
        "--endpoint-url",
        endpoint,
        *extra,
        env=env,
    )
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    text = proc.stdout + proc.stderr
    assert "127.0.0.1" in text or extra  # the endpoint is named...
    assert "hunter2pass" not in text and "tok3n" not in text  # ...without its secrets


def test_a_password_in_a_file_store_url_is_never_printed(tmp_path):
    for extra in ([], ["--json"]):
        proc = run_cli(
            "cache-weights",
            "save",
            "--key",
            "k",
            "--path",
            str(tmp_path),
            "--store",
            f"file://user:hunter2pass@{tmp_path}/store",
            *extra,
        )
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "hunter2pass" not in proc.stdout + proc.stderr


# ----- a plan names env variables, never their values ----------------------------------------
def test_pods_up_plan_shows_env_names_not_values():
    # Off CI the owner is git's user, else $USER: hide git's config so $USER decides.
    env = clean_env(USER="tester", GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    proc = run_cli(
        "pods",
        "up",
        "--dry-run",
        "--json",
        "--gpu-types",
        "NVIDIA L40S",
        "--image",
        "img",
        "--command",
        "python serve.py",
        "--env",
        "DATABASE_URL=postgres://app:dbpass99@db/x\nMODE=plainvalue7\nHF_TOKEN=hf_zz9",
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for value in ("dbpass99", "plainvalue7", "hf_zz9"):
        assert value not in proc.stdout + proc.stderr
    body = json.loads(proc.stdout)["report"]["plan"]["requests"][0]["body"]
    assert {k: body["env"][k] for k in ("DATABASE_URL", "MODE", "HF_TOKEN")} == dict.fromkeys(
        ("DATABASE_URL", "MODE", "HF_TOKEN"), "***"
    )
    assert body["env"]["GPUCI_OWNER"] == "tester"  # gpu-ci's own tags are the plan's point


def test_a_query_echoed_without_its_url_is_redacted():
    """A hostile server echoing our presigned request line as its status line."""
    line = "GET /b/k?X-Amz-Credential=AKIAX/s3&X-Amz-Signature=abc99&x-id=GetObject HTTP/1.1"
    shown = excerpt(line, 80)
    assert "AKIAX" not in shown and "abc99" not in shown and "x-id=GetObject" in shown
    assert excerpt("env line 'X' is not KEY=VALUE") == "env line 'X' is not KEY=VALUE"
