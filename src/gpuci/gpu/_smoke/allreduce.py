"""The NCCL all-reduce in a child process, killed when it hangs.

A hung collective blocks inside the CUDA/NCCL library: a thread waiting on it can neither be
interrupted nor stop the interpreter from exiting. A child process can be killed (its whole
process group, since NCCL starts helper threads and sometimes processes), which is why the
``nccl`` check runs here. The child runs this module's :func:`main` with ``REDUCER JSON``
(started as :mod:`gpuci.safe_start` says: never from the job's checkout, the current folder)
where ``REDUCER`` is ``module:function`` (the backend's all-reduce, importable in a fresh
interpreter) and prints its answer as one line on stdout, :data:`ANSWER` then JSON:
``{"result": [[min, max], ...]}``, ``{"unavailable": reason}`` (no NCCL: a skip) or ``{"error":
reason}``. Only that line is the answer: a framework's own log lines (a JSON one at exit
included) never replace it, and an answer line that cannot be read is gpu-ci's own error
(:attr:`Answer.own_error`), never a finding about the GPU.

Before that, the child reports its phases as it enters them (``{"phase": "import", "t": s}``,
then ``contexts``, then ``collective``, ``t`` seconds since it started), so a timeout can tell
a slow start-up (Python, the framework's import, 8 contexts, NCCL's init: a skip, the budget was
short) from a collective that hangs (a failure). A reducer calls :func:`phase` with
``"collective"`` right before the collective call.

After the all-reduce whose sums are checked, a reducer times ``RUNS`` runs of ``PER_RUN``
back-to-back all-reduces of the same buffer (as nccl-tests times ``-n`` iterations and divides)
and reports them with :func:`report_timing`: ``{"timing": {"bytes": B, "per_run": K,
"seconds": [...]}}``. The parent turns each run into nccl-tests' bus bandwidth
(:func:`bus_bandwidth`).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuci import safe_start, untrusted_child, untrusted_json
from gpuci.redact import excerpt

RUNS = 5  # timed runs, each reported: the spread shows a link that comes and goes
PER_RUN = 4  # all-reduces per run, back to back: host launch and sync costs amortised
ANSWER = "GPUCI-ALLREDUCE-ANSWER "  # begins the child's answer line: no framework prints it
_STARTED = time.monotonic()


def report_timing(nbytes: int, seconds: list[float], per_run: int = PER_RUN) -> None:
    """Tell the parent how long each timed run of ``per_run`` all-reduces of ``nbytes`` took."""
    body = {"bytes": int(nbytes), "per_run": int(per_run), "seconds": [float(s) for s in seconds]}
    print(json.dumps({"timing": body}), flush=True)


def time_runs(
    step: Callable[[], None], sync: Callable[[], None], runs: int = RUNS, per_run: int = PER_RUN
) -> list[float]:
    """Seconds for each of ``runs`` runs of ``per_run`` calls of ``step``, synced around each."""
    out = []
    for _ in range(runs):
        sync()
        start = time.perf_counter()
        for _ in range(per_run):
            step()
        sync()
        out.append(time.perf_counter() - start)
    return out


def bus_bandwidth(nbytes: int, seconds: float, ranks: int) -> tuple[float, float]:
    """``(algbw, busbw)`` in GB/s of one all-reduce of ``nbytes`` across ``ranks`` GPUs.

    nccl-tests' definitions (doc/PERFORMANCE.md): algbw = size / time; an all-reduce moves
    2(n-1)/n of the data over the slowest link, so busbw = algbw * 2(n-1)/n, a figure that can
    be held against the link's own bandwidth whatever the GPU count.
    """
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (ranks - 1) / ranks


def phase(name: str) -> None:
    """Tell the parent the child has entered phase ``name`` (one JSON line on stdout)."""
    print(json.dumps({"phase": name, "t": round(time.monotonic() - _STARTED, 3)}), flush=True)


@dataclass(frozen=True)
class Timing:
    """Timed runs of ``per_run`` all-reduces of ``nbytes`` each, as the child reported them."""

    nbytes: int
    per_run: int
    seconds: tuple[float, ...]

    def bandwidths(self, ranks: int) -> list[tuple[float, float]]:
        """``(algbw, busbw)`` GB/s per run."""
        return [bus_bandwidth(self.nbytes, s / self.per_run, ranks) for s in self.seconds]


@dataclass
class Answer:
    result: list[tuple[float, float]] | None = None
    unavailable: str | None = None
    error: str | None = None
    hung: bool = False
    own_error: str | None = None  # the child's answer could not be read: gpu-ci's, not the GPU's
    phases: dict[str, float] = field(default_factory=dict)  # phase -> seconds into the child
    timing: Timing | None = None  # the timed runs, when the reducer reported them

    @property
    def last_phase(self) -> str | None:
        return next(reversed(self.phases), None)


MAX_RUNS = 100  # a child's timing line is an input: bounded
MAX_OUTPUT = 4 << 20  # the tail of the child's output kept: far above NCCL_DEBUG=INFO's logs


def _timing(out: str) -> Timing | None:
    """The child's timing line, checked: positive sizes and times, a bounded count."""
    for line in out.splitlines():
        if not line.startswith('{"timing"'):
            continue
        try:
            body = untrusted_json.parse_object(line)["timing"]
            nbytes, per_run = int(body["bytes"]), int(body["per_run"])
            seconds = tuple(float(s) for s in body["seconds"][:MAX_RUNS])
        except (ValueError, KeyError, TypeError, OverflowError):
            return None
        if nbytes > 0 and per_run > 0 and seconds and all(0 < s < 1e6 for s in seconds):
            return Timing(nbytes, per_run, seconds)
        return None
    return None


