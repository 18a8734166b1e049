"""What a plan says: one log line per step as it is planned, then the Result (counts, headline)."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuci.errors import ExitCode
from gpuci.redact import clip
from gpuci.runtime import OutputValue, Result, Runtime, format_output, markdown_table

if TYPE_CHECKING:
    from gpuci.dryrun._steps import StepPlan

__all__ = ["MARKS", "MAX_PLAN_LINE", "Transcript", "mark", "plan_lines", "result"]

# Characters of one line of the plan (and of a step's detail and each headline in the report and
# the summary's table): a with: value of 5 Mi characters that a command's plan quoted was
# printed whole, once a step. The plan never holds a secret's value (secrets are opaque), so a
# cut splits none that redaction would then miss.
MAX_PLAN_LINE = 1_000

MARKS = {
    "ok": "ok",
    "may-fail": "MAY FAIL",
    "would-fail": "would fail here",
    "bad-input": "BAD INPUT",
    "not-implemented": "not implemented",
    "run": "run",
    "other-action": "other",
    "not-inspected": "not inspected",
    "not-evaluated": "not evaluated",
}


def mark(plan: StepPlan) -> str:
    """The step's verdict in a few words (what its commands said follows on its own lines)."""
    if plan.verdict == "not-evaluated":  # why is on the lines below when a command said it
        return "not evaluated" if plan.results else f"not evaluated: {plan.detail}"
    planned = MARKS.get(plan.planned, plan.planned)
    if plan.verdict == "conditional":
        return f"conditional ({plan.reason}): {planned}"
    if plan.verdict == "skipped":
        text = plan.reason or plan.detail
        return f"{text}; if it ran: {planned}" if plan.planned else text
    return MARKS.get(plan.verdict, plan.verdict)


def plan_lines(plan: StepPlan) -> list[str]:
    """A step's lines in the plan: its verdict, what its commands' plans said, its warnings."""
    lines = [f"  step {plan.index}: {plan.name} [{mark(plan)}]"]
    warnings = [f"    warning: {warning}" for warning in plan.warnings]
    if plan.verdict in ("run", "other-action", "not-inspected") or (
        plan.verdict == "skipped" and not plan.results
    ):
        return lines + warnings
    if plan.unresolved:
        waits = [f"{n} ({plan.why[n]})" if n in plan.why else n for n in plan.unresolved]
        lines.append(f"    unresolved at plan time (set at run time): {', '.join(waits)}")
    if not plan.results and plan.verdict not in ("not-evaluated", "conditional"):
        lines.append(f"    {plan.detail}")
    for result in plan.results:
        lines.append(f"    {result.command}: {result.headline or 'ok'}")
        for note in result.annotations:
            if note.message != result.headline:
                lines.append(f"      {note.level}: {note.message}")
        for key, value in result.outputs.items():
            text = format_output(value)
            if text not in ("", "0") and "\n" not in text and len(text) < 200:
                lines.append(f"      {key} = {text}")
    return lines + warnings


@dataclass
class Transcript:
    """The plan as a person reads it, job by job: the result of a dry run, so it goes to
    stdout (``dry-run wf.yml > plan.txt`` keeps it); progress and notes go to stderr."""

    entries: list[tuple[bool, str]] = field(default_factory=list)  # (is a heading, text)
    held: list[str] = field(default_factory=list)  # lines for the next heading (:meth:`hold`)

    def heading(self, text: str) -> None:
        self.entries.append((True, clip(text, MAX_PLAN_LINE)))
        self._release()

    def say(self, text: str) -> None:
        self._release()
        self.entries.append((False, clip(text, MAX_PLAN_LINE)))

    def extend(self, lines: list[str]) -> None:
        self._release()
        self.entries += [(False, clip(line, MAX_PLAN_LINE)) for line in lines]

    def hold(self, text: str) -> None:
        """A job's line said before its heading is known (its ``if:`` warned of): printed just
        under the next heading, so a CI log shows it in the job's own group, not the one before;
        before the next line when that comes first (a job with no heading: skipped, a call)."""
        self.held.append(clip(text, MAX_PLAN_LINE))

    def _release(self) -> None:
        self.entries += [(False, line) for line in self.held]
        self.held.clear()

    def lines(self) -> list[tuple[bool, str]]:
        """(is a heading, text) of every line, the held ones too."""
        return self.entries + [(False, line) for line in self.held]

    def text(self, rt: Runtime) -> str:
        """Every line made one printable line (redacted, CR/LF escaped), headings marked."""
        return "\n".join(rt.line(f"== {t}" if head else t) for head, t in self.lines())

    def replay(self, rt: Runtime) -> None:
        """Into the CI log: each job a collapsible group."""
        sections: list[tuple[str, list[str]]] = [("", [])]
        for head, text in self.lines():
            if head:
                sections.append((text, []))
            else:
                sections[-1][1].append(text)
        for title, lines in sections:
            with rt.group(title) if title else nullcontext():  # lines before the first job
                for line in lines:
                    rt.log(line)


