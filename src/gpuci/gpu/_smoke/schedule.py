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
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from gpuci.gpu._smoke.checks import Budget, Outcome, Planned, run_check

SERIAL = frozenset({"nccl", "pcie"})  # checks that share a resource between GPUs


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
) -> None:
    """Run ``plan`` within ``budget``, calling ``record`` with each outcome as it ends."""
    for wave in waves(plan):
        per_gpu: dict[object, list[Planned]] = {}
        for item in wave:
            per_gpu.setdefault(item.gpu, []).append(item)
        if not concurrent or len(per_gpu) < 2:
            for item in wave:
                record(run_check(item, budget))
            continue

        def sequence(items: list[Planned]) -> list[Outcome]:
            done = []
            for item in items:
                outcome = run_check(item, budget)
                record(outcome)
                done.append(outcome)
            return done

        with ThreadPoolExecutor(len(per_gpu), thread_name_prefix="gpuci-gpu") as pool:
            futures = [pool.submit(sequence, items) for items in per_gpu.values()]
            for future in futures:
                future.result()  # re-raises a GPU lost mid-run (NvmlUnavailable)
