"""Running one command: inputs resolved, errors turned into its Result, booleans never empty.

Shared by the CLI (``gpuci.cli``) and the dry run (``gpuci.dryrun``), which both sit above the
registry; it imports neither, so the arrows between them point one way (down, to here).
"""

from __future__ import annotations

import sys

from gpuci import settings
from gpuci.commands import BOOLEAN_OUTPUTS, Command, OptionsT
from gpuci.errors import ExitCode, GpuciError, InfraError
from gpuci.inputs import build, resolve
from gpuci.runtime import Result, Runtime

__all__ = ["run_command"]


def run_command(
    cmd: Command[OptionsT],
    full_name: str,
    flags: dict[str, str | None],
    runtime: Runtime,
) -> Result:
    """Resolve inputs and run one command, turning every known error into a Result."""
    try:
        values = resolve(cmd.inputs, flags, runtime.environ, on_secret=runtime.mask)
        func, cls = cmd.load(), cmd.load_options()
        if func is None or cls is None:
            result = Result(
                command=full_name,
                exit_code=ExitCode.BAD_INPUT,
                headline="not implemented yet in this version of gpu-ci",
            )
        else:
            result = func(build(cls, values), runtime)  # parsed once, here
    except GpuciError as exc:
        result = Result.from_error(full_name, exc)
    except BaseException as exc:
        if not _stray_interrupted(exc):
            raise
        result = Result.from_error(full_name, _stopped(exc))
    for output in cmd.outputs:  # a boolean output is never empty, even after an error
        if output.name in BOOLEAN_OUTPUTS and result.outputs.get(output.name) in (None, ""):
            result.outputs[output.name] = False
    return result


def _stray_interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is a :class:`~gpuci.retry.Interrupted` to report in one line (not under
    ``GPUCI_DEBUG``). Only a command that loaded :mod:`gpuci.retry` can raise one, and a
    warm restore from a file store does not load it (tests/cache/test_startup.py)."""
    retry = sys.modules.get("gpuci.retry")
    return retry is not None and isinstance(exc, retry.Interrupted) and not settings.DEBUG.is_set()


def _stopped(exc: BaseException) -> InfraError:
    """An :class:`~gpuci.retry.Interrupted` that reached the command: its requests were stopped,
    yet no failure came as the cause and no Ctrl-C (that one is a KeyboardInterrupt, exit 130):
    a bug, said in one line with exit 3. A BaseException, it went past every ``except
    Exception`` on its way, and out of ``python -m gpuci`` as a traceback."""
    return InfraError(
        f"the command did not finish: {exc}, with no failure recorded as the cause",
        hint="run it again; if it recurs, rerun with GPUCI_DEBUG=1 and report it",
    )
