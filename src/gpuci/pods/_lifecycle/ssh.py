"""SSH into a pod: keys in at create time, a printable ``ssh`` command out, ``pods exec``.

RunPod provisions SSH when a pod is created with ``startSsh``: the image's sshd trusts the keys
in the pod's ``PUBLIC_KEY`` env (without one, the account's registered keys). gpu-ci passes the
keys it is given in ``PUBLIC_KEY`` rather than replacing the account's key list (``PUT
/v2/account/ssh-keys`` replaces every key, other people's included), and publishes ``22/tcp``
so the pod's ``ssh.direct`` endpoint exists: the proxy carries interactive shells only.

The private key (``RUNPOD_SSH_PRIVATE_KEY``) is masked whenever a pods command runs and is read
only by ``pods exec``, which writes it to a 0600 file in a private temporary folder for the
length of one ``ssh`` call.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuci import settings, untrusted_child
from gpuci.errors import CheckFailed, InfraError, InputError
from gpuci.pods.options import ExecInputs

# RunPod's UpdateSshKeysRequest pattern: an authorized_keys line.
_KEY = re.compile(r"^(ssh|ecdsa|sk)-[^\s]+ [^\s]+([ \t][^\n\r]*)?$")
# A host or username from RunPod's answer goes on ssh's command line: one starting with '-'
# would be read as an option (``-Fcfg``: a config file from the working folder, ProxyCommand).
_HOST = re.compile(r"(?!-)[A-Za-z0-9.:-]{1,253}")  # fullmatch: `$` lets a final "\n" through
_USER = re.compile(r"(?!-)[A-Za-z0-9._-]{1,128}")
OUTPUT_CAP = 64 * 1024


def public_keys(lines: Sequence[str] | None, environ: Mapping[str, str]) -> list[str]:
    """The keys from the input, else ``RUNPOD_SSH_PUBLIC_KEYS`` (one per line)."""
    raw = list(lines or []) or settings.RUNPOD_SSH_PUBLIC_KEYS.value(environ).splitlines()
    keys = [k.strip() for k in raw if k.strip()]
    for key in keys:
        if not _KEY.match(key):
            raise InputError(
                f"ssh public key '{key[:24]}...' is not an authorized_keys line",
                hint="paste the .pub file's line, e.g. 'ssh-ed25519 AAAA... me@laptop'",
            )
    return keys


def endpoint(pod: Mapping[str, Any], direct_only: bool = False) -> dict[str, Any] | None:
    """host, port, username of the pod's SSH (direct first), checked: a server's answer."""
    block = pod.get("ssh") or {}
    for kind in ("direct",) if direct_only else ("direct", "proxy"):
        item = block.get(kind) if isinstance(block, dict) else None
        if not isinstance(item, dict):
            continue
        host, port, user = item.get("host"), item.get("port"), item.get("username")
        if (
            isinstance(host, str)
            and _HOST.fullmatch(host)
            and isinstance(port, int)
            and 0 < port < 65536
            and isinstance(user, str)
            and _USER.fullmatch(user)
        ):
            return {"kind": kind, "host": host, "port": port, "user": user}
    return None


def command_line(ep: Mapping[str, Any]) -> str:
    return f"ssh {ep['user']}@{ep['host']} -p {ep['port']}"


def _direct_endpoint(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod's checked direct endpoint; none (exit 2) or one ssh cannot take (exit 3)."""
    ep = endpoint(pod, direct_only=True)
    if ep is not None:
        return ep
    block = pod.get("ssh")
    if isinstance(block, dict) and block.get("direct") is not None:
        raise InfraError(
            f"pod {pod.get('id')}: RunPod's ssh.direct endpoint is unusable (a host, port or "
            "username ssh cannot take as given, e.g. one starting with '-')",
            hint="check RUNPOD_API_URL points at RunPod's REST API v2; retry, or recreate the pod",
        )
    raise InputError(
        f"pod {pod.get('id')} has no direct SSH endpoint",
        hint="create it with ssh-public-keys (which publishes 22/tcp) and wait for RUNNING",
    )


