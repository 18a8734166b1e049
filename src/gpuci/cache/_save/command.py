"""``cache-weights save``, the command: the save (:func:`gpuci.cache._save.operation.save`, which
the Python API calls too), rendered as the step's outputs, summary and report."""

from __future__ import annotations

from gpuci.cache._save.operation import save
from gpuci.cache._save.report import render
from gpuci.cache.options import SaveInputs
from gpuci.runtime import Result, Runtime

__all__ = ["run"]


def run(inp: SaveInputs, rt: Runtime) -> Result:
    """Save: scan -> hash and upload (together) -> publish (manifest, ref) -> report.

    Args:
        inp: the checked inputs of ``cache-weights save``.
        rt: the CI runtime (environment, dry run, log, masks).

    Returns:
        The step's Result.

    Raises:
        GpuciError: as :func:`gpuci.cache._save.operation.save` (the CLI maps each to its exit
            code and one line).
    """
    return render(save(inp, rt))
