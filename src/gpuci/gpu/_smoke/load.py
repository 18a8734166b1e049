"""The load checks' common ground (sizes, rates, the target GPU) and context, device and
host-device bandwidth, NCCL; GEMM is in :mod:`.gemm`, the memory patterns in :mod:`.memtest`.

Each function takes a :class:`Target` (one GPU) and a :class:`~gpuci.gpu._smoke.checks.Context`
and returns figures, or raises ``CheckError`` with a one-line reason. They talk to the GPU only
through the backend protocol, so the same code runs on CUDA (torch, cupy) and on the CPU
(numpy) in CI.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from gpuci.gpu._nvml import cpu_list
from gpuci.gpu._smoke import allreduce
from gpuci.gpu._smoke.backends import Backend, Device
from gpuci.gpu._smoke.checks import OWN_ERROR_REASON, CheckError, CheckSkipped, Context
from gpuci.gpu._smoke.health import LinkReport, LinkSampler
from gpuci.gpu._smoke.models import GpuLink, Minimums, all_reduce_bus, lookup
from gpuci.redact import excerpt

GiB = 1024**3
MiB = 1024**2


@dataclass(frozen=True)
class Sizes:
    """How big each check's work is; the defaults suit a datacenter GPU, ``tiny`` suits CI."""

    gemm_n: int = 8192
    gemm_repeats: int = 50  # timed products: enough that launch gaps and clock ramps average out
    gemm_stability_repeats: int = 3  # untimed products kept and compared with the first
    gemm_sample_rows: int = 8
    membw_bytes: int = 1 * GiB
    membw_repeats: int = 10
    pcie_bytes: int = 256 * MiB
    pcie_repeats: int = 8
    memory_chunk: int = 1 * GiB
    nccl_elements: int = 32 * 1024 * 1024
    nccl_timeout_s: float = 15.0
    context_estimate_s: float = 3.0
    sample_interval_s: float = 0.25  # how often NVML is polled for clock events under load

    @classmethod
    def tiny(cls) -> Sizes:
        return cls(
            gemm_n=64,
            gemm_repeats=50,
            gemm_stability_repeats=2,
            gemm_sample_rows=4,
            membw_bytes=1 * MiB,
            membw_repeats=3,
            pcie_bytes=1 * MiB,
            pcie_repeats=2,
            memory_chunk=1 * MiB,
            nccl_elements=1024,
            nccl_timeout_s=5.0,
            context_estimate_s=0.05,
            sample_interval_s=0.005,
        )


@dataclass
class Rates:
    """Expected speeds for estimating check costs; replaced by measurements as they arrive."""

    mem_bw_gbs: float = 150.0
    pcie_gbs: float = 8.0
    fp16_tflops: float = 15.0

    @classmethod
    def for_name(cls, name: str | None, is_gpu: bool = True) -> Rates:
        if not is_gpu:
            return cls(mem_bw_gbs=2.0, pcie_gbs=2.0, fp16_tflops=0.001)
        model = lookup(name)
        if model is None:
            return cls()
        # plan with half the datasheet peak: an estimate that errs long skips, never overruns
        return cls(model.mem_bw_gbs / 2, 12.0, model.fp16_tflops / 4)


# With other processes on the GPU, the memory test fills at most this share of the free memory,
# so a process that allocates while we test is not pushed out of memory by us.
SHARED_MEMORY_FRACTION = 0.5


@dataclass
class Target:
    """One GPU under test: its backend index, NVML index (when matched) and what it is held to."""

    backend_index: int
    nvml_index: int | None
    name: str
    minimums: Minimums
    rates: Rates
    read_link: Callable[[], tuple[int | None, int | None]] | None = None
    link_max: tuple[int | None, int | None] = (None, None)
    cpus: tuple[int, ...] | None = None  # CPUs on the GPU's NUMA node (NVML CPU affinity)
    numa_node: int | None = None
    device: Device | None = None
    context_error: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    others: int = 0  # other processes NVML saw on this GPU before the load (a shared GPU)
    link: GpuLink | None = None  # its NVLinks or PCIe, for the all-reduce's bus (None: unknown)
    min_busbw_gbs: float | None = None  # min-busbw-gbs, when set

    def memory_fraction(self, asked: float) -> float:
        """The share of free memory to fill: capped on a shared GPU, whose owner may grow."""
        return min(asked, SHARED_MEMORY_FRACTION) if self.others else asked

    @property
    def label(self) -> int:
        return self.nvml_index if self.nvml_index is not None else self.backend_index

    def need_device(self) -> Device:
        if self.device is None:
            raise CheckSkipped(
                "no device context on this GPU: " + (self.context_error or "context check not run")
            )
        return self.device


