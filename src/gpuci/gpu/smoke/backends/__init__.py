"""Load generators behind one small protocol, so the check logic is framework-free.

``torch`` and ``cupy`` drive real GPUs; ``numpy`` runs the same checks on the CPU, which is how
CI without a GPU proves the logic (pattern mismatches, GEMM comparison, budgets). Frameworks are
imported only when chosen, never at module import time.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Protocol

from gpuci.errors import InputError


class Device(Protocol):
    """One GPU (or the CPU standing in for one) as the checks use it."""

    index: int
    name: str

    def mem_info(self) -> tuple[int, int]: ...  # (free, total) bytes
    def tiny_kernel(self, n: int) -> float: ...  # sum of 0..n-1 computed on the device
    def empty(self, nbytes: int) -> Any: ...  # uint8 buffer
    def fill(self, buf: Any, byte: int) -> None: ...
    def pattern_errors(self, buf: Any, byte: int) -> int: ...  # bytes that differ from byte
    def randint(self, shape: tuple[int, int], low: int, high: int, seed: int) -> Any: ...  # fp16
    def matmul(self, a: Any, b: Any) -> Any: ...
    def rows(self, x: Any, index: list[int]) -> Any: ...
    def col_sums(self, x: Any) -> Any: ...  # numpy float64 column sums (FP32 on the device)
    def max_abs_diff(self, a: Any, b: Any) -> float: ...
    def to_host(self, x: Any) -> Any: ...  # numpy float32 array
    def copy(self, dst: Any, src: Any) -> None: ...
    def synchronize(self) -> None: ...
    def pinned(self, nbytes: int) -> Any: ...  # page-locked host buffer when the device has one
    def h2d(self, dst: Any, host: Any) -> None: ...
    def d2h(self, host: Any, src: Any) -> None: ...
    def release(self) -> None: ...  # give cached memory back after a check


class Backend(Protocol):
    name: str
    version: str
    is_gpu: bool

    def device_count(self) -> int: ...
    def device_uuid(self, index: int) -> str | None: ...
    def open(self, index: int) -> Device: ...
    def all_reduce_ones(self, indices: list[int], n: int) -> list[tuple[float, float]]: ...


class BackendUnavailable(Exception):
    """The framework is installed but cannot drive a GPU here; the reason is one line."""


def installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def resolve_framework(framework: str) -> str:
    """``auto`` -> ``torch`` or ``cupy`` (whichever is installed) or ``none``, without importing."""
    if framework == "auto":
        for name in ("torch", "cupy"):
            if installed(name):
                return name
        return "none"
    if framework in ("torch", "cupy") and not installed(framework):
        raise InputError(
            f"framework '{framework}' was asked for but {framework} is not installed",
            hint=f"install {framework} in this job's Python, or set framework: auto",
        )
    return framework


def load_backend(framework: str) -> Backend:
    """Import and start the framework; ``BackendUnavailable`` when it cannot see a GPU."""
    if framework == "torch":
        from gpuci.gpu.smoke.backends.torch_backend import TorchBackend

        return TorchBackend()
    if framework == "cupy":
        from gpuci.gpu.smoke.backends.cupy_backend import CupyBackend

        return CupyBackend()
    if framework == "numpy":
        from gpuci.gpu.smoke.backends.numpy_backend import NumpyBackend

        return NumpyBackend()
    raise InputError(f"unknown framework '{framework}'", hint="use auto, torch, cupy or none")
