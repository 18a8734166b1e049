"""PyTorch on CUDA (or on the CPU, for the CI smoke of this very code)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from gpuci.errors import BackendUnavailable


def _torch() -> Any:
    import torch

    return torch


class TorchDevice:
    pattern_reads = 1  # aminmax: min and max in one fused read

    def __init__(self, torch: Any, index: int, device_type: str, cpu_mem: int | None) -> None:
        self._t = torch
        self._cpu_mem = cpu_mem
        self.index = index
        self._cuda = device_type == "cuda"
        self.dev = torch.device(device_type, index) if self._cuda else torch.device("cpu")
        if self._cuda:
            torch.cuda.set_device(self.dev)
            self.name = torch.cuda.get_device_name(self.dev)
        else:
            self.name = "torch CPU"

    def mem_info(self) -> tuple[int, int]:
        if self._cuda:
            free, total = self._t.cuda.mem_get_info(self.dev)
            return int(free), int(total)
        if self._cpu_mem is not None:
            return self._cpu_mem, self._cpu_mem
        pages = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return int(pages), int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))

    def tiny_kernel(self, n: int) -> float:
        x = self._t.arange(n, dtype=self._t.float64, device=self.dev)
        return float(x.sum().item())

    def empty(self, nbytes: int) -> Any:
        return self._t.empty(nbytes, dtype=self._t.uint8, device=self.dev)

    def fill(self, buf: Any, byte: int) -> None:
        buf.fill_(byte)

    def pattern_errors(self, buf: Any, byte: int) -> int:
        t = self._t
        if buf.numel() % 8 == 0:
            # min == max == the pattern word proves every byte without a full-size temporary
            word = int.from_bytes(bytes([byte]) * 8, "little", signed=True)
            lo, hi = t.aminmax(buf.view(t.int64))
            if int(lo.item()) == word and int(hi.item()) == word:
                return 0
        return int((buf != byte).sum().item())

    def randint(self, shape: tuple[int, int], low: int, high: int, seed: int) -> Any:
        gen = self._t.Generator(device=self.dev).manual_seed(seed)
        x = self._t.randint(low, high, shape, generator=gen, dtype=self._t.int8, device=self.dev)
        return x.to(self._t.float16)

    def matmul(self, a: Any, b: Any) -> Any:
        return self._t.matmul(a, b)

    def rows(self, x: Any, index: list[int]) -> Any:
        return x[self._t.tensor(index, device=x.device)]

    def col_sums(self, x: Any) -> Any:
        return x.float().sum(dim=0).double().cpu().numpy()

    def max_abs_diff(self, a: Any, b: Any) -> float:
        if self._t.equal(a, b):
            return 0.0
        return float((a.float() - b.float()).abs().max().item())

    def to_host(self, x: Any) -> Any:
        return x.float().cpu().numpy()

    def copy(self, dst: Any, src: Any) -> None:
        dst.copy_(src)

    def synchronize(self) -> None:
        if self._cuda:
            self._t.cuda.synchronize(self.dev)

    def pinned(self, nbytes: int) -> Any:
        return self._t.empty(nbytes, dtype=self._t.uint8, pin_memory=self._cuda)

    def h2d(self, dst: Any, host: Any) -> None:
        dst.copy_(host, non_blocking=True)

    def d2h(self, host: Any, src: Any) -> None:
        host.copy_(src, non_blocking=True)

    def release(self) -> None:
        if self._cuda:
            self._t.cuda.synchronize(self.dev)
            self._t.cuda.empty_cache()

    def time_calls(self, fn: Callable[[], Any], repeats: int) -> float:
        """CUDA events around the calls on this device's stream; the CPU clock on the CPU."""
        if not self._cuda:
            start = time.perf_counter()
            for _ in range(repeats):
                fn()
            return time.perf_counter() - start
        cuda = self._t.cuda
        with cuda.device(self.dev):
            begin, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
            begin.record()
            for _ in range(repeats):
                fn()
            end.record()
            end.synchronize()
            return begin.elapsed_time(end) / 1000  # milliseconds


def all_reduce_ones(indices: list[int], n: int) -> list[tuple[float, float]]:
    """NCCL all-reduce of ones over ``indices`` (run in a child process by the nccl check)."""
    t = _torch()
    from torch.cuda import nccl

    bufs = [t.ones(n, dtype=t.float32, device=f"cuda:{i}") for i in indices]
    if not nccl.is_available(bufs):
        raise BackendUnavailable(f"torch {t.__version__} was built without NCCL")
    from gpuci.gpu._smoke.allreduce import phase, report_timing, time_runs

    phase("collective")  # contexts are up; NCCL's set-up and the all-reduce follow
    nccl.all_reduce(bufs)

    def sync() -> None:
        for i in indices:
            t.cuda.synchronize(i)

    sync()
    sums = [(float(b.min().item()), float(b.max().item())) for b in bufs]
    # Then timed runs on the same buffers (the values grow; the speed does not care), with the
    # communicators torch cached on the first call: bus bandwidth, not NCCL's set-up.
    report_timing(4 * n, time_runs(lambda: nccl.all_reduce(bufs), sync))
    return sums


class TorchBackend:
    name = "torch"
    reducer = "gpuci.gpu._smoke.backends.torch_backend:all_reduce_ones"

    def __init__(self, device_type: str = "cuda", cpu_mem: int | None = None) -> None:
        """``device_type="cpu"`` (with ``cpu_mem`` as its pretend memory size) is for CI."""
        torch = _torch()
        self._cpu_mem = cpu_mem
        self._t = torch
        self.version = torch.__version__
        self._type = device_type
        self.is_gpu = device_type == "cuda"
        if self.is_gpu and not torch.cuda.is_available():
            built = torch.version.cuda
            why = (
                f"torch {torch.__version__} is a CPU-only build"
                if built is None
                else f"torch {torch.__version__} (CUDA {built}) cannot initialise CUDA here"
            )
            raise BackendUnavailable(why, built_cuda=built)

    def device_count(self) -> int:
        return self._t.cuda.device_count() if self.is_gpu else 1

    def device_uuid(self, index: int) -> str | None:
        """The device's UUID as CUDA spells it (bare; a MIG device's is its MIG UUID).

        Older torch has no ``uuid`` property: ``None``, and the caller matches by PCI bus id.
        """
        if not self.is_gpu:
            return None
        raw = getattr(self._t.cuda.get_device_properties(index), "uuid", None)
        return None if raw is None else str(raw)

    def device_pci_bus_id(self, index: int) -> str | None:
        if not self.is_gpu:
            return None
        props = self._t.cuda.get_device_properties(index)
        bus = getattr(props, "pci_bus_id", None)
        if bus is None:
            return None
        domain = getattr(props, "pci_domain_id", 0) or 0
        device = getattr(props, "pci_device_id", 0) or 0
        return f"{domain:04x}:{bus:02x}:{device:02x}.0"

    def open(self, index: int) -> TorchDevice:
        return TorchDevice(self._t, index, self._type, self._cpu_mem)
