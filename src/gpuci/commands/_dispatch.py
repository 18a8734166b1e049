"""Running one command: inputs resolved, errors turned into its Result, booleans never empty.

Shared by the CLI (``gpuci.cli``) and the dry run (``gpuci.dryrun``), which both sit above the
registry; it imports neither, so the arrows between them point one way (down, to here).
"""

from __future__ import annotations

from gpuci.commands import BOOLEAN_OUTPUTS, Command, OptionsT
from gpuci.errors import ExitCode, GpuciError
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
    for output in cmd.outputs:  # a boolean output is never empty, even after an error
        if output.name in BOOLEAN_OUTPUTS and result.outputs.get(output.name) in (None, ""):
            result.outputs[output.name] = False
    return result