def timed(dev: Device, fn: Callable[[], Any], repeats: int) -> float:
    """Seconds for ``repeats`` calls right after one warm-up, timed by the device.

    On CUDA the backend records events on the stream around the calls, so host-side launch
    overhead and Python's clock do not count; the warm-up right before brings the clocks up and
    loads the kernels (cuBLAS picks its algorithm on the first call).
    """
    fn()
    dev.synchronize()
    return max(dev.time_calls(fn, repeats), 1e-9)


# ----- context ---------------------------------------------------------------------------
def context(backend: Backend, target: Target, ctx: Context) -> dict[str, Any]:
    """Create the context and run a tiny kernel whose answer we know."""
    start = time.perf_counter()
    try:
        dev = backend.open(target.backend_index)
        n = 1 << 16
        got = dev.tiny_kernel(n)
    except Exception as exc:
        target.context_error = f"{type(exc).__name__}: {excerpt(str(exc), 200)}"
        raise CheckError(
            f"cannot create a context or run a kernel: {target.context_error}"
        ) from None
    want = n * (n - 1) / 2
    if got != want:
        target.context_error = "tiny kernel returned a wrong sum"
        raise CheckError(f"tiny kernel summed 0..{n - 1} to {got:.0f}, expected {want:.0f}")
    target.device = dev
    free, total = dev.mem_info()
    return {
        "device": dev.name,
        "context_s": round(time.perf_counter() - start, 3),
        "free_gib": round(free / GiB, 2),
        "total_gib": round(total / GiB, 2),
    }


# ----- device memory bandwidth -----------------------------------------------------------
def membw_estimate(target: Target, sizes: Sizes) -> float:
    return 2 * sizes.membw_bytes * (sizes.membw_repeats + 1) / (target.rates.mem_bw_gbs * 1e9)


def membw(target: Target, ctx: Context, sizes: Sizes) -> dict[str, Any]:
    """Device-to-device copy: bytes read plus bytes written per second, as STREAM counts."""
    dev = target.need_device()
    nbytes = _fit(dev, sizes.membw_bytes, parts=4)
    src, dst = dev.empty(nbytes), dev.empty(nbytes)
    dev.fill(src, 0x5A)
    seconds = timed(dev, lambda: dev.copy(dst, src), sizes.membw_repeats)
    gbs = 2 * nbytes * sizes.membw_repeats / seconds / 1e9
    errors = dev.pattern_errors(dst, 0x5A)
    src = dst = None  # drop the buffers before giving the cache back
    dev.release()
    target.rates.mem_bw_gbs = max(gbs, 1e-3)
    minimum = target.minimums.mem_bw_gbs
    basis = target.minimums.mem_bw_basis  # the measurement the minimum rests on, or why not
    figures = {"copy_gbs": round(gbs, 1), "bytes": nbytes, "min_gbs": minimum, "min_basis": basis}
    if errors:
        raise CheckError(f"device copy corrupted {errors} byte(s)", figures)
    if minimum is not None and gbs < minimum:
        raise CheckError(
            f"device memory bandwidth {gbs:.0f} GB/s is below the {minimum:g} GB/s minimum "
            f"({target.minimums.source})",
            figures,
        )
    return figures


