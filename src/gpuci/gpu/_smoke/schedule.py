"""Running a gpu-smoke plan: per-GPU checks on all GPUs at once, shared resources one at a time.

Check by check across GPUs, 8 GPUs cost 8 times one (on 8 x H200, well over the default budget:
docs/benchmarks.md), so the memory and PCIe checks of the last GPUs were skipped on every run.
A GPU's own checks touch only that GPU (its context, its SMs, its memory), so each GPU runs its
sequence on its own thread and a wave costs what the slowest GPU costs. Checks that share
something run alone, in plan order:

- ``nccl`` needs every GPU at once;
- ``pcie`` measures the host link, and GPUs behind one PCIe switch or one socket would share
  bandwidth and fail each other's minimums if measured together;
- machine-wide checks (``gpu`` None: dcgm).

The plan's order is kept within each GPU, and waves run in the plan's order, so a budget that
runs out still skips the same checks on every GPU, never only the last GPUs'.

A check that never returns (a hung kernel, a hung synchronize) cannot be interrupted: it runs
in this process, and a thread stuck in a CUDA call can be neither cancelled nor joined. The
:class:`Watchdog` gives the load a hard deadline instead, the budget plus
:data:`GRACE_SECONDS`: past it, the checks still running fail as hung, the smoke reports (the
caller's ``finish``) and the process ends with ``os._exit``. A call that hangs holding
Python's GIL (a C extension's call that keeps it, as torch's device query may in cuInit)
stops the watch too: faulthandler's own C thread, which needs no GIL, ends the process
:data:`BACKSTOP_SECONDS` later, the threads' stacks on stderr, exit 1 (no report: no Python
code can run then).
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from gpuci.gpu._smoke.checks import Budget, Outcome, Planned, run_check

SERIAL = frozenset({"nccl", "pcie"})  # checks that share a resource between GPUs
# How long past the budget a check may still return before the load is judged hung: a check
# starts only when its estimate fits (seconds each; a first GEMM's set-up, 3 s on an H200, is
# the worst seen: docs/gpu-smoke.md) and the memory test stops at the deadline, so a check
# still running 20 s later is stuck in the GPU or its driver, not slow.
GRACE_SECONDS = 20.0
# How long the framework's start (a cold ``import torch`` from a network filesystem, CUDA's
# init on 8 GPUs without persistence mode: tens of seconds on a healthy node) is given from
# its start when the budget's deadline is sooner: slow is not hung, as NVML's 120 s says.
START_SECONDS = 120.0
# How long past a check's hang deadline faulthandler ends the process, when the watch itself
# could not run (a hung call holds the GIL): the watch reports first whenever it can.
BACKSTOP_SECONDS = 60.0
# How long the watch's report of a hang may take (quarantine's calls to the forge included)
# before faulthandler ends the process anyway: a report stuck behind the hung call (the
# dynamic loader's lock held by an import stuck on a filesystem) must not hold the step.
REPORT_SECONDS = 300.0


class Watchdog:
    """The load's hard deadline: past the budget plus :data:`GRACE_SECONDS`, every check still
    running fails as hung, those not started are skipped, ``finish`` reports them all (and
    returns the exit code) and the process ends with that code.

    Used as a context manager around the load; leaving it in time stops the watch.
    """

    def __init__(self, budget: Budget, finish: Callable[[list[Outcome]], int]) -> None:
        self._budget, self._finish = budget, finish
        self._lock = threading.Condition()  # a check started or the load ended: the watch looks
        # thread -> (check, started, why it hung when not the GPU's kernel, when it is hung)
        self._running: dict[int, tuple[Planned, float, str | None, float]] = {}
        self._waiting: list[Planned] = []  # planned, not started
        self._over = threading.Event()  # the load ended in time
        self._fired = False
        self.limit = 0.0  # seconds from the watch's start to the deadline
        self._deadline = 0.0  # the monotonic time of that deadline

    def __enter__(self) -> Watchdog:
        self.limit = max(self._budget.left(), 0.0) + GRACE_SECONDS
        self._deadline = time.monotonic() + self.limit
        _backstop(self.limit + BACKSTOP_SECONDS)
        threading.Thread(target=self._watch, name="gpuci-watchdog", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._over.set()
            self._lock.notify_all()
            fired = self._fired
        if fired:  # the watch is reporting the hang: the process ends there, not here
            threading.Event().wait()
        _backstop(None)

    def expect(self, plan: list[Planned]) -> None:
        """The checks this load will run, so a hang can name those it never started."""
        with self._lock:
            self._waiting += plan

    @contextmanager
    def running(
        self, item: Planned, hung: str | None = None, at_least: float = 0.0
    ) -> Iterator[None]:
        """Mark ``item`` as running on this thread for as long as the block lasts; ``hung``:
        the reason it fails with if it never returns, when not a kernel's hang; ``at_least``:
        the seconds from its start it is given, when the budget's deadline is sooner."""
        key = threading.get_ident()
        with self._lock:
            now = time.monotonic()
            due = self._due(now, at_least)
            self._running[key] = (item, now, hung, due)
            if not self._fired:  # the latest check's due (once fired: the report's bound)
                _backstop(due - now + BACKSTOP_SECONDS)
            self._waiting = [w for w in self._waiting if w is not item]
            self._lock.notify_all()
        try:
            yield
        finally:
            with self._lock:
                self._running.pop(key, None)

    def starting(self, item: Planned, hung: str) -> AbstractContextManager[None]:
        """:meth:`running` for the framework's start: given :data:`START_SECONDS` at least."""
        return self.running(item, hung, START_SECONDS)

    def _due(self, started: float, at_least: float = 0.0) -> float:
        """When a check started at ``started`` is hung: the deadline, or for one started
        past it (health after the load is never skipped) :data:`GRACE_SECONDS` after (or
        ``at_least``, when more)."""
        return max(self._deadline, started + max(GRACE_SECONDS, at_least))

    def _watch(self) -> None:
        with self._lock:
            while True:  # between checks nothing is stuck: wait for the next to start
                if self._over.is_set():
                    return
                now = time.monotonic()
                dues = [due for _, _, _, due in self._running.values()]
                if any(now >= due for due in dues):
                    break
                self._lock.wait(min(dues) - now if dues else None)
            self._fired = True
            _backstop(REPORT_SECONDS)  # this thread runs: the report's own bound
            running, waiting = list(self._running.values()), list(self._waiting)
        stuck = [r for r in running if now >= r[3]]
        first = stuck[0][0]
        label = first.name if first.gpu is None else f"gpu{first.gpu}:{first.name}"
        ended = [self._hung(item, started, why, due) for item, started, why, due in stuck]
        ended += [  # started late, not yet overdue: not judged
            Outcome(w.name, w.gpu, "skip", f"not finished: the smoke ended at {label}'s hang")
            for w, _, _, _ in running
            if all(w is not s[0] for s in stuck)
        ]
        ended += [
            Outcome(w.name, w.gpu, "skip", f"not run: the smoke ended at {label}'s hang")
            for w in waiting
        ]
        code = 1  # ExitCode.CHECK_FAILED, should the report itself fail
        try:
            code = self._finish(ended)
        except Exception as exc:  # the process ends anyway: say what hung, in one line
            sys.stdout.write(
                f"gpu-smoke: check failed: {label} {ended[0].reason} (the report could not be "
                f"written: {type(exc).__name__}: {exc})\n"
            )
        finally:
            _flush(sys.stdout, sys.stderr)
            os._exit(code)

    def _hung(self, item: Planned, started: float, why: str | None, due: float) -> Outcome:
        """A check that did not return: a finding about the GPU or its driver, as an
        all-reduce hung in the collective is (unless ``why`` says otherwise)."""
        within = f"{GRACE_SECONDS:g}s past the {self._budget.total:g}s budget"
        if due > self._deadline:
            within = f"{due - started:.3g}s of its start, past the {self._budget.total:g}s budget"
        if why:  # its own words first: what they begin with decides quarantine
            reason = f"{why} (did not return within {within}; gpu-smoke ended its process)"
        else:
            reason = (
                f"did not return within {within}: hung in the GPU or its driver (a kernel, "
                "synchronize or NVML read that never completes); gpu-smoke ended its process"
            )
        seconds = time.monotonic() - started
        return Outcome(item.name, item.gpu, "fail", reason, seconds=seconds, params=item.params)


