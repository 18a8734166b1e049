"""Smoke before handover: a pod runs gpu-smoke before its runner starts (or its command runs).

The channel back to ``up``, chosen from what RunPod's v2 API gives: a pod has no store
credentials (by design) and ``up``'s RunPod key never reaches it; all it holds is the
pod-scoped ``RUNPOD_API_KEY``, with which it may act on itself
(``gpuci.pods._runpod.selfstop``). So the pod writes its verdict into its own **name**
(``PATCH /v2/pods/{id}``, a mutable field ``up`` reads with every poll) and, on a hardware
verdict, **stops** itself (``stop``: the GPU is released, billing drops to the disk, and the
pod stays readable with its ``dataCenterId``;
a terminated pod vanishes from ``getPod``, taking the verdict with it). ``up`` then
terminates it, writes the verdict into the GPU health record beside the ledger (``up`` holds
the store's credentials; the pod records it itself only when it was given them) and places
another pod away from that data centre (:mod:`gpuci.pods.health._replace`).

Only a hardware verdict stops a pod (gpu-smoke exit 1 with failed checks that are findings
about the GPU, :func:`gpuci.quarantine.hardware_findings`): an environment error, a skipped
check, or a pod without gpu-ci that could not install it (:mod:`gpuci.pods.health._pod_gpuci`: the
pod installs ``GPUCI_PACKAGE``'s source, pinned by ``up``, and the dependencies its lock pins, into
a private folder used only by the smoke: :mod:`gpuci.pods.health._pod_install`)
hands the pod over with a ``smoke skipped`` mark naming why, and ``up`` warns in one line.

The name is written whole (any number of GPUs; 8 UUIDs are about 330 characters, and the spec
sets no length limit), by :func:`mark`, retried on 429 and 5xx. RunPod's
docs grant the pod-scoped key stop and remove; if its PATCH is refused (401/403), the pod says
so in one line of its log and, on a hardware verdict, still stops itself: the one act its key
is documented to allow. ``up`` reads a pod that stopped itself before handover with no verdict
in its name as a hardware failure of unknown GPUs (nothing else stops such a pod then: a
runner pod ends by terminate, a gated command has not started), so it is re-placed away from
that data centre, as with a named verdict.

This module is also the pod's side: the gate runs ``python3 -m gpuci gpu-smoke --json``
(inputs from ``INPUT_*`` as usual), then ``python3 -m gpuci.pods.health._handover`` on its result,
which prints the headline to stderr (the pod's log) and the verdict as one line on stdout
(``uuid=... checks=... rec=0|1``, characters from a fixed set): exit 0 passed,
:data:`HARDWARE_RC` a hardware failure, anything else no verdict.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuci import redact, settings
from gpuci.pods.health import _pod_install as pod_install
from gpuci.retry import RetryPolicy, parse_retry_after

ENV_SMOKE = settings.SMOKE.name
ENV_POD_NAME = settings.POD_NAME.name
ENV_PACKAGE = settings.PACKAGE.name
HARDWARE_RC = 10
_MARKED = re.compile(r" smoke (passed|failed|skipped)(?:: ?(.*))?$")
_UNSAFE = re.compile(r"[^A-Za-z0-9:,._=/+-]+")

# ``gpuci_smoke_gate``: run after STOP_FUNCTION (it uses ``gpuci_stop`` and ``gpuci_pod_call``).
# Returns 0 to hand the pod over, HARDWARE_RC after marking the pod and stopping it (the
# caller then exits). ``gpuci_install`` is :data:`gpuci.pods.health._pod_install.SHELL`'s.
_GATE = r"""
gpuci_py() {
  # the smoke's python: with the gpu-ci this pod installed (gpuci_install) first on its path
  if [ -n "${gpuci_site:-}" ]; then
    PYTHONPATH="$gpuci_site${PYTHONPATH:+:$PYTHONPATH}" "${GPUCI_SMOKE_PYTHON:-python3}" "$@"
  else
    "${GPUCI_SMOKE_PYTHON:-python3}" "$@"
  fi
}
gpuci_rename_pod() {
  # this pod's new name, with RunPod's pod-scoped key: the one channel back to up
  gpuci_pod_call PATCH "" "{\"name\":\"$1\"}"
}
gpuci_mark() {
  # the verdict, whole (no cut: 8 GPUs' UUIDs are ~330 characters), from a fixed set
  s=$(printf '%s' "$1" | tr -c 'A-Za-z0-9 .,:_=/+-' ' ')
  n=$(printf '%s smoke %s' "${GPUCI_POD_NAME:-gpuci}" "$s" | tr -d '"\\')
  # gpu-ci renames with retries (429, 5xx) and names a refusal; without it, one try by shell
  if [ "${gpuci_ok:-}" = 1 ]; then
    gpuci_py -m gpuci.pods.health._handover mark "$n"
    rc=$?
    [ "$rc" = 0 ] || [ "$rc" = 4 ] && return "$rc"
  fi
  gpuci_rename_pod "$n"
}
gpuci_smoke_gate() {
  [ "${GPUCI_SMOKE:-}" = 1 ] || return 0
  echo "gpu-ci: gpu-smoke before handover"
  if ! gpuci_install; then
    echo "gpu-ci: $gpuci_why: smoke skipped, handing the pod over"
    gpuci_mark "skipped: $gpuci_why" || echo "gpu-ci: could not write the pod's name"
    return 0
  fi
  f="${TMPDIR:-/tmp}/gpuci-smoke.$$"
  # in a subshell without the credentials: the smoke needs none, and its tools inherit env
  verdict=$(unset RUNPOD_API_KEY GPUCI_RUNNER_JITCONFIG GPUCI_GITLAB_RUNNER_TOKEN
    gpuci_py -m gpuci gpu-smoke --json --report "$f.report.json" >"$f.json"
    gpuci_py -m gpuci.pods.health._handover "$f.json")
  rc=$?
  verdict=$(printf '%s' "$verdict" | tail -n 1)
  if [ "$rc" = 0 ]; then
    gpuci_mark "passed" || echo "gpu-ci: could not write the verdict into the pod's name"
    return 0
  fi
  if [ "$rc" != 10 ]; then
    echo "gpu-ci: gpu-smoke gave no hardware verdict (status $rc): handing the pod over"
    gpuci_mark "skipped: status $rc" || echo "gpu-ci: could not write the pod's name"
    return 0
  fi
  echo "gpu-ci: hardware failure ($verdict): stopping this pod, nothing else starts"
  # a refused rename still stops the pod: up reads a stop before handover as this verdict
  gpuci_mark "failed: $verdict" || echo "gpu-ci: could not write the verdict into the pod's name"
  until gpuci_stop stop; do sleep "${GPUCI_SELF_STOP_RETRY_S:-30}"; done
  return 10
}
""".strip()
SHELL = pod_install.SHELL + "\n" + _GATE


@dataclass(frozen=True)
class Verdict:
    """What a pod wrote into its name: passed, failed (with the GPUs and checks) or skipped."""

    kind: str
    uuids: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    recorded: bool = False  # the pod wrote the health record itself
    detail: str = ""

    def text(self) -> str:
        gpus = ", ".join(self.uuids) or "a GPU"
        why = f" ({self.detail})" if self.detail and not self.uuids else ""
        return f"{gpus} failed {', '.join(self.checks) or 'gpu-smoke'}{why}"


def reason(verdict: Verdict, package: str) -> str:
    """A verdict's detail fit to print: no secret of ``package`` (``GPUCI_PACKAGE``) in it, as
    sent or as the pod's character set left it (the pod takes them out; this is the second
    line, as its name went through RunPod's API).
    """
    secrets = redact.url_secrets(package)
    return redact.excerpt(verdict.detail, 200, [*secrets, *(_UNSAFE.sub(" ", s) for s in secrets)])


def pod_env(name: str, package: str = "") -> dict[str, str]:
    """The env that turns the gate on, with the pod's name to write the verdict after and,
    when ``package`` is set, where to install gpu-ci from if the image has none."""
    env = {ENV_SMOKE: "1", ENV_POD_NAME: name}
    if package:
        env[ENV_PACKAGE] = package
    return env


def verdict_of(pod: Mapping[str, Any] | None) -> Verdict | None:
    """The verdict in a pod's name, or None when it has written none (yet)."""
    name = str((pod or {}).get("name") or "")
    m = _MARKED.search(name)
    if not m:
        return None
    kind, rest = m.group(1), (m.group(2) or "").strip()
    if kind != "failed":
        return Verdict(kind, detail=_UNSAFE.sub(" ", rest)[:200])
    fields = dict(f.split("=", 1) for f in rest.split() if "=" in f)
    return Verdict(
        "failed",
        tuple(u for u in _UNSAFE.sub("", fields.get("uuid", "")).split(",") if u),
        tuple(c for c in _UNSAFE.sub("", fields.get("checks", "")).split(",") if c),
        fields.get("rec") == "1",
    )