def _phases(out: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in out.splitlines():
        if line.startswith('{"phase"'):
            try:
                body = untrusted_json.parse_object(line)
                found[excerpt(str(body["phase"]), 40)] = float(body["t"])
            except (ValueError, KeyError, TypeError, OverflowError):
                continue
    return found


def run_child(reducer: str, indices: list[int], n: int, timeout_s: float) -> Answer:
    """Run ``reducer(indices, n)`` in a child; kill its process group (NCCL's helpers too)
    after ``timeout_s``. Its output (stdout and stderr: a framework's logs) is an input: only
    the last :data:`MAX_OUTPUT` bytes are kept, where the answer line is."""
    env = dict(os.environ)
    # The child imports what this process can import (a venv, tests' helpers), nothing more.
    env["PYTHONPATH"] = os.pathsep.join(safe_start.without_cwd(sys.path))
    code = safe_start.code("gpuci.gpu._smoke.allreduce", "main(sys.argv[1:])")
    args = [sys.executable, "-c", code, reducer, json.dumps([indices, n])]
    try:
        status, out = untrusted_child.run(
            args, timeout=timeout_s, limit=MAX_OUTPUT, env=env, stderr=True, tail=True
        )
    except untrusted_child.Hung as hung:
        return Answer(hung=True, phases=_phases(hung.output))
    except OSError as exc:
        return Answer(error=f"all-reduce process could not be started: {exc.strerror or exc}")
    phases = _phases(out)
    lines = out.splitlines()
    answers = [line[len(ANSWER) :] for line in lines if line.startswith(ANSWER)]
    if answers:
        return _read_answer(answers[-1], phases, _timing(out))
    last = next((line for line in reversed(lines) if line.strip()), "no output")
    if status == 0:  # it finished without saying how: ours to explain, not the GPU's
        return Answer(
            own_error=f"all-reduce process exited 0 without its answer line: "
            f"{excerpt(last.strip())}",
            phases=phases,
        )
    return Answer(
        error=f"all-reduce process exited with code {status}: {excerpt(last.strip())}",
        phases=phases,
    )


def _read_answer(line: str, phases: dict[str, float], timing: Timing | None) -> Answer:
    """The child's answer line (an input: checked), or :attr:`Answer.own_error` saying why not."""
    try:
        body = untrusted_json.parse_object(line)
        result = body.get("result")
        pairs = [(float(lo), float(hi)) for lo, hi in result] if result else None
    except (ValueError, TypeError, OverflowError) as exc:
        why = f"{type(exc).__name__}: {excerpt(str(exc))}"
        return Answer(own_error=f"all-reduce answer unreadable ({why})", phases=phases)
    unavailable, error = (untrusted_json.text(body, k) for k in ("unavailable", "error"))
    return Answer(
        result=pairs,
        unavailable=excerpt(unavailable) if unavailable else None,
        error=excerpt(error) if error else None,
        phases=phases,
        timing=timing,
    )


def _answer(reducer: str, indices: list[int], n: int) -> dict[str, Any]:
    from gpuci.errors import BackendUnavailable

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
    print(ANSWER + json.dumps(_answer(reducer, indices, n)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
