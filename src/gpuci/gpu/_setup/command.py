"""``gpu-setup``, the command: the operation's outcome rendered, and the job's GPUs exported.

Exporting ``CUDA_VISIBLE_DEVICES`` to the job's later steps is a CI step's job, so it is here,
not in :func:`gpuci.gpu._setup.operation.setup` (which the Python API calls too).
"""

from __future__ import annotations

from typing import Any

from gpuci import settings
from gpuci.gpu._setup.operation import setup
from gpuci.gpu._setup.report import render
from gpuci.gpu.options import SetupInputs
from gpuci.runtime import Result, Runtime

__all__ = ["run"]


def run(inp: SetupInputs, rt: Runtime, *, nvml: Any = None) -> Result:
    """The ``gpu-setup`` target: read, judge, describe; then (not in a dry run) write and export.

    Args:
        inp: the command's checked inputs.
        rt: the CI runtime; ``rt.dry_run`` writes and exports nothing and fails nothing.
        nvml: an NVML object to read instead of the driver's (e.g. a FakeNvml, in-process).

    Returns:
        The step's Result: exit 1 when a requirement is not met.

    Raises:
        NvmlUnavailable: no driver or NVML in a real run with ``require-gpu``.
        InputError: the report cannot be written.
    """
    done = setup(inp, rt, nvml=nvml)
    result = render(done)
    if done.path is not None and inp.export_visible_devices and done.units:
        result.env[settings.CUDA_VISIBLE_DEVICES.name] = ",".join(u.uuid for u in done.units)
    return result
