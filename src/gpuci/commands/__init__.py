"""The command registry: names, help and input specs, importable without heavy dependencies.

Each command's implementation is named as ``"module:function"`` and imported only when that
command runs, so ``python -m gpuci --help`` stays fast and ``gpu-setup`` never loads boto3.
Every action is also a command of the same name: where the action's folder is named otherwise
than the command (``actions/metric-gate`` runs ``gate``), the folder's name is an alias
(:data:`ALIASES`). Every action input is a flag of the same name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuci.inputs import Input

if TYPE_CHECKING:
    from gpuci.runtime import Result, Runtime

# A command's function takes its resolved inputs: a dict keyed by input name, or, for a command
# with ``typed`` set, that frozen dataclass (see :mod:`gpuci.typed`).
RunFn = Callable[[Any, "Runtime"], "Result"]


# Outputs that are booleans: always "true" or "false", never empty, even when the command
# failed before setting them (the CLI fills them) or the all-in-one action skipped its part.
BOOLEAN_OUTPUTS = frozenset({"cache-hit", "passed", "populated"})


@dataclass(frozen=True)
class Output:
    """One action output; the action's ``outputs:`` map is generated from these."""

    name: str
    help: str


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    inputs: tuple[Input, ...] = ()
    outputs: tuple[Output, ...] = ()
    target: str | None = None  # "package.module:function"; None = not implemented yet
    subcommands: tuple[Command, ...] = ()
    actions: tuple[str, ...] = ()  # action folders (relative to the repo) that run this command
    positional: str | None = None  # name of an input that may also be given positionally
    positional_rest: bool = False  # the positional takes every remaining word (after --)
    # For one action serving several sub-commands (actions/gpu-pod): the input naming which.
    dispatch: str | None = None
    notes: tuple[str, ...] = ()  # paragraphs for the action's README, after the tables
    # "package.module:Class": the frozen dataclass the function takes instead of a values dict.
    typed: str | None = None

    def load(self) -> RunFn | None:
        if self.target is None:
            return None
        module, _, func = self.target.partition(":")
        return getattr(importlib.import_module(module), func)

    def load_typed(self) -> type | None:
        """The dataclass named by ``typed`` (imported now), or None for an untyped command."""
        if self.typed is None:
            return None
        module, _, name = self.typed.partition(":")
        cls: type = getattr(importlib.import_module(module), name)
        return cls


# Where each top-level command is defined, in --help's order: the CLI imports only the module
# of the command it runs (``command_named``), not every command's definitions.
_DEFINED_IN = (
    ("gpu-setup", "gpu_setup", "COMMAND"),
    ("cache-weights", "cache_weights", "COMMAND"),
    ("retry-fetch", "retry_fetch", "COMMAND"),
    ("gpu-smoke", "gpu_smoke", "COMMAND"),
    ("dry-run", "dry_run", "COMMAND"),
    ("pods", "pods", "COMMAND"),
    ("runners", "runners", "COMMAND"),
    ("gpus", "gpus", "COMMAND"),
    ("gate", "training", "GATE"),
    ("provenance", "training", "PROVENANCE"),
    ("report", "training", "REPORT"),
)


# Action names that differ from their command's: ``python -m gpuci metric-gate`` is ``gate``.
# tests/test_cli.py checks every folder under actions/ is a command name or one of these.
ALIASES = {"gpu-pod": "pods", "metric-gate": "gate"}


def aliases_of(name: str) -> tuple[str, ...]:
    """The other names the top-level command ``name`` answers to (its action's, if different)."""
    return tuple(alias for alias, target in ALIASES.items() if target == name)


def _defined(module: str, attr: str) -> Command:
    return getattr(importlib.import_module(f"gpuci.commands.{module}"), attr)


def all_commands() -> tuple[Command, ...]:
    return tuple(_defined(module, attr) for _, module, attr in _DEFINED_IN)


def command_named(name: str) -> Command | None:
    """The top-level command called ``name`` (or an alias of it), loading only its module; None
    if there is none."""
    name = ALIASES.get(name, name)
    for known, module, attr in _DEFINED_IN:
        if known == name:
            return _defined(module, attr)
    return None


def iter_leaf_commands() -> list[tuple[str, Command]]:
    """(full name, command) for every runnable command, e.g. ``cache-weights save``."""
    leaves: list[tuple[str, Command]] = []
    for cmd in all_commands():
        if cmd.subcommands:
            leaves += [(f"{cmd.name} {sub.name}", sub) for sub in cmd.subcommands]
        else:
            leaves.append((cmd.name, cmd))
    return leaves


def command_for_action(action_folder: str) -> tuple[str, Command] | None:
    """Map ``actions/cache-weights/save`` (or ``.`` for the root action) to its command."""
    folder = action_folder.strip("/") or "."
    for full_name, cmd in iter_leaf_commands():
        if folder in cmd.actions:
            return full_name, cmd
    for cmd in all_commands():  # a dispatching action: the caller picks the sub-command
        if cmd.dispatch and folder in cmd.actions:
            return cmd.name, cmd
    return None
