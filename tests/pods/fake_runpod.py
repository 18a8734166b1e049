"""A fake RunPod REST API v2 on 127.0.0.1: the subset gpu-ci uses, held to the OpenAPI contract.

Every request body is validated against the spec's own schema (``CreatePodRequest``,
``UpdatePodRequest``, ``PodActionRequest``) and refused with 422 exactly as the real API would;
cross-field rules the handler enforces answer 400. Pods move PROVISIONING -> STARTING ->
RUNNING one step per ``getPod``; actions follow the spec's transition table (409 otherwise);
billing accrues ``cost`` per RUNNING second on an injectable clock. Faults are scripted per
route: 429 with ``Retry-After``, 5xx, capacity (400), no access (403), low balance (402). It
speaks HTTP/1.1 with keep-alive and closes idle connections, as RunPod's front end does
(:mod:`fake_runpod_wire`, which also drops or garbles what a test scripts).

Beyond the schema: at most 50 env variables per pod (RunPod's docs, "Environment variables":
"You can configure up to 50 environment variables per Pod"; no value-length limit is published,
so none is enforced). Pod billing answers as ``listPodBilling`` describes: one record per pod
per bucket (``bucketSize``, default ``day``) over the window snapped out to bucket boundaries,
``lastN`` or ``startTime``/``endTime`` but not both, and no query parameter the spec lacks.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from fake_runpod_wire import Wire, handler_for
from loopback_http import LoopbackHTTPServer

# A verbatim copy of RunPod's published OpenAPI document, so the tests run anywhere.
SPEC_PATH = Path(__file__).with_name("runpod-openapi-v2.json")
SPEC = json.loads(SPEC_PATH.read_text())
_REGISTRY = Registry().with_resource(
    "urn:runpod", Resource.from_contents(SPEC, default_specification=DRAFT202012)
)


def validator(schema_name: str) -> Draft202012Validator:
    return Draft202012Validator(
        {"$ref": f"urn:runpod#/components/schemas/{schema_name}"}, registry=_REGISTRY
    )


VALIDATORS = {
    name: validator(name)
    for name in ("CreatePodRequest", "UpdatePodRequest", "PodActionRequest", "Pod")
}


def _gpu(
    gpu_id: str, name: str, pool: str, memory: int, price: tuple[float, float],
    most: tuple[int, int], availability: str, *dcs: tuple[str, str, str],
) -> dict[str, Any]:  # fmt: skip
    """One listGpuTypes entry: ``price`` and ``most`` (maxCount) secure then community; a
    cloud with no price does not offer the type."""
    return {
        "id": gpu_id,
        "name": name,
        "pool": pool,
        "manufacturer": "NVIDIA",
        "memory": memory,
        "secure": price[0] > 0,
        "community": price[1] > 0,
        "price": {"secure": price[0], "community": price[1]},
        "maxCount": {"secure": most[0], "community": most[1]},
        "availability": availability,
        "dataCenters": [{"id": i, "name": n, "availability": a} for i, n, a in dcs],
    }


TX3 = "US-TX-3", "US Texas 3"
CATALOG = [
    _gpu(
        "NVIDIA GeForce RTX 4090", "RTX 4090", "ADA_24", 24, (0.44, 0.31), (8, 4), "HIGH",
        ("US-KS-2", "US Kansas 2", "LOW"), ("EU-RO-1", "EU Romania 1", "HIGH"),
    ),
    _gpu("NVIDIA L40S", "L40S", "ADA_48_PRO", 48, (0.86, 0.0), (8, 0), "MEDIUM", (*TX3, "MEDIUM")),
    _gpu(
        "NVIDIA H100 80GB HBM3", "H100 SXM", "HOPPER_80", 80, (2.99, 0.0), (8, 0), "LOW",
        (*TX3, "LOW"),
    ),
]  # fmt: skip

PRICE = {g["id"]: g["price"] for g in CATALOG}
TRANSITIONS = {
    "RUNNING": ("stop", "restart", "terminate"),
    "EXITED": ("start", "terminate"),
    "ERROR": ("start", "terminate"),
    "PROVISIONING": ("stop", "terminate"),
    "STARTING": ("stop", "terminate"),
}


MAX_ENV_VARS = 50
BILLING_PARAMS = {"startTime", "endTime", "bucketSize", "lastN", "podId"}


def iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def parse_iso(text: str) -> float | None:
    """RFC 3339 (what the spec's ``date-time`` means) to epoch seconds; None if it is not."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.timestamp() if when.tzinfo is not None and "T" in text else None


def bucket_floor(ts: float, size: str) -> float:
    """The start of the UTC ``size`` bucket holding ``ts`` (weeks start on Monday)."""
    d = datetime.fromtimestamp(ts, timezone.utc)
    if size == "hour":
        d = d.replace(minute=0, second=0, microsecond=0)
    else:
        d = d.replace(hour=0, minute=0, second=0, microsecond=0)
        if size == "week":
            d -= timedelta(days=d.weekday())
        elif size == "month":
            d = d.replace(day=1)
        elif size == "year":
            d = d.replace(month=1, day=1)
    return d.timestamp()


def bucket_next(start: float, size: str) -> float:
    d = datetime.fromtimestamp(start, timezone.utc)
    if size in ("hour", "day", "week"):
        return start + {"hour": 3600, "day": 86400, "week": 7 * 86400}[size]
    if size == "month":
        y, m = (d.year + 1, 1) if d.month == 12 else (d.year, d.month + 1)
        return d.replace(year=y, month=m).timestamp()
    return d.replace(year=d.year + 1).timestamp()


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    auth: str
    status: int = 0


@dataclass
class FakeRunPod:
    api_key: str = field(default_factory=lambda: "rpa_" + secrets.token_hex(16))
    clock: Callable[[], float] = time.time
    steps_to_running: int = 2  # getPod calls spent in PROVISIONING and STARTING
    echo_key_in_401: bool = True  # a hostile server: proves we redact what comes back
    no_capacity: set[str] = field(default_factory=set)  # "gpu" or "gpu@dc"
    forbidden: set[str] = field(default_factory=set)
    balance_low: bool = False
    lose_create_responses: int = 0  # create the pod, then answer 503 (a lost response)
    fail_on_start: set[str] = field(default_factory=set)  # GPU ids whose pods go ERROR
    create_delay: float = 0.0  # seconds between creating a pod and answering the create call
    delete_delay: float = 0.0  # seconds a terminate (DELETE) takes before it is done
    # Each pod gets its own pod-scoped key (RUNPOD_API_KEY inside the pod), which reaches only
    # its own pod's routes: get, stop and remove, as RunPod's docs name them. Whether it may
    # PATCH (rename) its pod the spec does not say: on by default, off to test a refusal.
    pod_key_may_rename: bool = True
    # Pods whose GPUs were taken while they were stopped: RunPod's docs say a restarted pod
    # "may be reallocated 0 GPUs"; start then answers RUNNING with gpu.count 0.
    zero_gpus_on_start: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        # podId -> (from, to, USD/h) spans billed so far (they survive termination); a test
        # may add its own with ``charge``
        self.spans: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
        self.running_since: dict[str, float] = {}
        self.requests: list[Recorded] = []
        self.faults: dict[str, list[tuple[int, dict[str, str]]]] = {}
        self.terminated_at: dict[str, float] = {}
        self.created_at: dict[str, float] = {}
        self.lock = threading.RLock()
        self.pod_keys: dict[str, str] = {}  # pod id -> its pod-scoped key
        self.restarts: list[str] = []  # pods restarted by an update of their env
        self.delete_started = threading.Event()  # a DELETE arrived (set before its delay)
        self._server: LoopbackHTTPServer | None = None
        # HTTP/1.1 with keep-alive, what the wire drops or garbles, the fake's own failures
        self.wire = Wire()

    # ----- harness -----------------------------------------------------------------------
    def start(self) -> FakeRunPod:
        self._server = LoopbackHTTPServer(handler_for(self)).__enter__()
        return self

    def stop(self) -> None:
        if self._server:
            self.wire.close_all()
            self._server.__exit__()

    def __enter__(self) -> FakeRunPod:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.port}"

    def api(self, method: str, target: str, body: Any = None) -> tuple[int, Any]:
        """One call with the account key, answered in process: (status, answer)."""
        raw = b"" if body is None else json.dumps(body).encode()
        status, _, answer = self.handle(method, target, raw, f"Bearer {self.api_key}")
        return status, answer

    def hand_made(self, name: str, status: str = "") -> str:
        """A pod made by hand (no gpu-ci tag) on an L40S, put in ``status`` if one is given."""
        code, pod = self.api(
            "POST", "/v2/pods", {"name": name, "image": "img", "gpu": {"id": "NVIDIA L40S"}}
        )
        assert code == 201, pod
        if status:
            self._set_status(self.pods[pod["id"]], status)
        return pod["id"]

    def fail(self, route: str, *answers: tuple[int, dict[str, str]]) -> None:
        """Script the next answers for ``"POST /v2/pods"`` (or any ``METHOD path``)."""
        self.faults.setdefault(route, []).extend(answers)

    def calls(self, method: str | None = None, path: str | None = None) -> list[Recorded]:
        return [
            r
            for r in self.requests
            if (method is None or r.method == method)
            and (path is None or re.fullmatch(path, r.path))
        ]

    # ----- model -------------------------------------------------------------------------
    def charge(self, pod_id: str, start: float, end: float, usd_per_hr: float) -> None:
        """Bill ``pod_id`` for [start, end) at ``usd_per_hr`` (a pod the test made up)."""
        with self.lock:
            self.spans[pod_id].append((start, end, usd_per_hr))

    def _accrue(self, pod_id: str, now: float) -> None:
        since = self.running_since.pop(pod_id, None)
        if since is not None:
            self.spans[pod_id].append((since, now, self.pods[pod_id]["cost"]))

    def _spans(self, pod_id: str) -> list[tuple[float, float, float]]:
        out = list(self.spans.get(pod_id, ()))
        since = self.running_since.get(pod_id)
        if since is not None and pod_id in self.pods:
            out.append((since, self.clock(), self.pods[pod_id]["cost"]))
        return out

    def billed_between(self, pod_id: str, start: float, end: float) -> float:
        """USD billed to ``pod_id`` for its running time inside [start, end)."""
        with self.lock:
            return sum(
                rate * max(0.0, min(b, end) - max(a, start)) / 3600
                for a, b, rate in self._spans(pod_id)
            )

    def _set_status(self, pod: dict[str, Any], status: str) -> None:
        now = self.clock()
        if pod["status"] == "RUNNING" and status != "RUNNING":
            self._accrue(pod["id"], now)
        if status == "RUNNING" and pod["status"] != "RUNNING":
            self.running_since[pod["id"]] = now
            pod["startedAt"] = iso(now)
        pod["status"] = status
        pod["actions"] = list(TRANSITIONS.get(status, ()))
        pod["runtime"] = {"uptime": 0, "ports": []} if status == "RUNNING" else None
        pod["ssh"] = (
            self._ssh_block(pod) if status == "RUNNING" else {"proxy": None, "direct": None}
        )

    def _ssh_block(self, pod: dict[str, Any]) -> dict[str, Any]:
        """SSH as RunPod reports it: the proxy always, direct only with 22/tcp published; a
        pod created without startSsh (or with no keys) reports blocks but accepts no key."""
        user = f"{pod['id']}-64411eb2"
        proxy = {
            "host": "ssh.runpod.io",
            "port": 22,
            "username": user,
            "command": f"ssh {user}@ssh.runpod.io",
        }
        direct = None
        if "22/tcp" in (pod.get("ports") or []):
            port = 10000 + int(pod["id"][-3:], 16) % 50000
            direct = {
                "host": "203.0.113.7",
                "port": port,
                "username": "root",
                "command": f"ssh root@203.0.113.7 -p {port}",
            }
        return {"proxy": proxy, "direct": direct}

    def view(self, pod: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in pod.items() if k not in ("_steps", "_rate", "_ssh")}
        out["cost"] = (
            pod["_rate"] if pod["status"] in ("PROVISIONING", "STARTING", "RUNNING") else 0.0
        )
        return out

    def billed_now(self, pod_id: str) -> float:
        return self.billed_between(pod_id, float("-inf"), float("inf"))

    def self_stop_due(self) -> list[str]:
        """What the in-pod timers would do now: stop RUNNING pods past GPUCI_EXPIRES_EPOCH."""
        stopped = []
        with self.lock:
            for pod in self.pods.values():
                env = pod.get("env") or {}
                if "GPUCI_WRAPPER" not in env or pod["status"] != "RUNNING":
                    continue
                if int(env.get("GPUCI_EXPIRES_EPOCH", "0")) <= self.clock():
                    self._set_status(pod, "EXITED")
                    stopped.append(pod["id"])
        return stopped

    # ----- HTTP --------------------------------------------------------------------------
    def handle(
        self, method: str, target: str, raw: bytes, auth: str
    ) -> tuple[int, dict[str, str], Any]:
        parts = urlsplit(target)
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode(errors="replace")
        rec = Recorded(method, parts.path, parse_qs(parts.query), body, auth)
        with self.lock:
            self.requests.append(rec)
            status, headers, answer = self._route(method, parts.path, rec)
            rec.status = status
        return status, headers, answer

    @staticmethod
    def problem(status: int, detail: str, errors: list[str] | None = None) -> dict[str, Any]:
        # RunPod's spec names 422 as HTTP/1.1 did ("Unprocessable Entity"); Python 3.13's
        # HTTPStatus says "Unprocessable Content"
        title = "Unprocessable Entity" if status == 422 else HTTPStatus(status).phrase
        out: dict[str, Any] = {"title": title, "status": status, "detail": detail}
        if errors:
            out["errors"] = errors
        return out

    def _invalid(self, schema: str, body: Any) -> tuple[int, dict[str, str], Any] | None:
        """RunPod's 422 for a ``body`` its ``schema`` refuses; None for a valid one."""
        errors = [
            f"$.{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
            for e in VALIDATORS[schema].iter_errors(body)
        ]
        return (
            (422, {}, self.problem(422, "Request validation failed.", errors)) if errors else None
        )

    def pod_key(self, pod_id: str) -> str:
        """The pod-scoped key RunPod puts in ``pod_id``'s env (the account key for a pod the
        fake never made)."""
        return self.pod_keys.get(pod_id, self.api_key)

    def _pod_key_refusal(
        self, method: str, path: str, rec: Recorded
    ) -> tuple[int, dict[str, str], Any] | None:
        """None when a pod-scoped key may do this; else RunPod's 403."""
        own = next((p for p, k in self.pod_keys.items() if rec.auth == f"Bearer {k}"), None)
        m = re.fullmatch(r"/v2/pods/([^/]+)(/action)?", path)
        if own is None or not m or m.group(1) != own:
            return 403, {}, self.problem(403, "this key is scoped to another pod")
        if method == "PATCH" and not self.pod_key_may_rename:
            return 403, {}, self.problem(403, "a pod-scoped key may not update the pod")
        action = rec.body.get("action") if isinstance(rec.body, dict) else None
        if m.group(2) and action not in ("stop", "terminate"):
            return 403, {}, self.problem(403, f"a pod-scoped key may not {action} the pod")
        return None

    def _route(self, method: str, path: str, rec: Recorded) -> tuple[int, dict[str, str], Any]:
        if rec.auth != f"Bearer {self.api_key}":
            if rec.auth in {f"Bearer {k}" for k in self.pod_keys.values()}:
                if refused := self._pod_key_refusal(method, path, rec):
                    return refused
            else:
                detail = f"invalid key {rec.auth}" if self.echo_key_in_401 else "invalid key"
                return 401, {}, self.problem(401, detail)
        route = f"{method} {path}"
        for pattern, queue in self.faults.items():
            if queue and re.fullmatch(pattern, route):
                status, headers = queue.pop(0)
                return status, headers, self.problem(status, f"scripted {status}")
        if route == "GET /v2/pods":
            return 200, {}, {"pods": [self.view(p) for p in self.pods.values()]}
        if route == "POST /v2/pods":
            return self._create(rec.body)
        if route == "GET /v2/catalog/gpus":
            return self._catalog(rec.query)
        if route == "GET /v2/billing/pods":
            return self._billing(rec.query)
        m = re.fullmatch(r"/v2/pods/([^/]+)(/action)?", path)
        if not m:
            return 404, {}, self.problem(404, "no such route")
        pod_id, is_action = m.group(1), bool(m.group(2))
        pod = self.pods.get(pod_id)
        if is_action and method == "POST":
            if refused := self._invalid("PodActionRequest", rec.body):
                return refused
            if pod is None:
                return 404, {}, self.problem(404, "pod not found")
            return self._action(pod, rec.body["action"])
        if pod is None:
            return 404, {}, self.problem(404, "pod not found")
        if method == "GET":
            if pod["_steps"] > 0 and pod["status"] in ("PROVISIONING", "STARTING"):
                pod["_steps"] -= 1
                if pod["_steps"] == 0:
                    failed = pod["gpu"]["id"] in self.fail_on_start
                    self._set_status(pod, "ERROR" if failed else "RUNNING")
                elif pod["status"] == "PROVISIONING":
                    self._set_status(pod, "STARTING")
            return 200, {}, self.view(pod)
        if method == "PATCH":
            if refused := self._invalid("UpdatePodRequest", rec.body):
                return refused
            if too_many := self._env_refusal(rec.body.get("env")):
                return too_many
            restart = any(  # RunPod's docs: updating env (or the image) restarts the pod
                k in rec.body and rec.body[k] != pod.get(k) for k in ("env", "image", "args")
            )
            for key in ("name", "env", "image", "args", "disk", "ports"):
                if key in rec.body:
                    pod[key] = rec.body[key]
            if restart and pod["status"] == "RUNNING":
                self._set_status(pod, "STARTING")
                pod["_steps"] = 1
                self.restarts.append(pod["id"])
            return 200, {}, self.view(pod)
        if method == "DELETE":
            return self._terminate(pod)
        return 405, {"Allow": "GET, PATCH, DELETE"}, self.problem(405, "method not allowed")

    def _create(self, body: Any) -> tuple[int, dict[str, str], Any]:
        if refused := self._invalid("CreatePodRequest", body):
            return refused
        if ("gpu" in body) == ("cpu" in body):
            return 400, {}, self.problem(400, "exactly one of gpu or cpu must be set")
        if too_many := self._env_refusal(body.get("env")):
            return too_many
        if self.balance_low:
            return 402, {}, self.problem(402, "insufficient balance")
        gpu = body["gpu"]["id"]
        dcs = body.get("dataCenterIds") or []
        if gpu in self.forbidden:
            return 403, {}, self.problem(403, f"no access to {gpu}")
        if gpu not in PRICE:
            return 400, {}, self.problem(400, f"unknown GPU type {gpu}")
        usable = [dc for dc in dcs if f"{gpu}@{dc}" not in self.no_capacity] if dcs else ["US-KS-2"]
        cloud_key = str(body.get("cloud", "SECURE")).lower()
        most = next((g["maxCount"].get(cloud_key, 0) for g in CATALOG if g["id"] == gpu), 8)
        if gpu in self.no_capacity or not usable or body["gpu"].get("count", 1) > most:
            return 400, {}, self.problem(400, f"There are no instances available for {gpu}")
        pod_id = "pod" + secrets.token_hex(5)
        cloud = body.get("cloud", "SECURE")
        rate = round(PRICE[gpu][cloud.lower()] * body["gpu"].get("count", 1), 4)
        pod = {
            "id": pod_id,
            "name": body["name"],
            "image": body["image"],
            "args": body.get("args", ""),
            "disk": body.get("disk", 20),
            "ports": body.get("ports", []),
            "env": body.get("env", {}),
            "registry": None,
            "status": "PROVISIONING",
            "actions": list(TRANSITIONS["PROVISIONING"]),
            "mounts": {},
            "gpu": {"id": gpu, "count": body["gpu"].get("count", 1)},
            "cloud": cloud,
            "dataCenterId": usable[0],
            "cudaVersion": "12.8",
            "ssh": {"proxy": None, "direct": None},
            "template": None,
            "cost": rate,
            "_rate": rate,
            "locked": False,
            "globalNetworking": {"enabled": False},
            "runtime": None,
            "createdAt": iso(self.clock()),
            "startedAt": None,
            "_steps": self.steps_to_running,
            "_ssh": bool(body.get("startSsh")) and bool((body.get("env") or {}).get("PUBLIC_KEY")),
        }
        self.pods[pod_id] = pod
        self.pod_keys[pod_id] = "rpk_" + secrets.token_hex(12)
        self.created_at[pod_id] = self.clock()
        if self.steps_to_running == 0:
            self._set_status(pod, "RUNNING")
        if self.lose_create_responses > 0:
            self.lose_create_responses -= 1
            return 503, {}, self.problem(503, "upstream timeout")
        return 201, {}, self.view(pod)

    def _catalog(self, query: dict[str, list[str]]) -> tuple[int, dict[str, str], Any]:
        """listGpuTypes: ``product`` (a comma list) is required with include=AVAILABILITY and
        valid only with it (400 either way); ``count`` and ``cloud`` only with it; ``cloud``
        keeps the types offered in that cloud, and ``count`` more GPUs than a type's
        ``maxCount`` there lists it with no availability anywhere."""
        one = {k: v[0] for k, v in query.items()}
        availability = "AVAILABILITY" in one.get("include", "").split(",")
        if availability != ("product" in one):
            detail = "product is required with include=AVAILABILITY, and valid only with it"
            return 400, {}, self.problem(400, detail)
        for key in ("count", "cloud"):
            if key in one and not availability:
                return 400, {}, self.problem(400, f"{key} is valid only with include=AVAILABILITY")
        for product in one.get("product", "POD").split(","):
            if product not in ("POD", "CLUSTER", "SERVERLESS"):
                return 400, {}, self.problem(400, f"unknown product {product}")
        cloud = one.get("cloud", "SECURE")
        if cloud not in ("SECURE", "COMMUNITY"):
            return 400, {}, self.problem(400, f"unknown cloud {cloud}")
        if "count" in one and not (one["count"].isdigit() and int(one["count"]) >= 1):
            return 422, {}, self.problem(422, "Request validation failed.", ["query.count"])
        count = int(one.get("count", "1"))
        gpus = []
        for gpu in CATALOG:
            if not gpu.get(cloud.lower()):
                continue
            if count > gpu["maxCount"][cloud.lower()]:
                none = [{**d, "availability": "NONE"} for d in gpu["dataCenters"]]
                gpu = {**gpu, "availability": "NONE", "dataCenters": none}
            gpus.append(gpu)
        return 200, {}, {"gpus": gpus}

    def _env_refusal(self, env: Any) -> tuple[int, dict[str, str], Any] | None:
        if env and len(env) > MAX_ENV_VARS:
            detail = f"env: at most {MAX_ENV_VARS} environment variables per pod, got {len(env)}"
            return 400, {}, self.problem(400, detail)
        return None

    def _terminate(self, pod: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        self._set_status(pod, "TERMINATED")
        self.terminated_at[pod["id"]] = self.clock()
        del self.pods[pod["id"]]
        return 204, {}, None

    def _action(self, pod: dict[str, Any], action: str) -> tuple[int, dict[str, str], Any]:
        if action not in TRANSITIONS.get(pod["status"], ()):
            return 409, {}, self.problem(409, f"cannot {action} a {pod['status']} pod")
        if action == "terminate":
            return self._terminate(pod)
        if action == "stop":
            self._set_status(pod, "EXITED")
        elif action == "start":
            self._set_status(pod, "STARTING")
            pod["_steps"] = 1
            if pod["id"] in self.zero_gpus_on_start:
                pod["gpu"] = {**pod["gpu"], "count": 0}
        return 200, {}, self.view(pod)

    def _billing(self, query: dict[str, list[str]]) -> tuple[int, dict[str, str], Any]:
        """listPodBilling: per pod per bucket, over the window snapped out to bucket edges."""
        errors = [f"query.{k}: unexpected parameter" for k in sorted(set(query) - BILLING_PARAMS)]
        errors += [f"query.{k}: given {len(v)} times" for k, v in query.items() if len(v) > 1]
        one = {k: v[0] for k, v in query.items()}
        size = one.get("bucketSize", "day")
        if size not in ("hour", "day", "week", "month", "year"):
            errors.append("query.bucketSize: value must be one of hour, day, week, month, year")
        times: dict[str, float] = {}
        for key in ("startTime", "endTime"):
            if key in one:
                at = parse_iso(one[key])
                if at is None:
                    errors.append(f"query.{key}: expected string to be RFC 3339 date-time")
                else:
                    times[key] = at
        last_n = one.get("lastN")
        if last_n is not None and not (last_n.isdigit() and int(last_n) >= 1):
            errors.append("query.lastN: expected integer >= 1")
        if errors:
            return 422, {}, self.problem(422, "Request validation failed.", errors)
        if last_n is not None and times:
            detail = "lastN is mutually exclusive with startTime/endTime"
            return 400, {}, self.problem(400, detail)
        now = self.clock()
        if last_n is not None:
            end = bucket_next(bucket_floor(now, size), size)
            start = bucket_floor(now, size)
            for _ in range(int(last_n) - 1):
                start = bucket_floor(start - 1, size)
        else:
            start = bucket_floor(times.get("startTime", now - 30 * 86400), size)
            end_at = times.get("endTime", now)
            end = (
                end_at
                if bucket_floor(end_at, size) == end_at
                else bucket_next(bucket_floor(end_at, size), size)
            )
        if end <= start:
            return 400, {}, self.problem(400, "endTime must be after startTime")
        with self.lock:
            ids = sorted(set(self.spans) | set(self.running_since))
            if "podId" in one:
                ids = [p for p in ids if p == one["podId"]]
            records = []
            edge = start
            while edge < end:
                upto = bucket_next(edge, size)
                for pid in ids:
                    amount = round(self.billed_between(pid, edge, upto), 6)
                    if amount > 0:
                        records.append(
                            {
                                "startTime": iso(edge),
                                "endTime": iso(upto),
                                "podId": pid,
                                "totalAmount": amount,
                                "gpuAmount": amount,
                                "cpuAmount": 0.0,
                                "diskAmount": 0.0,
                            }
                        )
                edge = upto
        total = round(sum(r["totalAmount"] for r in records), 6)
        echo: dict[str, Any] = {"startTime": iso(start), "endTime": iso(end), "bucketSize": size}
        if "podId" in one:
            echo["podId"] = one["podId"]
        meta = {
            "query": echo,
            "recordCount": len(records),
            "uniquePodCount": len({r["podId"] for r in records}),
            "totals": {
                "totalAmount": total,
                "gpuAmount": total,
                "cpuAmount": 0.0,
                "diskAmount": 0.0,
            },
        }
        return 200, {}, {"records": records, "metadata": meta}