def _fit(dev: Device, nbytes: int, parts: int) -> int:
    """``nbytes`` or less, so ``parts`` buffers of it fit in free memory; a multiple of 8."""
    free, _ = dev.mem_info()
    return max(8, min(nbytes, free // max(parts, 1)) // 8 * 8)


# ----- host <-> device -------------------------------------------------------------------
def pcie_estimate(target: Target, sizes: Sizes) -> float:
    return 2 * sizes.pcie_bytes * (sizes.pcie_repeats + 1) / (target.rates.pcie_gbs * 1e9) + 0.3


@contextmanager
def on_gpu_node(cpus: tuple[int, ...] | None) -> Iterator[str]:
    """Run the calling thread on the GPU's NUMA node for the block; yields what was done.

    Pinned host memory is placed where the allocating thread runs (Linux first-touch), so a
    buffer allocated on the far socket of a dual-socket host pays the inter-socket link on
    every copy. NVML's CPU affinity names the near CPUs; we keep only those this process may
    use (a container's cpuset), and restore the old set afterwards.
    """
    if not cpus:
        yield "not applied: NVML gave no CPU affinity for this GPU"
        return
    getter = getattr(os, "sched_getaffinity", None)
    if getter is None:
        yield "not applied: this OS cannot bind threads to CPUs"
        return
    before = getter(0)
    near = set(cpus) & before
    if not near:
        yield f"not applied: none of the GPU's CPUs ({cpu_list(cpus)}) is available to this process"
        return
    os.sched_setaffinity(0, near)
    try:
        yield "applied"
    finally:
        os.sched_setaffinity(0, before)


def pcie(target: Target, ctx: Context, sizes: Sizes) -> dict[str, Any]:
    """Pinned host-to-device and device-to-host bandwidth, with the link read while it runs.

    The host buffer is allocated, and the copies issued, from the GPU's own NUMA node.
    """
    dev = target.need_device()
    nbytes = _fit(dev, sizes.pcie_bytes, parts=4)
    link = LinkReport(*target.link_max)
    samples = 0
    with on_gpu_node(target.cpus) as affinity:
        host, buf = dev.pinned(nbytes), dev.empty(nbytes)
        if target.read_link is not None:
            with LinkSampler(target.read_link) as sampler:
                h2d_s = timed(dev, lambda: dev.h2d(buf, host), sizes.pcie_repeats)
                d2h_s = timed(dev, lambda: dev.d2h(host, buf), sizes.pcie_repeats)
                until = time.perf_counter() + 0.5  # a fast link is done before NVML was read twice
                while sampler.samples < 3 and time.perf_counter() < until:
                    dev.h2d(buf, host)
                    dev.synchronize()
            link.gen_seen, link.width_seen = sampler.gen, sampler.width
            samples = sampler.samples
        else:
            h2d_s = timed(dev, lambda: dev.h2d(buf, host), sizes.pcie_repeats)
            d2h_s = timed(dev, lambda: dev.d2h(host, buf), sizes.pcie_repeats)
        host = buf = None
    dev.release()
    h2d = nbytes * sizes.pcie_repeats / h2d_s / 1e9
    d2h = nbytes * sizes.pcie_repeats / d2h_s / 1e9
    target.rates.pcie_gbs = max(min(h2d, d2h), 1e-3)
    mins = target.minimums
    figures: dict[str, Any] = {
        "h2d_gbs": round(h2d, 1),
        "link_samples": samples,
        "d2h_gbs": round(d2h, 1),
        "bytes": nbytes,
        "min_gbs": mins.h2d_gbs,
        "min_d2h_gbs": mins.d2h_gbs,
        **link.figures(),
        "numa_node": target.numa_node,
        "near_cpus": cpu_list(target.cpus) if target.cpus else None,
        "numa_binding": affinity,
    }
    problems = link.problems()
    if mins.h2d_gbs is not None and h2d < mins.h2d_gbs:
        problems.append(f"host-to-device {h2d:.1f} GB/s is below the {mins.h2d_gbs:g} GB/s minimum")
    if mins.d2h_gbs is not None and d2h < mins.d2h_gbs:
        problems.append(f"device-to-host {d2h:.1f} GB/s is below the {mins.d2h_gbs:g} GB/s minimum")
    if problems:
        raise CheckError("; ".join(problems), figures)
    if target.read_link is None:
        figures["note"] = "link not read: this GPU could not be matched to NVML"
    return figures


# ----- NCCL ------------------------------------------------------------------------------
def nccl(backend: Backend, targets: list[Target], ctx: Context, sizes: Sizes) -> dict[str, Any]:
    """All-reduce a vector of ones across every GPU; each element must equal the GPU count.

    It runs in a child process with a hard timeout: a hung NCCL call cannot be interrupted in a
    thread, and would keep this process from exiting; a child is killed. A framework without
    NCCL is a skip with its reason, not a failure of the node.
    """
    usable = [t for t in targets if t.device is not None]
    if len(usable) < 2:
        raise CheckSkipped(f"needs 2 or more working GPUs, {len(usable)} here")
    indices = [t.backend_index for t in usable]
    timeout = max(0.5, min(sizes.nccl_timeout_s, ctx.time_left()))
    figures: dict[str, Any] = {"gpus": len(indices), "elements": sizes.nccl_elements}
    start = time.perf_counter()
    answer = allreduce.run_child(backend.reducer, indices, sizes.nccl_elements, timeout)
    figures["seconds_with_init"] = round(time.perf_counter() - start, 3)
    if answer.phases:
        figures["phases_s"] = answer.phases
    if answer.hung and answer.last_phase != "collective":
        # Python start, the framework's import, the contexts, NCCL's set-up: slow, not hung.
        raise CheckSkipped(
            f"all-reduce did not reach the collective within {timeout:g}s (last phase: "
            f"{answer.last_phase or 'none'}; start-up, not a hang; its process was killed): "
            "raise budget-seconds to let it start"
        )
    if answer.hung:
        raise CheckError(
            f"all-reduce did not finish within {timeout:g}s (hung in the collective; its "
            "process was killed)",
            figures,
        )
    if answer.unavailable:
        raise CheckSkipped(f"NCCL not available: {answer.unavailable}")
    if answer.own_error:  # never a verdict on the GPU: quarantine does not act on it
        raise CheckError(f"{OWN_ERROR_REASON} {answer.own_error}; rerun, and report it", figures)
    if answer.error:
        raise CheckError(f"all-reduce failed: {answer.error}", figures)
    want = float(len(indices))
    got = answer.result or []
    if len(got) != len(indices):
        raise CheckError(f"all-reduce answered for {len(got)} of {len(indices)} GPUs", figures)
    wrong = [i for i, (lo, hi) in zip(indices, got, strict=True) if lo != want or hi != want]
    if wrong:
        raise CheckError(f"all-reduce of ones gave a wrong sum on GPU(s) {wrong}", figures)
    slow = _bus_bandwidth(usable, answer.timing, backend.is_gpu, figures)
    if slow:
        raise CheckError(slow, figures)
    return figures


def _bus_bandwidth(
    usable: list[Target], timing: allreduce.Timing | None, is_gpu: bool, figures: dict[str, Any]
) -> str | None:
    """nccl-tests' bus bandwidth per timed run, into ``figures``; why it is too low, if it is.

    Judged on the median run against the bus's floor: ``min-busbw-gbs``, else a measured
    floor for the interconnect (``models.BUSBW_MEASURED``); else reported, saying so.
    """
    override = usable[0].min_busbw_gbs
    bus = all_reduce_bus([t.link if is_gpu else None for t in usable], override)
    if not is_gpu and override is None:
        bus = replace(bus, source="the CPU stand-in: reported, not judged")
    elif any(t.others for t in usable) and override is None:
        bus = replace(bus, min_gbs=None, source="other processes on the GPUs: not judged")
    if timing is None:
        bus = replace(bus, min_gbs=None, source="the all-reduce reported no timing: not judged")
    # flat, so the job summary's figures column reads them: bus=NVLink4 bus_peak_gbs=450 ...
    figures.update({f"bus_{k}" if k != "kind" else "bus": v for k, v in bus.to_dict().items()})
    if timing is None:
        figures["busbw_gbs"] = None
        return None
    runs = timing.bandwidths(len(usable))
    figures["algbw_gbs"] = [round(alg, 2) for alg, _ in runs]
    figures["busbw_gbs"] = [round(busbw, 2) for _, busbw in runs]
    median = statistics.median(b for _, b in runs)
    figures["busbw_median_gbs"] = round(median, 2)
    if bus.peak_gbs:
        figures["busbw_of_peak"] = round(median / bus.peak_gbs, 3)
    if bus.min_gbs is not None and median < bus.min_gbs:
        return (
            f"all-reduce bus bandwidth {median:.1f} GB/s (median of {len(runs)} runs) is under "
            f"the {bus.min_gbs:g} GB/s minimum for {bus.kind} ({bus.source}): check the "
            "NVLinks (nvidia-smi nvlink -s) and topology (nvidia-smi topo -m)"
        )
    return None