def _safe(text: str) -> str:
    return _UNSAFE.sub("_", text)[:80]


def verdict_line(result: Any, findings: list[Any], recorded: bool) -> str:
    """``uuid=A,B checks=gpu0:health,... rec=0|1`` for the pod's name (a fixed character set)."""
    gpus = {g.get("index"): g for g in result.report.get("gpus") or [] if isinstance(g, dict)}
    indexes = {f.gpu for f in findings}
    uuids = [
        _safe(str(g.get("uuid") or f"gpu{i}"))
        for i, g in sorted(gpus.items(), key=lambda kv: str(kv[0]))
        if None in indexes or i in indexes
    ]
    checks = sorted({_safe(f.label) for f in findings})
    return f"uuid={','.join(uuids)} checks={','.join(checks)} rec={int(recorded)}"


MAX_RESULT = 4 * 1024 * 1024  # gpu-smoke's JSON result is a few kB


def classify(body: Any) -> tuple[int, str]:
    """gpu-smoke's ``--json`` result -> (exit status for the gate, the verdict line)."""
    from gpuci.errors import ExitCode
    from gpuci.gpu import _health_record as gpu_health
    from gpuci.quarantine import hardware_findings
    from gpuci.runtime import Result

    if not isinstance(body, dict) or not isinstance(body.get("report"), dict):
        return 3, "no hardware verdict: gpu-smoke gave no result"
    try:
        code = ExitCode(int(body.get("exit_code", 3)))
    except (TypeError, ValueError):
        return 3, "no hardware verdict: gpu-smoke gave no exit code"
    result = Result(command="gpu-smoke", exit_code=code)
    result.report = body["report"]
    findings = hardware_findings(result)
    if findings:
        notes = " ".join(str(a.get("message")) for a in body.get("annotations") or [])
        stored = bool(gpu_health.store_url(None, os.environ))
        recorded = stored and "health record not written" not in notes
        return HARDWARE_RC, verdict_line(result, findings, recorded)
    if code == ExitCode.OK:
        return 0, "passed"
    return 3, f"no hardware verdict: exit {int(code)}"


