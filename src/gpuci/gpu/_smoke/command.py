"""``gpu-smoke`` as a job runs it: the smoke, the GPUs' health record, then quarantine.

:func:`gpuci.gpu._smoke.smoke` judges the GPUs and nothing else (``runners release`` runs it
alone; the Python API calls the typed :func:`~gpuci.gpu._smoke.examine` it renders). The command
adds two steps around the verdict: each GPU's verdict goes to the health store
(:mod:`gpuci.gpu._health_record`, a courtesy: a failed write is a warning), and a hardware
verdict takes this runner out of the pool when ``on-failure`` asks
(:mod:`gpuci.quarantine`, a step on gpu's floor: ``tests/test_imports.py``).
"""

from __future__ import annotations

from gpuci import quarantine
from gpuci.gpu import _health_record as health_record
from gpuci.gpu._smoke import smoke
from gpuci.gpu.options import SmokeInputs
from gpuci.runtime import Result, Runtime

__all__ = ["run"]


def run(inp: SmokeInputs, rt: Runtime) -> Result:
    """The ``gpu-smoke`` target.

    Args:
        inp: the command's typed inputs.
        rt: where outputs, annotations and the summary go.

    Returns:
        The smoke's Result, with the quarantine's annotation when it took the runner out.

    Raises:
        InputError: bad inputs, among them quarantine labels GitHub will not remove (refused
            before the smoke spends its budget).
    """
    if inp.on_failure == "quarantine":
        quarantine.check_labels(inp.quarantine_labels)

    def after_verdict(result: Result) -> Result:
        health_record.record(result, inp.health_store, rt)
        return quarantine.after_verdict(result, inp, rt)

    # a check that hangs ends the process from the smoke's watchdog: the same steps run first
    return after_verdict(smoke(inp, rt, after_hang=after_verdict))
