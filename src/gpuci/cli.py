"""Parse, dispatch, exit codes; nothing else.

Flags are built from the command registry, so every action input is a flag of the same name.
Values stay raw strings here: :func:`gpuci.inputs.resolve` applies flag > env > default and
parses, so a malformed value gets the same one-line error whether it came from a flag or from
``INPUT_*``.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, NoReturn

from gpuci import __version__, settings
from gpuci.commands import Command, aliases_of, all_commands, command_named
from gpuci.commands._dispatch import run_command
from gpuci.errors import ExitCode, GpuciError, InputError
from gpuci.lost_signals import interrupt_signum, redelivered
from gpuci.runtime import Result, Runtime, detect_platform, inert

if TYPE_CHECKING:
    import argparse

EPILOG = """\
exit codes: 0 ok, 1 a check failed, 2 bad input or configuration, 3 infrastructure
(S3, network, driver). Every input is also read from INPUT_<NAME> (e.g. INPUT_MIN-MEMORY-GB);
flags beat env, env beats defaults. Output renders for GitHub Actions, GitLab CI, a terminal,
or JSON (--json).
"""


@functools.cache
def _parser_class() -> type[argparse.ArgumentParser]:
    """argparse, but a usage error is one line with the fix, like every other gpu-ci error.

    Made on first use: a command line :func:`_plain_args` reads never imports argparse.
    """
    import argparse

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:
            hint = f"see {self.prog} --help"
            runtime = Runtime()
            message = runtime.line(message)  # argparse quotes the user's words: one line
            if detect_platform(os.environ) == "github":  # an annotation too, like any bad input
                runtime.render_failure(InputError(f"{self.prog}: {message}", hint=hint))
            self.exit(2, inert(f"{self.prog}: bad input: {message} (fix: {hint})") + "\n")

    return _Parser


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dry-run", action="store_true", help="plan only: report what would happen, change nothing"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--probe", action="store_true", help="let a dry run make read-only network probes"
    )


def _add_command(subparsers, cmd: Command, prefix: str = "", only_sub: str | None = None) -> None:
    parser = subparsers.add_parser(
        cmd.name,
        aliases=list(aliases_of(cmd.name)) if not prefix else [],
        help=cmd.help,
        description=cmd.help,
        epilog=EPILOG if not cmd.subcommands else None,
    )
    full = f"{prefix}{cmd.name}"
    if cmd.subcommands:
        inner = parser.add_subparsers(title="sub-commands", metavar="SUB-COMMAND")
        inner.required = True
        chosen = [sub for sub in cmd.subcommands if sub.name == only_sub]
        for sub in chosen or cmd.subcommands:
            _add_command(inner, sub, prefix=f"{full} ")
        return
    parser.set_defaults(_command=cmd, _full_name=full)
    if cmd.positional:
        parser.add_argument(
            f"_pos_{cmd.positional}",
            nargs="*" if cmd.positional_rest else "?",
            metavar=cmd.positional.upper(),
        )
    for spec in cmd.inputs:
        text = spec.help
        if spec.default is not None:
            text += f" (default: {spec.default})"
        if spec.choices:
            text += f" [{'|'.join(spec.choices)}]"
        extra: dict = {}
        if spec.kind == "lines":  # repeatable: --min a=1 --min b=2 (joined by newlines)
            extra = {"action": "append"}
            text += " Repeatable."
        elif spec.kind == "bool":  # a bare --comment means true
            extra = {"nargs": "?", "const": "true"}
        help_text = text.replace("%", "%%")  # argparse formats help with %
        parser.add_argument(
            spec.flag, dest=f"in_{spec.dest}", metavar="VALUE", help=help_text, **extra
        )
    _add_common(parser)


def build_parser(only: Command | None = None, sub: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI, or with ``only`` just that command's part of it: enough to parse a command
    line that starts with its name, without loading every other command's definitions. ``sub``,
    when it names one of ``only``'s sub-commands, narrows it to that one (``cache-weights
    restore`` builds none of save's, prune's or ls's flags: a tenth of a warm hit's start-up)."""
    import argparse

    parser = _parser_class()(
        prog="python -m gpuci",
        description="gpu-ci: keep GPU CI jobs short, cheap and trustworthy.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gpuci {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    subparsers.required = True
    if only is None:
        for cmd in all_commands():
            _add_command(subparsers, cmd)
    else:
        _add_command(subparsers, only, only_sub=sub)
    return parser


_COMMON = {"--dry-run": "dry_run", "--json": "json", "--probe": "probe"}


def _plain_args(words: list[str]) -> SimpleNamespace | None:
    """What :func:`build_parser` would parse from a plain command line, without argparse; None
    for anything else, which then goes to argparse (help, errors and their messages included).

    Plain: ``COMMAND [SUB-COMMAND]`` naming a runnable command without a positional input,
    then only that command's own flags spelt out in full, each ``--flag VALUE`` or
    ``--flag=VALUE`` with a value that does not start with ``-`` (a ``bool`` input's value may
    be left out), and ``--json``, ``--dry-run``, ``--probe``. This is what actions and scripts
    write, and it spares a warm restore importing and building argparse (a tenth of its
    start-up). tests/test_cli.py checks both readings agree.
    """
    top = command_named(words[0]) if words else None
    if top is None:
        return None
    cmd: Command | None = top
    rest, full = words[1:], top.name
    if top.subcommands:
        cmd = next((sub for sub in top.subcommands if rest and sub.name == rest[0]), None)
        rest, full = rest[1:], f"{full} {rest[0] if rest else ''}"
    if cmd is None or cmd.positional or cmd.target is None:
        return None
    args = SimpleNamespace(_command=cmd, _full_name=full, dry_run=False, json=False, probe=False)
    specs = {spec.flag: spec for spec in cmd.inputs}
    for spec in cmd.inputs:
        setattr(args, f"in_{spec.dest}", None)
    i = 0
    while i < len(rest):
        flag, eq, value = rest[i].partition("=")
        i += 1
        if flag in _COMMON and not eq:
            setattr(args, _COMMON[flag], True)
            continue
        found = specs.get(flag)
        if found is None or not flag.startswith("--"):
            return None  # a positional, an abbreviation, --help, a typo: argparse says what
        if not eq:
            if i < len(rest) and not rest[i].startswith("-"):
                value, i = rest[i], i + 1
            elif found.kind == "bool" and (i == len(rest) or rest[i].startswith("--")):
                value = "true"  # a bare --comment means true
            else:
                return None
        dest = f"in_{found.dest}"
        if found.kind == "lines":  # repeatable: --min a=1 --min b=2 (a list, as argparse's)
            setattr(args, dest, [*(getattr(args, dest) or []), value])
        else:
            setattr(args, dest, value)
    return args


def _flags(args: argparse.Namespace | SimpleNamespace, cmd: Command) -> dict[str, str | None]:
    flags = {spec.name: getattr(args, f"in_{spec.dest}", None) for spec in cmd.inputs}
    for name, value in flags.items():
        if isinstance(value, list):  # a repeated "lines" flag
            flags[name] = "\n".join(value)
    if cmd.positional:
        positional = getattr(args, f"_pos_{cmd.positional}", None)
        if isinstance(positional, list):  # every word after the flags: one command line
            import shlex

            positional = (
                shlex.join(positional) if len(positional) > 1 else (positional or [None])[0]
            )
        if positional is not None:
            if flags.get(cmd.positional) not in (None, positional):
                raise InputError(
                    f"'{cmd.positional}' given twice with different values",
                    hint=f"pass {cmd.positional} once",
                )
            flags[cmd.positional] = positional
    return flags


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush to a closed pipe cannot fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _kill_helpers_on_sigterm() -> None:
    """The runner's SIGTERM ends the step and the helpers it started in sessions of their own
    (:mod:`gpuci.procgroup`), which do not hear it; loads nothing a step that starts none needs."""
    import signal

    def on_sigterm(signum: int, _frame: object) -> None:
        procgroup = sys.modules.get("gpuci.procgroup")
        if procgroup is not None:  # else no helper was ever started
            procgroup.kill_all(reap=False)  # the process ends next: the kernel reaps
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)

    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, on_sigterm)