def _backstop(seconds: float | None) -> None:
    """Arm faulthandler's end of the process ``seconds`` from now (None: disarm it): the last
    resort when the watch cannot run. Never fails the run: without it the watch still does."""
    try:
        if seconds is None:
            faulthandler.cancel_dump_traceback_later()
        else:  # fd 2: sys.stderr may be a stream without one (captured in tests)
            faulthandler.dump_traceback_later(max(seconds, 0.001), exit=True, file=2)
    except (OSError, ValueError, RuntimeError):
        pass


def _flush(*streams: Any) -> None:
    for stream in streams:
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or gone: nothing more can be said there
            pass


def watched_check(item: Planned, budget: Budget, watchdog: Watchdog | None) -> Outcome:
    """:func:`run_check`, marked running on ``watchdog`` (when given) while it runs."""
    if watchdog is None:
        return run_check(item, budget)
    with watchdog.running(item):
        return run_check(item, budget)


def waves(plan: list[Planned]) -> list[list[Planned]]:
    """Consecutive per-GPU items that may run together, and the serial items one by one."""
    out: list[list[Planned]] = []
    current: list[Planned] = []
    for item in plan:
        if item.gpu is None or item.name in SERIAL:
            if current:
                out.append(current)
                current = []
            out.append([item])
        else:
            current.append(item)
    if current:
        out.append(current)
    return out


def run_plan(
    plan: list[Planned],
    budget: Budget,
    record: Callable[[Outcome], None],
    concurrent: bool = True,
    watchdog: Watchdog | None = None,
) -> None:
    """Run ``plan`` within ``budget``, calling ``record`` with each outcome as it ends; with
    ``watchdog``, each check is marked running while it runs (the watch names a hung one)."""
    if watchdog is not None:
        watchdog.expect(plan)

    def one(item: Planned) -> Outcome:
        return watched_check(item, budget, watchdog)

    for wave in waves(plan):
        per_gpu: dict[object, list[Planned]] = {}
        for item in wave:
            per_gpu.setdefault(item.gpu, []).append(item)
        if not concurrent or len(per_gpu) < 2:
            for item in wave:
                record(one(item))
            continue

        def sequence(items: list[Planned]) -> list[Outcome]:
            done = []
            for item in items:
                outcome = one(item)
                record(outcome)
                done.append(outcome)
            return done

        with ThreadPoolExecutor(len(per_gpu), thread_name_prefix="gpuci-gpu") as pool:
            futures = [pool.submit(sequence, items) for items in per_gpu.values()]
            for future in futures:
                future.result()  # re-raises a GPU lost mid-run (NvmlUnavailable)
