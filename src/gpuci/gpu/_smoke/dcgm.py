"""``dcgmi diag``: NVIDIA's own diagnostics, folded in when the machine has them.

DCGM needs its host engine (``nv-hostengine``), which many containers lack; then the check is a
skip with the reason, never a failure of the GPU. The JSON layout differs between DCGM 2, 3 and
4, so the verdict is read by walking the document for per-test ``status`` entries rather than
by one fixed path.
"""

from __future__ import annotations

import shutil
from typing import Any

from gpuci import untrusted_child, untrusted_json
from gpuci.gpu._smoke.checks import CheckError, CheckSkipped, Context
from gpuci.redact import excerpt

# Typical wall time per level (NVIDIA's documentation: level 1 seconds, level 2 about 2 minutes).
ESTIMATE_S = {1: 15.0, 2: 120.0}
_CONNECT = ("host engine", "hostengine", "unable to connect", "connection", "not running")


ABSENT = "dcgmi is not installed on this machine (DCGM absent)"


def absent_reason() -> str | None:
    """Why dcgmi cannot run at all, known before the budget is consulted."""
    return None if shutil.which("dcgmi") else ABSENT


def estimate(level: int) -> float:
    return ESTIMATE_S.get(level, 120.0)


def _tests(doc: Any, name: str = "") -> list[tuple[str, str, str]]:
    """(test name, status, detail) for every result found anywhere in the document."""
    found: list[tuple[str, str, str]] = []
    if isinstance(doc, dict):
        here = str(doc.get("name") or doc.get("test_name") or name)
        status = doc.get("status")
        if isinstance(status, str):
            detail = doc.get("warnings") or doc.get("info") or doc.get("warning") or ""
            if isinstance(detail, list):
                detail = " ".join(
                    str(d.get("warning", d) if isinstance(d, dict) else d) for d in detail
                )
            found.append((here, status, excerpt(str(detail), 200)))
        for value in doc.values():
            found += _tests(value, here)
    elif isinstance(doc, list):
        for item in doc:
            found += _tests(item, name)
    return found


def verdict(stdout: str, returncode: int) -> dict[str, Any]:
    """Figures from a ``dcgmi diag -j`` run; raises ``CheckError`` on any failed test."""
    try:
        doc = untrusted_json.loads(stdout) if len(stdout) <= untrusted_json.MAX_BYTES else None
    except ValueError:  # untrusted_json.Unusable: bad syntax, or nested past what _tests walks
        doc = None
    if doc is None:
        text = excerpt(stdout, 200)
        if returncode != 0 and any(k in text.lower() for k in _CONNECT):
            raise CheckSkipped(f"dcgmi cannot reach the DCGM host engine: {text}")
        if returncode != 0:
            raise CheckError(f"dcgmi diag exited {returncode}: {text or 'no output'}")
        raise CheckSkipped("dcgmi diag printed no JSON verdict")
    tests = _tests(doc)
    failed = [t for t in tests if t[1].lower() in ("fail", "failed", "error")]
    figures = {
        "tests": len({t[0] for t in tests}),
        "passed": sum(1 for t in tests if t[1].lower() in ("pass", "passed")),
        "skipped": sum(1 for t in tests if t[1].lower() in ("skip", "skipped", "not run")),
        "warned": sum(1 for t in tests if t[1].lower() in ("warn", "warning")),
        "failed": len(failed),
    }
    if failed:
        names = "; ".join(f"{n}: {d}" if d else n for n, _, d in failed[:4])
        raise CheckError(f"dcgmi diag failed {len(failed)} test(s): {names}", figures)
    if not tests and returncode != 0:
        raise CheckError(f"dcgmi diag exited {returncode} without test results", figures)
    return figures


def run(level: int, ctx: Context, gpus: list[int] | None = None) -> dict[str, Any]:
    """``dcgmi diag -r LEVEL -i GPUS -j`` on the GPUs under test only.

    ``-i`` takes DCGM GPU ids, which DCGM assigns in NVML's enumeration order, so NVML indices
    name the same GPUs; without it DCGM would diagnose (and load) other tenants' GPUs too.
    A run that outlasts the budget is a skip: the plan only had an estimate to go by.
    """
    exe = shutil.which("dcgmi")
    if exe is None:
        raise CheckSkipped(ABSENT)
    timeout = max(1.0, ctx.time_left())
    command = [exe, "diag", "-r", str(level)]
    if gpus:
        command += ["-i", ",".join(str(g) for g in gpus)]
    try:
        code, out = untrusted_child.run(
            [*command, "-j"], timeout=timeout, limit=untrusted_json.MAX_BYTES, stderr=True
        )
    except TimeoutError:
        raise CheckSkipped(
            f"dcgmi diag -r {level} did not finish within the {timeout:.0f}s left of the budget "
            f"(planned on a ~{estimate(level):.0f}s estimate): not a verdict on the GPU; raise "
            "budget-seconds to let it finish"
        ) from None
    except OSError as exc:
        raise CheckSkipped(f"dcgmi could not be started: {exc.strerror or exc}") from None
    except untrusted_json.Unusable:
        raise CheckSkipped(
            f"dcgmi diag printed over {untrusted_json.MAX_BYTES} bytes (killed): no verdict"
        ) from None
    figures = verdict(out, code)
    figures["level"] = level
    return figures
