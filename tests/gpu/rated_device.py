"""A CPU stand-in GPU that reports the GEMM and copy speeds a test gives it.

The numpy device does the real arithmetic (so every correctness check runs), but ``time_calls``
answers with the seconds a GPU of ``tflops`` / ``gbs`` would take for the work just timed, so a
test can put a fake T4 at its real sustained 24 TFLOP/s, or a fake H200 at a copy rate of its
choosing, and see how the model table judges it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuci.gpu._smoke.backends.numpy_backend import NumpyBackend, NumpyDevice


class RatedDevice(NumpyDevice):
    tflops = 1.0  # FP16 GEMM rate to report
    gbs = 1.0  # device copy rate to report (read + written bytes)

    def __init__(self, index: int, mem_bytes: int) -> None:
        super().__init__(index, mem_bytes)
        self._work: tuple[str, float] = ("", 0.0)

    def matmul(self, a: Any, b: Any) -> Any:
        self._work = ("gemm", 2.0 * a.shape[0] * a.shape[1] * b.shape[1])
        return super().matmul(a, b)

    def copy(self, dst: Any, src: Any) -> None:
        self._work = ("copy", 2.0 * src.nbytes)
        super().copy(dst, src)

    def time_calls(self, fn: Callable[[], Any], repeats: int) -> float:
        super().time_calls(fn, repeats)
        kind, amount = self._work
        rate = self.tflops * 1e12 if kind == "gemm" else self.gbs * 1e9
        return amount * repeats / rate


class RatedGpus(NumpyBackend):
    """CPU stand-ins that claim to be the NVML GPUs with ``uuids``, at the given rates."""

    is_gpu = True

    def __init__(self, uuids: list[str], *, tflops: float = 1.0, gbs: float = 1.0) -> None:
        super().__init__(devices=len(uuids))
        self.uuids = uuids
        self.device_class = type("Rated", (RatedDevice,), {"tflops": tflops, "gbs": gbs})

    def device_uuid(self, index: int) -> str | None:
        return self.uuids[index]