def run_remote(
    pod: Mapping[str, Any], command: str, environ: Mapping[str, str], timeout_s: float
) -> tuple[int, str]:
    """Run ``command`` on the pod over its direct SSH; (exit status, combined output)."""
    key = settings.RUNPOD_SSH_PRIVATE_KEY.raw(environ) or ""
    if not key.strip():
        raise InputError(
            f"pods exec needs {settings.RUNPOD_SSH_PRIVATE_KEY.name}",
            hint="set it from a secret: the private key matching ssh-public-keys",
        )
    ep = _direct_endpoint(pod)
    ssh = shutil.which("ssh", path=environ.get("PATH"))
    if ssh is None:
        raise InfraError("no ssh client on PATH", hint="install openssh-client")
    hidden = (settings.RUNPOD_SSH_PRIVATE_KEY.name, settings.RUNPOD_API_KEY.name)
    child_env = {k: v for k, v in environ.items() if k not in hidden}
    with tempfile.TemporaryDirectory(prefix="gpuci-ssh-") as folder:
        os.chmod(folder, 0o700)
        key_file = Path(folder) / "id"
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(key.strip() + "\n")
        argv = [
            ssh,
            "-i", str(key_file),
            "-l", ep["user"],
            "-p", str(ep["port"]),
            "-o", "BatchMode=yes",
            "-o", "IdentitiesOnly=yes",
            "-o", "StrictHostKeyChecking=accept-new",  # a pod is new every time
            "-o", f"UserKnownHostsFile={Path(folder) / 'known_hosts'}",
            "-o", "ConnectTimeout=20",
            "--",  # nothing after it is an option, whatever RunPod answered
            ep["host"],
            command,
        ]  # fmt: skip
        try:
            code, output = untrusted_child.run(
                argv, timeout=timeout_s, limit=OUTPUT_CAP, env=child_env, stderr=True, tail=True
            )
        except TimeoutError:
            raise InfraError(
                f"ssh to {ep['host']} ran past {timeout_s:.0f}s", hint="raise timeout"
            ) from None
        except OSError as exc:
            raise InfraError(
                f"ssh could not be started: {exc.strerror or exc}", hint="install openssh-client"
            ) from None
    if code == 255:
        raise InfraError(
            f"ssh to {ep['user']}@{ep['host']}:{ep['port']} failed: {output.strip()[-300:]}",
            hint="check the key pair, that the pod is RUNNING and its 22/tcp port",
        )
    return code, output


def exec_on_pod(inp: ExecInputs, rt: Any, clock: Any = None) -> Any:
    """``pods exec --pod-id ID -- CMD``: run one command on a pod over SSH."""
    from gpuci.pods._runpod.client import NotFound, RunPodClient
    from gpuci.pods._runpod.clock import SYSTEM
    from gpuci.runtime import Result

    ids = inp.pod_id
    if len(ids) != 1:
        raise InputError("pods exec needs exactly one pod-id", hint="pass --pod-id ID")
    command = inp.command.strip()
    if not command:
        raise InputError("pods exec needs a command", hint="pods exec --pod-id ID -- CMD ...")
    rt.mask(settings.RUNPOD_SSH_PRIVATE_KEY.raw(rt.environ))
    if rt.dry_run:
        return Result(command="pods exec", headline=f"would run on {ids[0]}: {command}")
    with RunPodClient.from_env(rt.environ, rt.mask, clock or SYSTEM) as client:
        pod = client.get_pod(ids[0])
    if pod is None:
        raise NotFound(f"pod {ids[0]} not found", hint="check the id with `pods ls`")
    status, output = run_remote(pod, command, rt.environ, float(inp.timeout or 600))
    for line in output.splitlines():
        rt.log(line)
    result = Result(command="pods exec", headline=f"{ids[0]}: '{command}' exited {status}")
    result.outputs = {"exit-status": status}
    result.report = {"pod": ids[0], "exit_status": status, "output_tail": output[-4000:]}
    if status != 0:
        failed = Result.from_error(
            "pods exec",
            CheckFailed(
                f"{ids[0]}: '{command}' exited {status}",
                hint="see the command's output above",
            ),
        )
        failed.outputs, failed.report = result.outputs, {**result.report, **failed.report}
        return failed
    return result