def _is_gpuci(plan: StepPlan) -> bool:
    """A gpu-ci step, judged or not (a step skipped by its if: was never planned)."""
    from gpuci.dryrun._workflow import classify_uses

    if plan.children:
        return False  # a composite action: its own steps count
    return bool(plan.judged) or (bool(plan.uses) and classify_uses(plan.uses) is not None)


def _where(plans: list[StepPlan], most: int = 4) -> str:
    """Where the steps are, the first few by name (every one is in the plan above)."""
    shown = ", ".join(f"{p.job} step {p.index}" for p in plans[:most])
    return shown + (f" and {len(plans) - most} more" if len(plans) > most else "")


@dataclass(frozen=True)
class _Tally:
    """The planned steps sorted by what the plan found, once, for the counts and the headline."""

    judged: list[StepPlan]  # gpu-ci steps planned (a composite's own steps, not the composite)
    bad: list[StepPlan]
    failing: list[StepPlan]
    unevaluated: list[StepPlan]
    conditional: list[StepPlan]
    skipped: list[StepPlan]
    risky: list[StepPlan]  # composites too
    evaluated: list[StepPlan]
    uninspected: list[StepPlan]

    @classmethod
    def of(cls, plans: list[StepPlan]) -> _Tally:
        judged = [p for p in plans if p.judged and not p.children]  # a composite: its steps count
        return cls(
            judged=judged,
            bad=[p for p in judged if p.judged == "bad-input"],
            failing=[p for p in judged if p.verdict == "would-fail"],
            unevaluated=[p for p in judged if p.verdict == "not-evaluated"],
            conditional=[p for p in judged if p.verdict == "conditional"],
            skipped=[p for p in plans if p.verdict == "skipped" and _is_gpuci(p)],
            risky=[p for p in plans if p.warnings and p.verdict == "may-fail"],
            evaluated=[
                p
                for p in judged
                if p.verdict in ("ok", "may-fail", "would-fail", "not-implemented")
            ],
            uninspected=[p for p in plans if p.verdict == "not-inspected"],
        )

    @property
    def total(self) -> int:
        """gpu-ci steps, a composite action's counted inside it."""
        return (
            len(self.evaluated) + len(self.unevaluated) + len(self.conditional) + len(self.skipped)
        )

    def outputs(self) -> dict[str, OutputValue]:
        return {
            "steps": self.total,
            "evaluated": len(self.evaluated),
            "bad-input": len(self.bad),
            "would-fail": len(self.failing),
            "may-fail": len(self.risky),
            "not-evaluated": len(self.unevaluated),
            "conditional": len(self.conditional),
            "skipped": len(self.skipped),
        }


def result(
    path: Path,
    plans: list[StepPlan],
    job: str | None,
    rt: Runtime,
    probe: bool,
    notes: list[str],
    transcript: Transcript,
) -> Result:
    """The dry run's one Result: the plan job by job, a report per step, the counts, the
    headline, and a warning for each of ``notes`` (e.g. an event the workflow never runs on).

    On a terminal the plan is the result's text (stdout); in CI it is the job log, grouped by
    job, and the summary is a table. Exit 2 when a gpu-ci step has bad input; a step that would
    fail on this machine is in the headline, not the exit code (this machine is seldom the
    runner).
    """
    tally = _Tally.of(plans)
    out = Result(command="dry-run")
    if rt.platform == "terminal":
        out.summary.append(transcript.text(rt))
    else:
        if rt.platform != "json":
            transcript.replay(rt)
        rows = [
            (p.job, p.index, p.name, p.command, p.verdict, clip(p.detail, MAX_PLAN_LINE))
            for p in tally.judged
        ]
        out.summary.append(
            f"### gpu-ci dry run of `{path}`\n\n"
            + markdown_table(["job", "step", "name", "command", "verdict", "detail"], rows)
        )
    out.report = {
        "workflow": str(path),
        "job": job,
        "probe": probe,
        "notes": notes,
        "steps": [_step_report(p) for p in plans],
        "plan": transcript.text(rt).splitlines(),
    }
    out.outputs = tally.outputs()
    for note in notes:
        rt.log(f"warning: {note}")
        out.warning(note, "gpu-ci dry run")
    for where in _step_warnings(plans):
        out.warning(clip(where, MAX_PLAN_LINE), "gpu-ci dry run")
    if not tally.judged:
        out.headline = f"no gpu-ci steps found in {path}"
        if tally.uninspected:
            out.headline += f" ({len(tally.uninspected)} reusable workflow(s) not inspected)"
        out.warning(out.headline)
    elif tally.bad:
        _report_bad_input(out, tally)
    else:
        out.headline = _valid_headline(tally, probe)
    return out


