"""Load generators behind one small protocol, so the check logic is framework-free.

``torch`` and ``cupy`` drive real GPUs; ``numpy`` runs the same checks on the CPU, which is how
CI without a GPU proves the logic (pattern mismatches, GEMM comparison, budgets). Frameworks are
imported only when chosen, never at module import time.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from gpuci.errors import BackendUnavailable, InputError

__all__ = [
    "Backend",
    "BackendUnavailable",
    "Device",
    "installed",
    "load_backend",
    "resolve_framework",
    "torch_is_cpu_only",
]


class Device(Protocol):
    """One GPU (or the CPU standing in for one) as the checks use it."""

    index: int
    name: str
    pattern_reads: int  # whole reads of a buffer that pattern_errors makes when nothing is wrong

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
    # seconds for ``repeats`` calls of ``fn``, timed by the device (CUDA events on a GPU)
    def time_calls(self, fn: Callable[[], Any], repeats: int) -> float: ...


class Backend(Protocol):
    name: str
    version: str
    is_gpu: bool
    # ``module:function`` doing ``all_reduce_ones(indices, n)`` in a fresh process (the NCCL
    # check runs it in a child it can kill); raises BackendUnavailable when NCCL is missing.
    reducer: str

    def device_count(self) -> int: ...
    def device_uuid(self, index: int) -> str | None: ...  # any spelling: GPU-/MIG- or bare
    def device_pci_bus_id(self, index: int) -> str | None: ...  # "0000:18:00.0"
    def open(self, index: int) -> Device: ...


def installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def torch_is_cpu_only() -> bool:
    """True when the installed torch is a CPU-only build, read from ``torch/version.py``.

    Importing torch takes seconds; its ``version.py`` says ``cuda = None`` (or ``cuda:
    Optional[str] = None``) in a CPU-only wheel and names the CUDA version otherwise.
    """
    spec = importlib.util.find_spec("torch")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            text = (Path(folder) / "version.py").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        found = re.search(r"^cuda\s*(?::[^=\n]*)?=\s*(\S+)", text, re.MULTILINE)
        if found:
            return found.group(1) == "None"
    return False


def resolve_framework(
    framework: str,
    is_installed: Callable[[str], bool] = installed,
    cpu_only_torch: Callable[[], bool] = torch_is_cpu_only,
) -> str:
    """``auto`` -> ``torch`` or ``cupy`` (whichever can drive a GPU) or ``none``, no import.

    A CPU-only torch cannot drive a GPU: with cupy also installed, ``auto`` takes cupy.
    """
    if framework == "auto":
        if is_installed("torch") and is_installed("cupy") and cpu_only_torch():
            return "cupy"
        for name in ("torch", "cupy"):
            if is_installed(name):
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
        from gpuci.gpu._smoke.backends.torch_backend import TorchBackend

        return TorchBackend()
    if framework == "cupy":
        from gpuci.gpu._smoke.backends.cupy_backend import CupyBackend

        return CupyBackend()
    if framework == "numpy":
        from gpuci.gpu._smoke.backends.numpy_backend import NumpyBackend

        return NumpyBackend()
    raise InputError(f"unknown framework '{framework}'", hint="use auto, torch, cupy or none")
