"""The NCCL all-reduce in a child process, killed when it hangs.

A hung collective blocks inside the CUDA/NCCL library: a thread waiting on it can neither be
interrupted nor stop the interpreter from exiting. A child process can be killed (its whole
process group, since NCCL starts helper threads and sometimes processes), which is why the
``nccl`` check runs here. The child runs ``python -m gpuci.gpu.smoke.allreduce REDUCER JSON``
where ``REDUCER`` is ``module:function`` (the backend's all-reduce, importable in a fresh
interpreter) and prints one JSON line: ``{"result": [[min, max], ...]}``, ``{"unavailable":
reason}`` (no NCCL: a skip) or ``{"error": reason}``.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from gpuci.redact import excerpt


@dataclass
class Answer:
    result: list[tuple[float, float]] | None = None
    unavailable: str | None = None
    error: str | None = None
    hung: bool = False


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
        _kill(proc)
        return Answer(hung=True)
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            try:
                body = json.loads(line)
            except ValueError:
                break
            result = body.get("result")
            return Answer(
                result=[(float(lo), float(hi)) for lo, hi in result] if result else None,
                unavailable=body.get("unavailable"),
                error=body.get("error"),
            )
    tail = excerpt(err.strip().splitlines()[-1] if err.strip() else "no output")
    return Answer(error=f"all-reduce process exited with code {proc.returncode}: {tail}")


def _kill(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.communicate()  # reap it: no zombie, pipes closed


def _answer(reducer: str, indices: list[int], n: int) -> dict[str, Any]:
    from gpuci.gpu.smoke.backends import BackendUnavailable

    module, _, name = reducer.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
        return {"result": fn(indices, n)}
    except BackendUnavailable as exc:
        return {"unavailable": excerpt(str(exc))}
    except Exception as exc:  # a framework error is the finding; report it in one line
        return {"error": f"{type(exc).__name__}: {excerpt(str(exc))}"}


def main(argv: list[str]) -> int:
    reducer, spec = argv
    indices, n = json.loads(spec)
    print(json.dumps(_answer(reducer, indices, n)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
