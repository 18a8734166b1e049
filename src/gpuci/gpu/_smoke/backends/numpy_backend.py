"""The CPU stand-in: the same checks on host memory, so CI without a GPU tests the logic."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np


class NumpyDevice:
    pattern_reads = 1

    def __init__(self, index: int, mem_bytes: int) -> None:
        self.index = index
        self.name = "numpy CPU"
        self._mem = mem_bytes

    def mem_info(self) -> tuple[int, int]:
        return self._mem, self._mem

    def tiny_kernel(self, n: int) -> float:
        return float(np.arange(n, dtype=np.float64).sum())

    def empty(self, nbytes: int) -> Any:
        return np.empty(nbytes, dtype=np.uint8)

    def fill(self, buf: Any, byte: int) -> None:
        buf.fill(byte)

    def pattern_errors(self, buf: Any, byte: int) -> int:
        return int(np.count_nonzero(buf != byte))

    def randint(self, shape: tuple[int, int], low: int, high: int, seed: int) -> Any:
        rng = np.random.default_rng(seed)
        return rng.integers(low, high, shape).astype(np.float16)

    def matmul(self, a: Any, b: Any) -> Any:
        return (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)

    def rows(self, x: Any, index: list[int]) -> Any:
        return x[index]

    def col_sums(self, x: Any) -> Any:
        return x.astype(np.float32).sum(axis=0).astype(np.float64)

    def max_abs_diff(self, a: Any, b: Any) -> float:
        return float(np.max(np.abs(a.astype(np.float32) - b.astype(np.float32))))

    def to_host(self, x: Any) -> Any:
        return np.asarray(x, dtype=np.float32)

    def copy(self, dst: Any, src: Any) -> None:
        np.copyto(dst, src)

    def synchronize(self) -> None:
        pass

    def pinned(self, nbytes: int) -> Any:
        return np.empty(nbytes, dtype=np.uint8)

    def h2d(self, dst: Any, host: Any) -> None:
        np.copyto(dst, host)

    def d2h(self, host: Any, src: Any) -> None:
        np.copyto(host, src)

    def release(self) -> None:
        pass

    def time_calls(self, fn: Callable[[], Any], repeats: int) -> float:
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        return time.perf_counter() - start


def all_reduce_ones(indices: list[int], n: int) -> list[tuple[float, float]]:
    """The CPU stand-in of an all-reduce: sum a vector of ones per "GPU"."""
    from gpuci.gpu._smoke.allreduce import report_timing, time_runs

    bufs = [np.ones(n, dtype=np.float32) for _ in indices]
    total = np.sum(bufs, axis=0)
    report_timing(4 * n, time_runs(lambda: np.sum(bufs, axis=0), lambda: None))
    return [(float(total.min()), float(total.max())) for _ in indices]


class NumpyBackend:
    """``devices`` CPU "GPUs" of ``mem_bytes`` each; subclass a device to inject faults."""

    name = "numpy"
    is_gpu = False
    reducer = "gpuci.gpu._smoke.backends.numpy_backend:all_reduce_ones"
    device_class: type[NumpyDevice] = NumpyDevice

    def __init__(self, devices: int = 1, mem_bytes: int = 64 * 1024 * 1024) -> None:
        self.version = np.__version__
        self._devices = devices
        self._mem = mem_bytes

    def device_count(self) -> int:
        return self._devices

    def device_uuid(self, index: int) -> str | None:
        return None

    def device_pci_bus_id(self, index: int) -> str | None:
        return None

    def open(self, index: int) -> NumpyDevice:
        return self.device_class(index, self._mem)
