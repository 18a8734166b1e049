"""The ``gemm`` check: an FP16 matrix product that must be exact, stable and fast enough.

Three phases on one product of small integers: against a CPU reference (sampled rows and every
column sum), against itself repeated (bit-identical), then timed by the device for TFLOP/s.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from gpuci.gpu._smoke.backends import Device
from gpuci.gpu._smoke.checks import CheckError, Context
from gpuci.gpu._smoke.load import Sizes, Target, timed


def gemm_estimate(target: Target, sizes: Sizes) -> float:
    n = sizes.gemm_n
    flops = 2 * n**3 * (sizes.gemm_repeats + sizes.gemm_stability_repeats + 2)
    host = 2 * n * n * 2 / (target.rates.pcie_gbs * 1e9)
    cpu = 2 * sizes.gemm_sample_rows * n * n / 2e9
    return flops / (target.rates.fp16_tflops * 1e12) + host + cpu + 0.3


def gemm(target: Target, ctx: Context, sizes: Sizes) -> dict[str, Any]:
    """FP16 GEMM of small integers, exact in FP32 accumulation, so any wrong bit shows.

    Sampled rows are checked against a CPU reference; every repeat must equal the first (cuBLAS
    is deterministic for the same inputs on the same GPU), and the repeats give TFLOP/s.
    """
    dev = target.need_device()
    n = sizes.gemm_n
    a = dev.randint((n, n), -2, 3, seed=1)
    b = dev.randint((n, n), -2, 3, seed=2)
    first = dev.matmul(a, b)
    dev.synchronize()
    figures: dict[str, Any] = {"n": n, "dtype": "float16"}
    err = _against_cpu(dev, a, b, first, sizes, figures)
    _against_itself(dev, a, b, first, sizes, figures, err)
    tflops = _speed(dev, a, b, target, sizes, figures)
    del a, b, first
    dev.release()
    minimum = target.minimums.gemm_tflops
    if minimum is not None and tflops < minimum:
        raise CheckError(
            f"FP16 GEMM {tflops:.0f} TFLOP/s is below the {minimum:g} TFLOP/s minimum "
            f"({target.minimums.source}): a low power cap or clocks held down?",
            figures,
        )
    return figures


def _against_cpu(
    dev: Device, a: Any, b: Any, first: Any, sizes: Sizes, figures: dict[str, Any]
) -> float:
    """Sampled rows, then every column sum, against the CPU; the rows' largest error."""
    import numpy as np

    n = sizes.gemm_n
    picks = sorted({0, n - 1, *np.linspace(0, n - 1, sizes.gemm_sample_rows, dtype=int).tolist()})
    b_host = dev.to_host(b)  # float32; integer sums here stay far below 2**24, so exact
    ref = (dev.to_host(dev.rows(a, picks)) @ b_host).astype(np.float64)
    got = dev.to_host(dev.rows(first, picks)).astype(np.float64)
    err = float(np.max(np.abs(got - ref)))
    figures["rows_checked"] = len(picks)
    # FP16 holds integers exactly up to 2048; |C| here stays far below, so any error is real.
    if err > 0.5:
        bad = int(np.count_nonzero(np.abs(got - ref) > 0.5))
        raise CheckError(
            f"GEMM differs from the CPU reference: {bad} element(s) wrong, max error {err:g}",
            {**figures, "max_abs_error": err},
        )
    # Every column at once: 1^T C must equal (1^T A) B, exact in integers; one wrong element
    # anywhere changes its column's sum.
    want = _colsum_times(dev.col_sums(a), b_host)
    del b_host
    have = dev.col_sums(first)
    off = np.abs(have - want)
    if float(off.max()) > 0.5:
        raise CheckError(
            f"GEMM differs from the CPU reference: {int(np.count_nonzero(off > 0.5))} column "
            f"sum(s) wrong, max error {float(off.max()):g}",
            {**figures, "max_abs_error": float(off.max())},
        )
    return err


def _against_itself(
    dev: Device,
    a: Any,
    b: Any,
    first: Any,
    sizes: Sizes,
    figures: dict[str, Any],
    err: float,
) -> None:
    """Stability: the same product again must be bit-identical (kept, compared, dropped)."""
    worst = 0.0
    for _ in range(sizes.gemm_stability_repeats):
        worst = max(worst, dev.max_abs_diff(dev.matmul(a, b), first))
    figures["max_abs_error"] = err
    figures["repeat_max_diff"] = worst
    if worst > 0:
        raise CheckError(
            f"GEMM is unstable: repeating the same product changed it by up to {worst:g}", figures
        )


def _speed(
    dev: Device, a: Any, b: Any, target: Target, sizes: Sizes, figures: dict[str, Any]
) -> float:
    """TFLOP/s: a warm-up right before, then enough products timed by the device."""
    n, repeats = sizes.gemm_n, sizes.gemm_repeats
    product = partial(dev.matmul, a, b)
    seconds = timed(dev, product, repeats)
    tflops = 2 * n**3 * repeats / seconds / 1e12
    figures["repeats"] = repeats
    figures["tflops"] = round(tflops, 2 if tflops >= 0.01 else 6)
    figures["min_tflops"] = target.minimums.gemm_tflops
    figures["min_basis"] = target.minimums.gemm_basis  # the measurement it rests on, or why not
    target.rates.fp16_tflops = max(tflops, 1e-6)
    return tflops


def _colsum_times(colsum: Any, b: Any, block: int = 512) -> Any:
    """``colsum @ b`` exactly, in int64 blocks so a large ``b`` never becomes one int64 copy."""
    import numpy as np

    exact = np.rint(colsum).astype(np.int64)
    out = np.zeros(b.shape[1], dtype=np.int64)
    for start in range(0, b.shape[0], block):
        out += exact[start : start + block] @ np.rint(b[start : start + block]).astype(np.int64)
    return out.astype(np.float64)