def _spare_httpx_cli() -> None:
    """Keep httpx's own command line (click, rich, pygments) out of this process.

    ``import httpx`` imports ``httpx._main``, the ``httpx`` program, for its ``main``: half of
    httpx's import time and a third of a warm ``retry-fetch``'s start-up
    (docs/benchmarks.md), for a program gpu-ci never runs. A stand-in takes its place; called,
    it imports the real one. The CLI owns its process; the API leaves httpx as it is.
    """
    if "httpx" in sys.modules or "httpx._main" in sys.modules:
        return
    import types

    stand_in = types.ModuleType("httpx._main")

    def real_main(*args: object, **kwargs: object) -> object:
        import importlib

        sys.modules.pop("httpx._main", None)
        return importlib.import_module("httpx._main").main(*args, **kwargs)

    stand_in.main = real_main  # type: ignore[attr-defined]
    sys.modules["httpx._main"] = stand_in


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    _spare_httpx_cli()
    # `python -m gpuci cache-weights restore ...` needs cache-weights' parser only; anything
    # else (--help, --version, a misspelt command) gets the whole CLI and its full messages.
    args: argparse.Namespace | SimpleNamespace | None = _plain_args(words)
    if args is None:
        parser = build_parser(
            command_named(words[0]) if words else None, words[1] if len(words) > 1 else None
        )
        args, extra = parser.parse_known_args(words)
        if extra:  # name the command whose flags these are not, not the top-level parser
            prog = f"{parser.prog} {args._full_name}"
            _parser_class()(prog=prog).error(f"unrecognized arguments: {' '.join(extra)}")
    cmd: Command = args._command
    dry_run = args.dry_run or settings.DRY_RUN.is_true()
    # --probe: a dry run may ask servers (runtime.probes_allowed reads the runtime's environment)
    environ = {**os.environ, settings.PROBE.name: "true"} if args.probe else None
    runtime = Runtime(environ, json_mode=args.json, dry_run=dry_run)
    _kill_helpers_on_sigterm()
    with redelivered(interrupt_signum):  # a Ctrl-C that a finalizer swallowed counts too
        return _run(cmd, args, runtime)