def _step_warnings(plans: list[StepPlan]) -> list[str]:
    """One annotation per step warning (a may-fail step's, an ``if:`` that is a string), the
    same one of each matrix leg or call of a step said once, naming how many more jobs have
    it: three legs made three annotations of one fact, and GitHub shows only ten a step."""
    jobs: dict[tuple[int | str, str, str], list[str]] = {}
    for p in plans:
        for warning in p.warnings:
            named = jobs.setdefault((p.index, p.name, warning), [])
            if p.job not in named:
                named.append(p.job)
    lines = []
    for (index, name, warning), named in jobs.items():
        more = f" and {len(named) - 1} more" if len(named) > 1 else ""
        lines.append(f"job {named[0]}{more}, step {index} ({name}): {warning}")
    return lines


def _step_report(p: StepPlan) -> dict[str, Any]:
    """One step of the JSON report: what was planned, its verdict, and each command's plan;
    each text in it cut to :data:`MAX_PLAN_LINE` (a name or a value a command's report quotes
    may be megabytes)."""
    return _cut_texts(
        {
            "job": p.job,
            "index": p.index,
            "name": p.name,
            "uses": p.uses,
            "command": p.command,
            "verdict": p.verdict,
            "planned": p.planned,
            "condition": p.condition,
            "detail": p.detail,
            "unresolved": p.unresolved,
            "why": p.why,
            "warnings": p.warnings,
            "notes": p.notes,
            "plans": [
                {
                    "command": r.command,
                    "exit_code": int(r.exit_code),
                    "headline": r.headline,
                    "outputs": {k: format_output(v) for k, v in r.outputs.items()},
                    "report": r.report,
                }
                for r in p.results
            ],
        }
    )


def _cut_texts(value: Any) -> Any:
    """``value`` with each text in it cut to :data:`MAX_PLAN_LINE` characters."""
    if isinstance(value, str):
        return clip(value, MAX_PLAN_LINE)
    if isinstance(value, dict):
        return {k: _cut_texts(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_cut_texts(v) for v in value]
    return value


def _report_bad_input(out: Result, tally: _Tally) -> None:
    out.exit_code = ExitCode.BAD_INPUT
    for p in tally.bad:
        where = f"job {p.job}, step {p.index} ({p.name}): {p.detail}"
        out.error(clip(where, MAX_PLAN_LINE), "gpu-ci dry run: bad input")
    out.headline = (
        f"{len(tally.bad)} of {len(tally.judged)} gpu-ci step(s) have bad input; "
        "fix them before paying for a GPU"
    )


def _valid_headline(tally: _Tally, probe: bool) -> str:
    """A valid plan's headline: the counts, then what would or may fail and what was not seen."""
    counts = [
        f"{len(tally.evaluated)} evaluated",
        *([f"{len(tally.unevaluated)} not evaluated"] if tally.unevaluated else []),
        *([f"{len(tally.conditional)} conditional"] if tally.conditional else []),
        *([f"{len(tally.skipped)} skipped"] if tally.skipped else []),
    ]
    headline = f"plan is valid: {tally.total} gpu-ci step(s) checked ({', '.join(counts)})"
    if tally.failing:
        headline += (
            f"; {len(tally.failing)} would fail on this machine ({_where(tally.failing)}; "
            "expected where this machine is not the runner)"
        )
    after = [p for p in tally.skipped if p.planned == "would-fail"]
    if after:
        headline += f"; skipped after that, and would fail here too: {_where(after)}"
    if tally.risky:
        headline += f"; {len(tally.risky)} may fail at run time (see the warnings)"
    if tally.unevaluated:
        headline += f"; not evaluated (see each step's why): {_where(tally.unevaluated)}"
    if tally.conditional:
        headline += f"; conditional (if: known at run time): {_where(tally.conditional)}"
    if tally.uninspected:
        headline += f"; {len(tally.uninspected)} reusable workflow(s) not inspected"
    if not probe:
        headline += "; no network used (--probe to ask servers)"
    return headline
