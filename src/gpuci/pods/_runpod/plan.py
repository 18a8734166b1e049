"""What ``up`` will ask RunPod for: the candidates in order and the exact create bodies.

Pure functions of the inputs (and, outside dry runs, the catalog), so ``--dry-run --json``
shows byte for byte what would be sent, and tests can compare against the fake's record.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuci.errors import InputError
from gpuci.pods._runners import registry as runners
from gpuci.pods._runpod import selfstop
from gpuci.pods._runpod.naming import PodTag
from gpuci.pods.health import _handover as handover

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRETISH = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|KEY|CREDENTIAL)", re.IGNORECASE)
_PORT = re.compile(r"^\d{1,5}/(http|tcp)$")
USABLE = ("HIGH", "MEDIUM", "LOW")
# RunPod: "You can configure up to 50 environment variables per Pod."
# (docs.runpod.io/pods/templates/environment-variables). No value-length limit is published.
MAX_ENV_VARS = 50


@dataclass(frozen=True)
class Candidate:
    gpu_id: str
    data_centers: tuple[str, ...] = ()

    def label(self) -> str:
        where = ", ".join(self.data_centers) if self.data_centers else "any data centre"
        return f"{self.gpu_id} @ {where}"


@dataclass
class PodSpec:
    image: str
    command: str = ""
    env: dict[str, str] = field(default_factory=dict)
    ports: list[str] = field(default_factory=list)
    disk_gb: int = 50
    gpu_count: int = 1
    cloud: str = "SECURE"
    ssh_keys: list[str] = field(
        default_factory=list
    )  # authorized_keys lines (gpuci.pods._lifecycle.ssh)
    # gpu-ci's own env for a runner pod (gpuci.pods._runners.registry.pod_env): set after
    # registering
    runner_env: dict[str, str] = field(default_factory=dict, repr=False)
    smoke: bool = False  # gpu-smoke on the pod before handover (gpuci.pods.health._handover)
    gpuci_package: str = ""  # where the pod installs gpu-ci for it (gpuci.pods.health._pod_gpuci)


def parse_env(lines: Sequence[str] | None, mask: Callable[[str], None]) -> dict[str, str]:
    """``KEY=VALUE`` per line; values of secret-looking keys are masked at once."""
    env: dict[str, str] = {}
    for line in lines or []:
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not _ENV_KEY.match(key):
            raise InputError(
                f"env line '{key}' is not KEY=VALUE",
                hint="write one KEY=VALUE per line in the env input",
            )
        if key.startswith("GPUCI_"):
            raise InputError(
                f"env {key} is reserved for gpu-ci's pod tags",
                hint="rename the variable; GPUCI_* carry owner, run URL and expiry",
            )
        if _SECRETISH.search(key):
            mask(value)
        env[key] = value
    return env


def check_ports(ports: Sequence[str] | None) -> list[str]:
    out = []
    for port in ports or []:
        if not _PORT.match(port):
            raise InputError(
                f"port '{port}' is not PORT/http or PORT/tcp",
                hint="write ports like 8000/http,22/tcp",
            )
        out.append(port)
    return out


def candidates(
    gpu_types: Sequence[str],
    data_centers: Sequence[str] = (),
    catalog: Sequence[dict[str, Any]] | None = None,
) -> list[Candidate]:
    """Preferred GPU types in order; per type, the data centres to try.

    With explicit ``data-centers`` each (GPU, data centre) pair is a candidate, in order.
    Otherwise one candidate per GPU type, with the data centres the catalog reports stock in
    (most stock first) as ``dataCenterIds``; none known means the scheduler chooses.
    """
    if data_centers:
        return [Candidate(g, (dc,)) for g in gpu_types for dc in data_centers]
    by_id = {g["id"]: g for g in catalog or []}
    out = []
    rank = {level: i for i, level in enumerate(USABLE)}
    for gpu in gpu_types:
        dcs = (by_id.get(gpu) or {}).get("dataCenters") or []
        usable = sorted(
            (d for d in dcs if d.get("availability") in rank),
            key=lambda d: rank[d["availability"]],
        )
        out.append(Candidate(gpu, tuple(d["id"] for d in usable)))
    return out


def create_body(spec: PodSpec, tag: PodTag, candidate: Candidate, api_url: str) -> dict[str, Any]:
    """The createPod body (validated by the tests against ``CreatePodRequest``)."""
    env = {**spec.env, **tag.env(), **spec.runner_env}
    body: dict[str, Any] = {
        "name": tag.name(),
        "image": spec.image,
        "gpu": {"id": candidate.gpu_id, "count": spec.gpu_count},
        "cloud": spec.cloud,
        "disk": spec.disk_gb,
        "env": env,
    }
    if spec.smoke:
        env.update(handover.pod_env(tag.name(), spec.gpuci_package))
    if spec.command:
        # a runner pod's start script has the gate itself (before the runner starts)
        gate = spec.smoke and not spec.runner_env
        args, wrapper_env = selfstop.wrap(spec.command, api_url, gate)
        body["args"] = args
        env.update(wrapper_env)
    ports = list(spec.ports)
    if spec.ssh_keys:
        # startSsh + PUBLIC_KEY: sshd trusts exactly these keys; 22/tcp gives ssh.direct
        body["startSsh"] = True
        env["PUBLIC_KEY"] = "\n".join(spec.ssh_keys)
        if "22/tcp" not in ports:
            ports.append("22/tcp")
    if ports:
        body["ports"] = ports
    if candidate.data_centers:
        body["dataCenterIds"] = list(candidate.data_centers)
    return body


def check_env_count(body: Mapping[str, Any], user_env: Mapping[str, str]) -> None:
    """Refuse, before any API call, a create body whose env RunPod would refuse (over 50)."""
    total = len(body.get("env") or {})
    if total <= MAX_ENV_VARS:
        return
    ours = total - len(user_env)
    raise InputError(
        f"env has {total} variables ({len(user_env)} from the env input, {ours} added by "
        f"gpu-ci); RunPod allows at most {MAX_ENV_VARS} per pod",
        hint=f"pass at most {MAX_ENV_VARS - ours} env lines, e.g. by joining settings into one "
        "variable or baking them into the image",
    )


HIDDEN = "***"


def shown_body(body: dict[str, Any], user_env: Mapping[str, str]) -> dict[str, Any]:
    """The create body as a plan prints it: the names of the ``env`` input, never its values.

    A value's secrecy can't be told from its name (``DATABASE_URL``, ``HF_HOME`` holding a
    token), so every value the user gave is hidden; gpu-ci's own ``GPUCI_*`` tags (owner,
    expiry, run URL, the self-stop wrapper) are shown, being what the plan is about, except a
    runner's credential, which is a placeholder.
    """
    env = {
        k: (runners.PLACEHOLDER[k] if k in runners.SECRET_ENV else HIDDEN if k in user_env else v)
        for k, v in (body.get("env") or {}).items()
    }
    return {**body, "env": env}


def price_per_hr(
    catalog: Sequence[dict[str, Any]] | None, gpu_id: str, cloud: str, count: int
) -> float | None:
    """List price for ``count`` GPUs of this type in this cloud; None when unknown."""
    for gpu in catalog or []:
        if gpu.get("id") == gpu_id:
            price = (gpu.get("price") or {}).get(cloud.lower())
            return None if price is None else float(price) * count
    return None
