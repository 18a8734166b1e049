"""How far one plan may walk: a count of what it plans, and no workflow or action inside itself.

A pull request writes the workflow, and the plan expands what it calls: a 284-byte workflow whose
six jobs each call itself, or an action whose eight steps each use itself, would be planned
millions of times (:data:`MAX_DEPTH` bounds the nesting, not the breadth). GitHub never runs
either: a reusable workflow nests at most ten levels (four on GitHub Enterprise Server) and a
workflow file calls at most 50 unique reusable workflows (20 on GHES); the runner fails a job whose
downloaded composite actions nest past :data:`MAX_ACTION_DEPTH`, and a local composite action that
uses itself, prepared afresh each time its step runs, never ends. So a workflow or action already
being planned (a cycle), or a tenth called workflow (inside ten others), is bad input, and one
count of the jobs, matrix legs and steps planned ends the plan with one line past
:data:`MAX_PLANNED`. Each call of a local workflow or action counts its size too (planning it
walks all of it again: its ``env``, its inputs), and each file is read and parsed once per plan:
a 1 MiB workflow called by a thousand jobs took seconds a call.

What one plan's expressions may scan, all of them together, is bounded too (:class:`Budget`).
GitHub bounds each expression (21,000 characters, a result within 10 MiB:
:data:`gpuci.dryrun._expressions.MAX_TEXT`), never how many a workflow evaluates: 20,000 ``env:``
keys each ``contains(env.BIG, 'needle')`` over a 5 Mi-character ``BIG`` scan 10^11 characters,
minutes here. So a plan counts what its expressions read; past :data:`MAX_EVALUATED` each one is
left to the run (an Unknown naming why) and the plan says so in one line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuci.dryrun._values import ExpressionError
from gpuci.errors import InputError

__all__ = [
    "KEY_COST",
    "MAX_ACTION_DEPTH",
    "MAX_DEPTH",
    "MAX_JOBS",
    "MAX_PLANNED",
    "Budget",
    "PlanBounds",
    "cycle_detail",
    "spend",
    "too_deep",
]

# Jobs, matrix legs, steps and KiB of called workflows and actions one dry run plans. GitHub sets
# no such count; a 256-leg matrix (GitHub's most) of 18-step jobs fits, and judging 5,000 gpu-ci
# steps takes about 10 s here.
MAX_PLANNED = 5_000
# Jobs in one workflow file. GitHub documents no count of jobs (only 256 legs per matrix and a
# 500 KB file): 1,000 is past any real workflow and keeps the needs order and the plan bounded.
MAX_JOBS = 1_000
# Composite actions planned inside one another: the runner's ``CompositeActionsMaxDepth``
# (actions/runner ActionManager: a job's steps are depth 0, each composite action's steps one
# deeper, and past 9 "Composite action depth exceeded max depth 9" fails the job at "Set up
# job"). That walk covers the actions it downloads; a local one it prepares only when its step
# runs, depth 1 again, so a chain of local ones has no limit: past this the plan leaves the
# action to the run (:func:`too_deep`), never bad input.
MAX_ACTION_DEPTH = 9
# Reusable workflows called inside one another: GitHub connects "a maximum of ten levels of
# workflows", the top-level caller and up to nine called ones (four and three on GitHub Enterprise
# Server), and refuses to start a run past that ("... would exceed the limit on called workflow
# depth of 9"). So the plan plans nine, and a tenth call is bad input (:func:`workflow_too_deep`).
MAX_DEPTH = 9

Loaded = tuple[Path, dict[str, Any]]  # (the file or the action's folder, what it holds)
Loader = Callable[[Path, str], Loaded | None]  # load_local_workflow, load_local_action

_NESTING = (
    f"GitHub nests reusable workflows at most {MAX_DEPTH + 1} levels (4 on GitHub Enterprise "
    "Server), a workflow calls at most 50 unique ones (20 on GHES) and the composite actions a job "
    f"downloads nest at most {MAX_ACTION_DEPTH} levels"
)


@dataclass
class PlanBounds:
    """What the plan has walked so far: the count, and the files it is inside now."""

    planned: int = 0
    stack: list[tuple[Path, str]] = field(default_factory=list)  # (resolved file, as named)
    files: dict[tuple[str, str], tuple[Loaded | None, int]] = field(default_factory=dict)

    def read(self, load: Loader, workspace: Path, named: str, where: str) -> Loaded | None:
        """The local workflow or action ``named`` (``load`` reads it), read once per plan; each
        call counts its size in KiB, as planning it again walks all of it (``where``: the job)."""
        key = (load.__name__, named)
        if key not in self.files:
            found = load(workspace, named)
            self.files[key] = (found, _kib(found[0]) if found else 0)
        found, kib = self.files[key]
        if found is not None:
            self.count(kib, where)
        return found

    def count(self, number: int, where: str) -> None:
        """Count ``number`` more jobs, legs or steps (``where``: the job, named in the error).

        Raises InputError past :data:`MAX_PLANNED`: the plan ends there, in one line.
        """
        self.planned += number
        if self.planned > MAX_PLANNED:
            raise InputError(
                f"dry-run stopped at {where} in {self.file()}: over {MAX_PLANNED:,} jobs, "
                "matrix legs, steps and KiB of local reusable workflows and composite actions "
                "planned",
                hint=f"{_NESTING}; call them fewer times, or plan one job with --job",
            )

    def check_jobs(self, number: int) -> None:
        """Raises InputError for a workflow of more than :data:`MAX_JOBS` jobs."""
        if number > MAX_JOBS:
            raise InputError(
                f"{self.file()} has {number:,} jobs: dry-run plans at most {MAX_JOBS:,}",
                hint="GitHub documents no count of jobs but reads a workflow file of at most "
                "500 KB and runs at most 256 legs per matrix; split the workflow",
            )

    def cycle(self, path: Path, named: str) -> str | None:
        """``./a -> ./b -> ./a`` when ``path`` is already being planned, else None."""
        resolved = path.resolve()
        files = [file for file, _ in self.stack]
        if resolved not in files:
            return None
        chain = [shown for _, shown in self.stack[files.index(resolved) :]]
        return " -> ".join([*chain, named])

    def refusal(
        self, path: Path | None, named: str, job: str, depth: int
    ) -> tuple[str, str] | None:
        """Why GitHub does not start a run whose ``job`` calls the workflow ``named`` (``path``:
        the local file, if found) from one ``depth`` calls deep: a cycle, or a call past
        :data:`MAX_DEPTH` (remote or missing ones too), as (a few words, the bad-input line)."""
        chain = self.cycle(path, named) if path is not None else None
        if chain is not None:
            return f"a cycle ({chain})", cycle_detail("workflow", named, chain)
        if depth >= MAX_DEPTH:
            inside = [shown for _, shown in self.stack]
            detail = workflow_too_deep(job.rpartition("/")[2], named, inside)
            return detail, detail
        return None

    @contextmanager
    def inside(self, path: Path, named: str) -> Iterator[None]:
        """While the plan is inside the workflow or action at ``path`` (``named`` as written)."""
        self.stack.append((path.resolve(), named))
        try:
            yield
        finally:
            self.stack.pop()

    def file(self) -> str:
        """The file being planned: the innermost called one, else the workflow."""
        return self.stack[-1][1] if self.stack else "the workflow"


def cycle_detail(kind: str, named: str, chain: str) -> str:
    """The bad-input line for a workflow (``kind``) or action inside itself: GitHub never runs
    one, as the nesting never ends."""
    if kind == "workflow":
        return (
            f"reusable workflow {named} calls itself ({chain}): GitHub refuses the run "
            "(reusable workflows nest at most 10 levels, 4 on GitHub Enterprise Server); "
            "break the cycle"
        )
    return (
        f"composite action {named} uses itself ({chain}): the runner prepares a local action "
        "each time its step runs, so the nesting never ends (its limit of "
        f"{MAX_ACTION_DEPTH} levels covers only the actions it downloads); break the cycle"
    )


def too_deep(uses: str) -> str:
    """Why a local composite action nested past :data:`MAX_ACTION_DEPTH` is not planned: the
    runner runs it, so the plan names its own bound, not a failure."""
    return (
        f"{uses} is the {MAX_ACTION_DEPTH + 1}th composite action nested here: not planned "
        f"(not judged; the runner runs it: its limit of {MAX_ACTION_DEPTH} levels covers only "
        "the actions it downloads, not local ones)"
    )


def workflow_too_deep(job: str, uses: str, chain: list[str]) -> str:
    """The bad-input line for a call nested past :data:`MAX_DEPTH` (``chain``: the workflows it is
    inside, the top-level one first), in the words GitHub refuses the run with."""
    return (
        f'GitHub refuses the run: job "{job}" calls workflow "{uses}", but doing so would exceed '
        f"the limit on called workflow depth of {MAX_DEPTH} ({' -> '.join([*chain, uses])}: "
        f"{MAX_DEPTH + 1} levels of workflows at most, the caller's included; 4 on GitHub "
        "Enterprise Server); call fewer workflows inside one another"
    )


def _kib(path: Path) -> int:
    """The size of a workflow file, or of the action.yml in an action's folder, in KiB."""
    files = [path / "action.yml", path / "action.yaml"] if path.is_dir() else [path]
    size = next((f.stat().st_size for f in files if f.is_file()), 0)
    return size // 1024


