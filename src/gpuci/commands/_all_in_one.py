"""The root ``action.yml`` (the all-in-one): which commands it runs, in order, and its input names.

One source for both ``scripts/gen_actions.py``, which generates the action from this, and the
local dry run, which has to map a ``uses: owner/gpu-ci@v1`` step's ``with:`` back to commands.
gpu-setup's names are kept; the cache restore's get ``cache-`` and gpu-smoke's ``smoke-`` (so
``report`` is gpu-setup's JSON report and ``smoke-report`` gpu-smoke's). A name that already
starts with its prefix keeps it (``cache-hit``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from gpuci.inputs import Input


@dataclass(frozen=True)
class Part:
    """One ``python -m gpuci <command>`` step of the root action."""

    step_id: str
    command: str  # full command name, e.g. "cache-weights restore"
    prefix: str = ""
    enabled_by: str | None = None  # the root input that switches this part on; None = always
    enabled_if: Literal["set", "true"] = "set"  # non-empty, or the boolean true
    also_by: str | None = None  # a second input that switches it on when set (an "or")

    def public(self, name: str) -> str:
        """The root action's name for one of this command's inputs or outputs."""
        return name if name.startswith(self.prefix) else self.prefix + name

    def condition(self) -> str | None:
        """The step's ``if:`` expression."""
        if self.enabled_by is None:
            return None
        if self.enabled_if == "true":
            return f"inputs.{self.enabled_by} == 'true'"
        also = f" || inputs.{self.also_by} != ''" if self.also_by else ""
        return f"inputs.{self.enabled_by} != ''{also}"

    def enabled(self, given: Mapping[str, str]) -> bool:
        """Whether this part runs for these ``with:`` values (the ``if:``, evaluated here)."""
        if self.enabled_by is None:
            return True
        value = str(given.get(self.enabled_by, "")).strip()
        if self.enabled_if == "true":
            return value.lower() == "true"
        return value != "" or bool(self.also_by and str(given.get(self.also_by, "")).strip())


SWITCHES = (
    Input(
        "smoke",
        "Run gpu-smoke after gpu-setup (and after the cache restore).",
        "bool",
        "false",
    ),
)

PARTS = (
    Part("setup", "gpu-setup"),
    Part(
        "cache",
        "cache-weights restore",
        prefix="cache-",
        enabled_by="cache-key",
        also_by="cache-manifest",
    ),
    Part("smoke", "gpu-smoke", prefix="smoke-", enabled_by="smoke", enabled_if="true"),
)


def split_inputs(given: Mapping[str, str], inputs_of: Mapping[str, tuple[Input, ...]]):
    """Root-action ``with:`` values -> ``[(command, {input: value})]`` for the parts that run.

    ``inputs_of`` maps a full command name to its input specs (from the registry).
    """
    plan: list[tuple[str, dict[str, str]]] = []
    for part in PARTS:
        if not part.enabled(given):
            continue
        values = {
            spec.name: given[part.public(spec.name)]
            for spec in inputs_of[part.command]
            if part.public(spec.name) in given
        }
        plan.append((part.command, values))
    return plan
