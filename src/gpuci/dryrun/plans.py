"""One planned step (what the planner decides, what the report prints), apart from both."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuci.runtime import Result

JUDGED = ("ok", "may-fail", "would-fail", "bad-input", "not-implemented", "not-evaluated")


@dataclass
class StepPlan:
    job: str
    index: int | str
    name: str
    uses: str = ""
    command: str = ""
    # ok | may-fail | would-fail | bad-input | not-implemented | not-evaluated (judged)
    # skipped | conditional (judged when ``planned`` is) | run | other-action | not-inspected
    verdict: str = ""
    detail: str = ""
    condition: str = ""  # the step's if:, as written
    planned: str = ""  # for a skipped or conditional step that was judged: its verdict if run
    reason: str = ""  # for a skipped or conditional step: why, in a few words
    unresolved: list[str] = field(default_factory=list)
    why: dict[str, str] = field(default_factory=dict)  # unresolved name -> what it waits for
    present: set[str] = field(default_factory=set)  # unresolved, but a secret known to exist
    results: list[Result] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. a path that may be missing
    notes: list[str] = field(default_factory=list)  # e.g. runs in a container
    children: list[StepPlan] = field(default_factory=list)  # a local composite's steps

    @property
    def judged(self) -> str:
        """The verdict of the step's own plan ('' when it has none)."""
        if self.verdict in JUDGED:
            return self.verdict
        return self.planned if self.planned in JUDGED else ""
