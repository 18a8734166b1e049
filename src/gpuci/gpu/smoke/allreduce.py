"""The NCCL all-reduce in a child process, killed when it hangs.

A hung collective blocks inside the CUDA/NCCL library: a thread waiting on it can neither be
interrupted nor stop the interpreter from exiting. A child process can be killed (its whole
process group, since NCCL starts helper threads and sometimes processes), which is why the
``nccl`` check runs here. The child runs ``python -m gpuci.gpu.smoke.allreduce REDUCER JSON``
where ``REDUCER`` is ``module:function`` (the backend's all-reduce, importable in a fresh
interpreter) and prints one JSON line: ``{"result": [[min, max], ...]}``, ``{"unavailable":
reason}`` (no NCCL: a skip) or ``{"error": reason}``.

Before that, the child reports its phases as it enters them (``{"phase": "import", "t": s}``,
then ``contexts``, then ``collective``, ``t`` seconds since it started), so a timeout can tell
a slow start-up (Python, the framework's import, 8 contexts, NCCL's init: a skip, the budget was
short) from a collective that hangs (a failure). A reducer calls :func:`phase` with
``"collective"`` right before the collective call.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from gpuci.redact import excerpt

PHASES = ("start", "import", "contexts", "collective")
_STARTED = time.monotonic()


def phase(name: str) -> None:
    """Tell the parent the child has entered phase ``name`` (one JSON line on stdout)."""
    print(json.dumps({"phase": name, "t": round(time.monotonic() - _STARTED, 3)}), flush=True)


@dataclass
class Answer:
    result: list[tuple[float, float]] | None = None
    unavailable: str | None = None
    error: str | None = None
    hung: bool = False
    phases: dict[str, float] = field(default_factory=dict)  # phase -> seconds into the child

    @property
    def last_phase(self) -> str | None:
        return next(reversed(self.phases), None)


def _phases(out: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in out.splitlines():
        if line.startswith('{"phase"'):
            try:
                body = json.loads(line)
                found[str(body["phase"])] = float(body["t"])
            except (ValueError, KeyError, TypeError):
                continue
    return found


def run_child(reducer: str, indices: list[int], n: int, timeout_s: float) -> Answer:
    """Run ``reducer(indices, n)`` in a child; kill its process group after ``timeout_s``."""
    env = dict(os.environ)
    # The child imports what this process can import (a venv, tests' helpers), nothing more.
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    args = [sys.executable, "-m", "gpuci.gpu.smoke.allreduce", reducer, json.dumps([indices, n])]
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group, so the kill reaches NCCL's helpers
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return Answer(hung=True, phases=_phases(_kill(proc)))
    phases = _phases(out)
    for line in reversed(out.splitlines()):
        if line.startswith("{") and not line.startswith('{"phase"'):
            try:
                body = json.loads(line)
            except ValueError:
                break
            result = body.get("result")
            return Answer(
                result=[(float(lo), float(hi)) for lo, hi in result] if result else None,
                unavailable=body.get("unavailable"),
                error=body.get("error"),
                phases=phases,
            )
    tail = excerpt(err.strip().splitlines()[-1] if err.strip() else "no output")
    return Answer(
        error=f"all-reduce process exited with code {proc.returncode}: {tail}", phases=phases
    )


def _kill(proc: subprocess.Popen[str]) -> str:
    """Kill the child's process group; its stdout so far (the phases it reached)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    out, _ = proc.communicate()  # reap it: no zombie, pipes closed
    return out or ""


def _answer(reducer: str, indices: list[int], n: int) -> dict[str, Any]:
    from gpuci.gpu.smoke.backends.errors import BackendUnavailable

    module, _, name = reducer.partition(":")
    try:
        phase("import")
        fn = getattr(importlib.import_module(module), name)
        phase("contexts")
        return {"result": fn(indices, n)}
    except BackendUnavailable as exc:
        return {"unavailable": excerpt(str(exc))}
    except Exception as exc:  # a framework error is the finding; report it in one line
        return {"error": f"{type(exc).__name__}: {excerpt(str(exc))}"}


def main(argv: list[str]) -> int:
    phase("start")
    reducer, spec = argv
    indices, n = json.loads(spec)
    print(json.dumps(_answer(reducer, indices, n)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