# ----- what expressions scan --------------------------------------------------------------------
# What one plan's expressions together may scan: characters read (a string compared, searched,
# formatted, rendered, each expression's own text) and KEY_COST for each key of a mapping a
# property is looked up in (a key compared costs about what 64 characters searched do). About a
# second of work here; the plans of tests/dryrun/fixtures and examples/workflows spend at most
# 30,000 of it.
MAX_EVALUATED = 1 << 28
KEY_COST = 64


class Budget:
    """What one plan's expressions may still scan (:data:`MAX_EVALUATED`); ``spent`` once it
    ran out. A plan makes it :meth:`active` while it evaluates; with none active (the tests'
    action harness) nothing is counted."""

    def __init__(self) -> None:
        self.limit = MAX_EVALUATED
        self.left = self.limit
        self.spent = False

    @contextmanager
    def active(self) -> Iterator[Budget]:
        token = _BUDGET.set(self)
        try:
            yield self
        finally:
            _BUDGET.reset(token)

    def spend(self, amount: int) -> None:
        """Count ``amount``; raises ExpressionError (left to the run) once the budget is gone."""
        self.left -= amount
        if self.left < 0:
            self.spent = True
            raise ExpressionError(f"this plan's expressions scanned over {self.limit:,} characters")

    def line(self) -> str:
        """The plan's one line once the budget ran out."""
        return (
            f"note: this plan's expressions scanned over {self.limit:,} characters; each one "
            "after that is left to the run (known at run time). A workflow that reads a long "
            "value many times (contains(env.BIG, ...) in thousands of env keys) spends it"
        )


_BUDGET: ContextVar[Budget | None] = ContextVar("gpuci_dryrun_budget", default=None)


def spend(amount: int) -> None:
    """Count ``amount`` against the active plan's :class:`Budget`, if one is active."""
    budget = _BUDGET.get()
    if budget is not None:
        budget.spend(amount)