def _run(cmd: Command, args: argparse.Namespace | SimpleNamespace, runtime: Runtime) -> int:
    """Run ``cmd`` and render what it did; every failure as its one line and exit code."""
    try:
        runtime.preflight()
        try:
            flags = _flags(args, cmd)
        except GpuciError as exc:
            return runtime.render(Result.from_error(args._full_name, exc))
        result = run_command(cmd, args._full_name, flags, runtime)
        try:
            return runtime.render(result)
        except BrokenPipeError:  # `gpuci ... | true`: the work is done, only its report unread
            _drop_stdout()
            return int(result.exit_code)
    except GpuciError as exc:  # e.g. GITHUB_OUTPUT missing (preflight or while rendering)
        return runtime.render_failure(exc)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except BrokenPipeError:  # `gpuci ... | head`: the reader left; no traceback, as `yes | head`
        _drop_stdout()
        return 128 + 13  # SIGPIPE, what a shell reports for a writer killed by a closed pipe
    except Exception as exc:  # a traceback is a bug: say so in one line, keep it debuggable
        if settings.DEBUG.is_set():
            raise
        sys.stdout.write(
            f"error: internal error in {args._full_name}: "
            f"{type(exc).__name__}: {inert(runtime.line(str(exc)))} "
            "(fix: this is a gpu-ci bug; rerun with GPUCI_DEBUG=1 and report it)\n"
        )
        return int(ExitCode.INFRA)


if __name__ == "__main__":
    raise SystemExit(main())
