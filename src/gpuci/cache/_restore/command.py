"""``cache-weights restore``, the command: the restore, its report, then populate or fail-on-miss.

The restore itself is :func:`gpuci.cache._restore.operation.restore` (the Python API calls it
too); this renders its outcome (:mod:`gpuci.cache._restore.report`) and does what only a CI step
does on a miss or a partial hit: run ``populate`` and save, or fail the step (fail-on-miss).
"""

from __future__ import annotations

from gpuci.cache._restore.operation import restore
from gpuci.cache._restore.report import render
from gpuci.cache._stores.base import describe
from gpuci.cache.options import RestoreInputs
from gpuci.errors import ExitCode
from gpuci.runtime import Result, Runtime

__all__ = ["run"]


def run(inp: RestoreInputs, rt: Runtime) -> Result:
    """Restore: lookup -> plan -> place -> report (a miss, a dry run or lookup-only stop early).

    Args:
        inp: the checked inputs of ``cache-weights restore``.
        rt: the CI runtime (environment, dry run, log, masks).

    Returns:
        The step's Result: exit 1 on a miss with fail-on-miss, else 0.

    Raises:
        GpuciError: as :func:`gpuci.cache._restore.operation.restore` (the CLI maps each to its
            exit code and one line), and from populate a command that fails or is not there.
    """
    done = restore(inp, rt)
    result = render(done, rt)
    req, match = done.request, done.match
    if req is None:  # a plan without credentials: nothing was looked up
        return result
    missed_exact = match is None or (done.moved is not None and not match.exact)
    if missed_exact and req.populate and not req.inp.lookup_only:
        from gpuci.cache._restore.populate import fill_on_miss  # a subprocess: only to populate

        return fill_on_miss(req.inp, rt, result, req.paths, req.start)
    if match is None and req.inp.fail_on_miss:
        result.exit_code = ExitCode.CHECK_FAILED
        result.error(
            f"cache miss for {req.key} in {describe(req.store)} and fail-on-miss is set",
            "gpu-ci cache: miss",
        )
    return result