# ----- the pod writes its verdict into its own name ---------------------------------------
# ``... handover mark NAME``, run inside the pod by the smoke gate with what RunPod gives every
# pod: its id (``RUNPOD_POD_ID``) and its pod-scoped key (``RUNPOD_API_KEY``). ``PATCH
# /v2/pods/{id}`` with ``{"name": NAME}``, under one RetryPolicy: 429 waits its ``Retry-After``,
# 5xx and network failures back off, so one bad answer no longer costs a healthy pod (``up``
# would wait out its timeout and terminate it). A refusal (401/403: the key may not rename its
# pod) is one line in the pod's log and exit REFUSED; the gate's fallback is in SHELL.

REFUSED = 4


class _Again(Exception):
    def __init__(self, why: str, retry_after: float | None = None) -> None:
        super().__init__(why)
        self.retry_after = retry_after


def policy(environ: Mapping[str, str]) -> RetryPolicy:
    """Six tries over about a minute; ``GPUCI_HANDOVER_RETRY_S`` scales the first wait."""
    try:
        initial = float(settings.HANDOVER_RETRY_S.value(environ))
    except ValueError:
        initial = 1.0
    return RetryPolicy(attempts=6, initial=initial, max_wait=30 * initial, jitter="additive")


def mark(name: str, environ: Mapping[str, str]) -> int:
    """PATCH this pod's name: 0 done, :data:`REFUSED` when the key may not, 3 otherwise."""
    import httpx

    from gpuci import httpclients

    pod, key = settings.RUNPOD_POD_ID.value(environ), settings.RUNPOD_API_KEY.value(environ)
    if not pod or not key or not name:
        print("gpu-ci: cannot write the verdict: RUNPOD_POD_ID or RUNPOD_API_KEY is not set")
        return 3
    base = settings.RUNPOD_API_URL_ON_POD.value(environ).rstrip("/")

    def once(client: httpx.Client) -> int:
        try:
            response = client.patch(f"{base}/v2/pods/{pod}", json={"name": name})
        except httpx.TransportError as exc:
            raise _Again(type(exc).__name__) from None
        code = response.status_code
        if code == 429 or code >= 500:
            raise _Again(f"HTTP {code}", parse_retry_after(response.headers.get("Retry-After")))
        return code

    headers = {"Authorization": f"Bearer {key}"}
    try:
        with httpclients.new_client(timeout=30.0, agent="handover", headers=headers) as client:
            code = policy(environ).retrying(_Again)(once, client)
    except _Again as exc:
        print(f"gpu-ci: could not write the verdict into pod {pod}'s name: {exc} (retried)")
        return 3
    if code in (401, 403):
        print(
            f"gpu-ci: RunPod refused this pod's key renaming pod {pod} (HTTP {code}): the "
            "verdict cannot travel in its name; on a hardware failure the pod stops itself "
            "and up reads that stop as the verdict"
        )
        return REFUSED
    if code >= 300:
        print(f"gpu-ci: RunPod answered HTTP {code} to the pod's rename: verdict not written")
        return 3
    return 0


def main(argv: list[str] | None = None) -> int:
    """The pod's side: ``python3 -m gpuci.pods.health._handover RESULT.json`` (gpu-smoke's
    ``--json`` output): the headline on stderr (the pod's log), the verdict line on stdout.
    ``... mark NAME`` writes NAME into the pod's name (:func:`mark`)."""
    from gpuci import untrusted_json

    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["mark"]:
        return mark(args[1] if len(args) > 1 else "", os.environ)
    try:
        with open(args[0], "rb") as fh:
            body = untrusted_json.loads(fh.read(MAX_RESULT + 1)[:MAX_RESULT])
    except (IndexError, OSError, ValueError) as exc:
        body = None
        print(f"gpu-ci: gpu-smoke's result unreadable: {type(exc).__name__}", file=sys.stderr)
    if isinstance(body, dict):
        print(f"gpu-ci: gpu-smoke: {body.get('headline')}", file=sys.stderr)
    rc, line = classify(body)
    print(line)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
