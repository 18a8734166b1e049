"""What one plan's expressions may scan, all of them together.

GitHub bounds each expression (an expression of 21,000 characters, a result within 10 MiB:
:data:`gpuci.dryrun._expressions.MAX_TEXT`), never how many a workflow evaluates: 20,000 ``env:``
keys each ``contains(env.BIG, 'needle')`` over a 5 Mi-character ``BIG`` scan 10^11 characters,
minutes here. So a plan counts what its expressions read; past :data:`MAX_EVALUATED` each one is
left to the run (an Unknown naming why) and the plan says so in one line.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from gpuci.dryrun._values import ExpressionError

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
