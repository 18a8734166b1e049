"""The command registry: names, help and input specs, importable without heavy dependencies.

Each command's implementation is named as ``"module:function"`` and imported only when that
command runs, so ``python -m gpuci --help`` stays fast and ``gpu-setup`` never loads boto3.
Every action is also a command of the same name: where the action's folder is named otherwise
than the command (``actions/metric-gate`` runs ``gate``), the folder's name is an alias
(:data:`ALIASES`). Every action input is a flag of the same name. A command's inputs are the
fields of its ``options`` class (:func:`gpuci.inputs.options`), the one place they are declared,
also named as ``"module:Class"`` and imported only when asked for; each definition states the
class as its type (``RESTORE: Command[RestoreInputs]``), and ``tests/test_typed.py`` checks that
the class named is the one the command's function takes.

The registry (the names below) is the CLI's and the generated actions'; the modules defining
each command (``_gpu.py``, ``_pods.py``, ...) are internal, as are ``_dispatch`` (running
one), ``_dry_run`` and ``_all_in_one``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from gpuci.inputs import Input, specs_of

__all__ = [
    "ALIASES",
    "BOOLEAN_OUTPUTS",
    "Command",
    "OptionsT",
    "Output",
    "aliases_of",
    "all_commands",
    "command_for_action",
    "command_named",
    "iter_leaf_commands",
]

if TYPE_CHECKING:
    from gpuci.runtime import Result, Runtime

OptionsT = TypeVar("OptionsT")


# Outputs that are booleans: always "true" or "false", never empty, even when the command
# failed before setting them (the CLI fills them) or the all-in-one action skipped its part.
BOOLEAN_OUTPUTS = frozenset({"cache-hit", "passed", "populated"})


@dataclass(frozen=True)
class Output:
    """One action output; the action's ``outputs:`` map is generated from these."""

    name: str
    help: str


@dataclass(frozen=True)
class Command(Generic[OptionsT]):
    """One command: its inputs are the fields of ``options``; ``target`` takes an instance."""

    name: str
    help: str
    options: str | None = None  # "package.module:Class"; None for a group of sub-commands
    outputs: tuple[Output, ...] = ()
    target: str | None = None  # "package.module:function"; None = not implemented yet
    subcommands: tuple[Command[Any], ...] = ()
    actions: tuple[str, ...] = ()  # action folders (relative to the repo) that run this command
    positional: str | None = None  # name of an input that may also be given positionally
    positional_rest: bool = False  # the positional takes every remaining word (after --)
    # For one action serving several sub-commands (actions/gpu-pod): the input naming which.
    dispatch: str | None = None
    notes: tuple[str, ...] = ()  # paragraphs for the action's README, after the tables

    @property
    def inputs(self) -> tuple[Input, ...]:
        """The specs of the flags, ``INPUT_*`` and action inputs, read from ``options``."""
        cls = self.load_options()
        return () if cls is None else specs_of(cls)

    def load_options(self) -> type[OptionsT] | None:
        """The class named by ``options``, imported now; None for a group."""
        return None if self.options is None else _imported(self.options)

    def load(self) -> Callable[[OptionsT, Runtime], Result] | None:
        """The function named by ``target``, imported now (so ``--help`` loads none)."""
        return None if self.target is None else _imported(self.target)


def _imported(path: str) -> Any:
    """What ``package.module:name`` names, its module imported now."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


# Where each top-level command is defined, in --help's order: the CLI imports only the module
# of the command it runs (``command_named``), not every command's definitions.
_DEFINED_IN = (
    ("gpu-setup", "_gpu", "SETUP"),
    ("cache-weights", "_cache_weights", "COMMAND"),
    ("retry-fetch", "_retry_fetch", "COMMAND"),
    ("gpu-smoke", "_gpu", "SMOKE"),
    ("dry-run", "_dry_run", "COMMAND"),
    ("pods", "_pods", "COMMAND"),
    ("runners", "_gpu", "RUNNERS"),
    ("gpus", "_gpu", "GPUS"),
    ("gate", "_training", "GATE"),
    ("provenance", "_training", "PROVENANCE"),
    ("report", "_training", "REPORT"),
)


# Action names that differ from their command's: ``python -m gpuci metric-gate`` is ``gate``.
# tests/test_cli.py checks every folder under actions/ is a command name or one of these.
ALIASES = {"gpu-pod": "pods", "metric-gate": "gate"}


def aliases_of(name: str) -> tuple[str, ...]:
    """The other names the top-level command ``name`` answers to (its action's, if different)."""
    return tuple(alias for alias, target in ALIASES.items() if target == name)


def _defined(module: str, attr: str) -> Command[Any]:
    return getattr(importlib.import_module(f"gpuci.commands.{module}"), attr)


def all_commands() -> tuple[Command[Any], ...]:
    return tuple(_defined(module, attr) for _, module, attr in _DEFINED_IN)


def command_named(name: str) -> Command[Any] | None:
    """The top-level command called ``name`` (or an alias of it), loading only its module; None
    if there is none."""
    name = ALIASES.get(name, name)
    for known, module, attr in _DEFINED_IN:
        if known == name:
            return _defined(module, attr)
    return None


def iter_leaf_commands() -> list[tuple[str, Command[Any]]]:
    """(full name, command) for every runnable command, e.g. ``cache-weights save``."""
    leaves: list[tuple[str, Command[Any]]] = []
    for cmd in all_commands():
        if cmd.subcommands:
            leaves += [(f"{cmd.name} {sub.name}", sub) for sub in cmd.subcommands]
        else:
            leaves.append((cmd.name, cmd))
    return leaves


def command_for_action(action_folder: str) -> tuple[str, Command[Any]] | None:
    """Map ``actions/cache-weights/save`` (or ``.`` for the root action) to its command."""
    folder = action_folder.strip("/") or "."
    for full_name, cmd in iter_leaf_commands():
        if folder in cmd.actions:
            return full_name, cmd
    for cmd in all_commands():  # a dispatching action: the caller picks the sub-command
        if cmd.dispatch and folder in cmd.actions:
            return cmd.name, cmd
    return None
