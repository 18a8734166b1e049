"""The check framework: one outcome per check, and a time budget nobody overruns silently.

A check is planned with an estimate of its cost. Before it starts, the runner compares that
estimate with what is left of the budget: a check that would overrun is *skipped with a reason*
and still appears in the report, so a fast smoke never hides that it tested less. Estimates
improve as the run goes (a measured bandwidth replaces the model table's guess), which is why
they are callables evaluated at the moment a check is about to start.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from gpuci.errors import GpuciError
from gpuci.redact import excerpt

Status = Literal["pass", "fail", "skip"]

# Names a user may list in the ``checks`` input, in report order (plan.plan_load sets the run
# order: nccl right after the contexts).
CHECK_NAMES: tuple[str, ...] = (
    "health",
    "context",
    "gemm",
    "membw",
    "pcie",
    "memory",
    "nccl",
    "dcgm",
)
LOAD_CHECKS = frozenset({"context", "gemm", "membw", "pcie", "memory", "nccl"})
# How the reason of a check that failed by gpu-ci's own error begins: not a finding about the
# GPU, so quarantine and pods placement (gpuci.quarantine.hardware_findings) pass it over.
OWN_ERROR_REASON = "gpu-ci's own error, not a finding about the GPU:"
# How the reason of a failed "context" check begins when the framework could not start (an
# import error, a driver mismatch): not a finding about the GPU either.
ENVIRONMENT_REASON = "no CUDA context:"


def about_the_gpu(reason: str) -> bool:
    """Whether a failed check's reason is a verdict on the GPU: quarantine and the health
    records pods placement reads act on these only, never on a framework that could not start
    nor on gpu-ci's own error."""
    return not reason.startswith((ENVIRONMENT_REASON, OWN_ERROR_REASON))


# What a framework raises when the device fails (torch's "CUDA error: ...", its
# OutOfMemoryError and AcceleratorError; cupy's CUDARuntimeError, CUBLASError, OutOfMemoryError).
_DEVICE_ERRORS = (RuntimeError, MemoryError)
# RuntimeErrors that only code raises.
_CODE_ERRORS = (NotImplementedError, RecursionError)


class CheckError(Exception):
    """Raised inside a check to fail it with a one-line reason (and optional figures)."""

    def __init__(self, reason: str, figures: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.figures = figures or {}


class CheckSkipped(Exception):
    """Raised inside a check that finds it cannot run here (the reason says why)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Outcome:
    """What one check found on one GPU (``gpu`` is None for machine-wide checks)."""

    name: str
    gpu: int | None
    status: Status
    reason: str = ""
    figures: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``gpu0:memory`` or ``nccl``: the name used in ``failed-checks``."""
        return self.name if self.gpu is None else f"gpu{self.gpu}:{self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "gpu": self.gpu,
            "status": self.status,
            "reason": self.reason,
            "figures": self.figures,
            "seconds": round(self.seconds, 3),
            "params": self.params,
        }


class Budget:
    """Seconds left of ``total``; the clock is injectable so tests need not sleep."""

    def __init__(self, total: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self._clock = clock
        self.start = clock()

    def elapsed(self) -> float:
        return self._clock() - self.start

    def left(self) -> float:
        return self.total - self.elapsed()

    @property
    def deadline(self) -> float:
        return self.start + self.total

    def now(self) -> float:
        return self._clock()


CheckFn = Callable[["Context"], dict[str, Any]]


@dataclass
class Context:
    """What a running check may look at: its parameters and the moment it must stop by."""

    params: dict[str, Any]
    deadline: float
    clock: Callable[[], float]

    def time_left(self) -> float:
        return self.deadline - self.clock()


@dataclass
class Planned:
    """A check about to run: name, GPU, parameters, an estimate and the function itself."""

    name: str
    gpu: int | None
    params: dict[str, Any]
    estimate: Callable[[], float]
    fn: CheckFn
    always: bool = False  # bookkeeping that must run (health after the load): never skipped
    skip_reason: str | None = None  # known before the run (e.g. one GPU: no all-reduce)


def run_check(item: Planned, budget: Budget) -> Outcome:
    """Run one planned check within the budget; never raises for a check's own failure."""
    outcome = Outcome(item.name, item.gpu, "skip", params=dict(item.params))
    if item.skip_reason:
        outcome.reason = item.skip_reason
        return outcome
    estimate = max(0.0, float(item.estimate()))
    outcome.params["estimate_s"] = round(estimate, 2)
    left = budget.left()
    if not item.always and estimate > left:
        outcome.reason = (
            f"skipped to keep the budget: needs ~{estimate:.1f}s, {max(left, 0):.1f}s of "
            f"{budget.total:g}s left (raise budget-seconds to run it)"
        )
        return outcome
    ctx = Context(item.params, budget.deadline, budget.now)
    start = budget.now()
    try:
        figures = item.fn(ctx) or {}
        outcome.status, outcome.figures = "pass", figures
        outcome.reason = str(figures.pop("note", "") or "")
    except CheckError as exc:
        outcome.status, outcome.reason, outcome.figures = "fail", exc.reason, exc.figures
    except CheckSkipped as exc:
        outcome.status, outcome.reason = "skip", exc.reason
    except GpuciError:
        raise  # the machine itself is unusable (NVML lost): the command reports it
    except Exception as exc:  # a framework error on this GPU is a finding, not a crash
        outcome.status, outcome.reason = "fail", unexpected_reason(exc)
    outcome.seconds = budget.now() - start
    return outcome


def unexpected_reason(exc: Exception) -> str:
    """One line for an exception a check did not turn into a verdict; gpu-ci's own (an
    OverflowError, a TypeError) is marked :data:`OWN_ERROR_REASON`, so a bug here never
    quarantines a healthy runner, while the framework's CUDA error stays a finding."""
    where = traceback.extract_tb(exc.__traceback__)[-1]
    said = f"{type(exc).__name__}: {excerpt(str(exc), 300)} (at {where.name})"
    if from_the_device(exc):
        return said
    return f"{OWN_ERROR_REASON} {said}; rerun, and report it to gpu-ci if it repeats"


def from_the_device(exc: Exception) -> bool:
    """Whether ``exc`` is what a framework raises when the GPU fails, not a bug in our code:
    Python's own errors (TypeError, ValueError, OverflowError, KeyError, ...) and gpu-ci's
    classes are ours."""
    if isinstance(exc, _CODE_ERRORS) or type(exc).__module__.startswith("gpuci"):
        return False
    return isinstance(exc, _DEVICE_ERRORS)
