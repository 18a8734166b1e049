"""The training report on the pull request: one sticky comment, updated in place on every push.

The comment is found again by a hidden HTML marker, so a rerun or a new commit edits the same
comment instead of adding another. It shows the gate table, the deltas against the baseline, the
provenance digest and the GPU minutes the job used. Without a token or outside a pull request the
report says so and skips: a missing comment must never fail a training job.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuci import charts, journal, settings, untrusted_json
from gpuci.markdown import Code, is_plain_url
from gpuci.markdown import code as md_code
from gpuci.markdown import cut as md_cut
from gpuci.markdown import text as md_text
from gpuci.runtime import Result, Runtime, markdown_table
from gpuci.training import _ci as ci
from gpuci.training._charts import metric_charts
from gpuci.training._metrics import as_number
from gpuci.training._rules import fmt, gate_passed, row_dicts, table_markdown
from gpuci.training.options import DEFAULT_MARKER, CommentInputs, ReportInputs

__all__ = [
    "MAX_BODY",
    "MAX_DELTA_ROWS",
    "MAX_NAME",
    "charts_markdown",
    "collect",
    "error_body",
    "fit",
    "gate_markdown",
    "gate_passed",
    "gpu_minutes",
    "marker_comment",
    "minutes_text",
    "provenance_fact",
    "publish",
    "render",
    "row_dicts",
    "run",
    "seconds_since",
    "verdict_markdown",
]

MAX_BODY = 60_000  # GitHub refuses comments over 65,536 characters (GitLab: 1,000,000)
MAX_DELTA_ROWS = 50
MAX_JOB_S = 31 * 24 * 3600  # longer than any CI job runs (GitHub: 5 days self-hosted)
MAX_SKEW_S = 300  # a gpu-setup time this far ahead of now is a clock's skew, not a lie
MAX_NAME = 200  # a metric's name in a table cell: a PR names its metrics
MAX_WHY = 300  # the error line of a report that says the gate errored


def marker_comment(marker: str) -> str:
    return f"<!-- gpuci-report:{marker} -->"


def _load_json(path: str, what: str) -> dict[str, Any]:
    return untrusted_json.object_input(Path(path), what, "pass the file gpu-ci wrote")


def collect(
    environ: Any, gate_report: str | None, provenance: str | None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The gate verdict and the provenance record: from the given files, else this job's journal."""
    gate = (
        _load_json(gate_report, "gate report") if gate_report else journal.latest("gate", environ)
    )
    if provenance:
        prov = _load_json(provenance, "provenance record")
    else:
        entry = journal.latest("provenance", environ) or {}
        prov = None
        named = entry.get("record")  # the journal is the job's: the PR's code may write it
        if isinstance(named, str) and named and os.path.isfile(named):  # never OSError
            prov = _load_json(named, "provenance record")
    return gate, prov


def _numeric_deltas(deltas: Any) -> list[tuple[str, float, float]]:
    """``(name, value, baseline)`` rows of a gate report, those that are numbers (an edited
    report is input: a row of any other shape is left out, not a traceback)."""
    rows = deltas if isinstance(deltas, list) else []
    return [
        (str(d[0]), d[1], d[2])
        for d in rows
        if isinstance(d, list | tuple)
        and len(d) == 3
        and all(as_number(v)[0] is not None for v in d[1:])  # a 400-digit int: no float
    ]


def gpu_minutes(
    environ: Any, override: float | None, now: float | None = None
) -> tuple[float | None, str]:
    """GPU-minutes: the given figure, else GPUs x time since this job's gpu-setup step."""
    if override is not None:
        return override, "as given"
    setups = journal.read("gpu-setup", environ)
    if not setups:
        return None, "no gpu-setup step in this job"
    first = setups[0]
    # The GPUs the job may use (visible devices), else all found; a record without either
    # still ran on one GPU, as far as we can tell.
    listed = first.get("visible_devices") or first.get("gpus")
    gpus = len(listed) if isinstance(listed, list) and listed else 1
    elapsed = seconds_since(first.get("time"), now or time.time())
    if elapsed is None:
        return None, "the gpu-setup record's time is missing or not within a job's length"
    per_gpu = round(elapsed / 60, 2)  # the figure shown, so the product shown is exactly it
    return gpus * per_gpu, f"{gpus} GPU(s) x {minutes_text(per_gpu)} min since gpu-setup"


def seconds_since(started: Any, now: float) -> float | None:
    """Seconds from a gpu-setup record's ``time`` to ``now``; None when it is no number, or
    lies in the future or further back than a job runs (the journal is the job's, so input).
    A start a little ahead of ``now`` is clock skew: 0."""
    start = charts.finite(started)
    if start is None or not -MAX_SKEW_S <= now - start <= MAX_JOB_S:
        return None
    return max(0.0, now - start)


def minutes_text(value: float) -> str:
    """Minutes to 2 decimals, trailing zeros dropped: ``0.08``, ``1.2``, ``12``; a product of
    such a figure and a GPU count is shown exactly, never rounded apart from its factors."""
    return f"{value:.2f}".rstrip("0").rstrip(".") or "0"


def charts_markdown(
    gate: dict[str, Any], past: list[dict[str, Any]] | None, result: Result | None = None
) -> str:
    """One Mermaid chart per gated metric (failing ones first), each with its legend and
    followed by a blank line. Their data goes to ``--json`` too."""
    rows = gate.get("rows")
    found = metric_charts(rows if isinstance(rows, list) else [], past)
    if result is None:
        return "".join(charts.fenced(chart) + "\n\n" for chart in found)
    result.report["charts"] = [chart.as_dict() for chart in found]

    def left_out(line: str) -> None:  # once, though the report renders its charts twice
        if all(note.message != line for note in result.annotations):
            result.warning(line, "gpu-ci report")

    return "".join(charts.fenced(chart, left_out) + "\n\n" for chart in found)


def verdict_markdown(gate: dict[str, Any]) -> str:
    """The heading and, when it failed, why: each failed rule with its metric's value and the
    verdict, before anything else (a reader sees the answer before the charts)."""
    if gate_passed(gate):
        return "### ✅ Model gate passed"
    lines = ["### ❌ Model gate failed", ""]
    rows = row_dicts(gate)
    failed = [r for r in rows if r.get("passed") is not True]
    if not failed:  # an edited report: the rule names are all there is
        listed = gate.get("failed_rules")
        names = [charts.cut(r) for r in listed] if isinstance(listed, list) else []
        named = ", ".join(md_code(r, in_table=False) for r in names)
        return "\n".join(lines) + "**Failed:** " + (named or "no rule is named in the report")
    lines.append(f"**Failed:** {len(failed)} of {len(rows)} rule(s)")
    for r in failed:
        why = str(r.get("verdict") or "FAIL").removeprefix("FAIL: ")
        lines.append(
            f"- {md_code(charts.cut(r.get('rule', '')), in_table=False)}: "
            f"{md_code(charts.cut(r.get('metric', '')), in_table=False)} is {fmt(r.get('value'))}, "
            + md_text(charts.cut(why, 120))
        )
    return "\n".join(lines)


def gate_markdown(
    gate: dict[str, Any],
    past: list[dict[str, Any]] | None,
    result: Result | None = None,
    *,
    details: bool = True,
) -> str:
    """The gate as the job summary and the PR comment show it: the verdict and why, the charts
    with their legends, the table; with ``details``, every metric against the baseline."""
    parts = [verdict_markdown(gate)]
    drawn = charts_markdown(gate, past, result).rstrip("\n")
    if drawn:
        parts.append(drawn)
    rows = row_dicts(gate)
    parts.append(table_markdown(rows))
    has_regression = any(r.get("kind") == "max-regression" for r in rows)
    if has_regression and not gate.get("baseline_found"):
        parts.append("_No baseline metrics: regression rules were skipped._")
    found = gate.get("deltas")
    deltas = found if isinstance(found, list) else []
    if details and deltas:
        cells = [
            (Code(charts.cut(name, MAX_NAME)), fmt(value), fmt(base), fmt(value - base, True))
            for name, value, base in _numeric_deltas(deltas)[:MAX_DELTA_ROWS]
        ]
        more = f" (first {MAX_DELTA_ROWS})" if len(deltas) > MAX_DELTA_ROWS else ""
        parts.append(
            f"<details><summary>All metrics vs baseline: {len(deltas)}{more}</summary>\n\n"
            + markdown_table(["metric", "value", "baseline", "delta"], cells)
            + "\n\n</details>"
        )
    return "\n\n".join(parts)


def render(
    marker: str,
    gate: dict[str, Any] | None,
    prov: dict[str, Any] | None,
    minutes: tuple[float | None, str],
    ctx: ci.RunContext,
    past: list[dict[str, Any]] | None = None,
) -> str:
    """The comment body (markdown), marker first so it is found again."""
    parts = [marker_comment(marker)]
    if gate is None:
        parts.append("### gpu-ci training report\n\nNo gate ran in this job.")
    else:
        parts.append(gate_markdown(gate, past))
    parts.append("\n".join(f"- {f}" for f in _facts(prov, minutes, ctx)))
    parts.append("<sub>Updated in place by gpu-ci on every run.</sub>")
    return fit(marker_comment(marker), "\n\n".join(parts[1:]))


def error_body(marker: str, why: str, ctx: ci.RunContext) -> str:
    """The comment body when the gate ended in an error before its verdict: what happened in
    one line (the error's, made inert), so an older report never stands for this run."""
    parts = [
        "### \u26a0\ufe0f Model gate errored",
        "The gate stopped before its verdict: " + md_text(charts.cut(why, MAX_WHY)),
    ]
    where = _run_fact(ctx)
    if where:
        parts.append(f"- {where}")
    parts.append("<sub>Updated in place by gpu-ci on every run.</sub>")
    return fit(marker_comment(marker), "\n\n".join(parts))


def fit(marker: str, rest: str, limit: int = MAX_BODY) -> str:
    """``marker`` and ``rest``, within ``limit`` characters: when too long, ``rest`` is cut
    by :func:`gpuci.markdown.cut` (whole lines, open blocks closed, then the truncation note)."""
    return f"{marker}\n\n" + md_cut(rest, limit - len(marker) - 2)


def _facts(
    prov: dict[str, Any] | None, minutes: tuple[float | None, str], ctx: ci.RunContext
) -> list[str]:
    """The provenance digest and data, the GPU time, and where the run is."""
    facts: list[str] = []
    if prov is not None:
        facts.append(provenance_fact(prov))
    value, how = minutes
    facts.append(
        f"**GPU time:** {minutes_text(value)} GPU-minutes ({how})"
        if value is not None
        else f"**GPU time:** not measured ({how})"
    )
    where = _run_fact(ctx)
    if where:
        facts.append(where)
    return facts


def _run_fact(ctx: ci.RunContext) -> str:
    """``**Run:**`` and links to the run and the commit; empty when neither is known."""
    where = []
    if ctx.run_url:
        where.append(f"[run]({ctx.run_url})")
    if ctx.commit:
        where.append(f"commit `{ctx.commit[:12]}`")
    return "**Run:** " + ", ".join(where) if where else ""


def provenance_fact(prov: dict[str, Any]) -> str:
    """The provenance line: its digest, how many artifacts, the first datasets' keys; a
    record is a file (edited, or the PR's), so each field is type-checked and shown inert."""
    digest = md_code(charts.cut(prov.get("statement_digest", "?"), MAX_NAME), in_table=False)
    arts = prov.get("artifacts")
    count = str(len(arts)) if isinstance(arts, list) else "?"
    sets = prov.get("datasets")
    keys = [
        str(d.get("matched_key") or d.get("key") or "")
        for d in (sets if isinstance(sets, list) else [])
        if isinstance(d, dict)
    ]
    names = ", ".join(md_code(charts.cut(k, MAX_NAME), in_table=False) for k in keys[:5] if k)
    return f"**Provenance:** {digest or '?'}; {count} artifact(s)" + (
        f"; data: {names}" if names else ""
    )


def publish(to: CommentInputs, rt: Runtime, body: str, result: Result) -> None:
    """Post or update the sticky comment, or say why not; sets ``comment`` outputs.

    Raises GpuciError subclasses when the forge fails (callers keep them from the verdict).
    """
    from gpuci.forges._github import GitHub

    ctx = ci.detect(rt.environ)
    result.outputs.update({"comment": "skipped", "comment-url": ""})
    if ctx.platform == "gitlab" and not to.repository:
        _publish_gitlab(to, rt, body, result, ctx)
        return
    token = to.token or settings.GITHUB_TOKEN.value(rt.environ)
    rt.mask(token)
    repository = to.repository or ctx.repository
    number = to.pr or ctx.pull_request
    api_url = to.api_url or settings.GITHUB_API_URL.value(rt.environ)
    reason = ""
    if not token:
        reason = "no token (set the token input or GITHUB_TOKEN)"
    elif not number:
        reason = "not a pull request"
    elif not repository or "/" not in repository:
        reason = "no repository (set the repository input or GITHUB_REPOSITORY)"
    marker = marker_comment(to.marker or "training")
    _post_sticky(
        result,
        rt,
        _Sticky("PR comment", "comment", f"{repository}#{number}", api_url, number, reason),
        lambda: GitHub(api_url, token, repository),
        marker,
        body,
        lambda comment: comment.get("html_url", ""),
    )


def _publish_gitlab(
    to: CommentInputs, rt: Runtime, body: str, result: Result, ctx: ci.RunContext
) -> None:
    """The same report as one sticky note on the merge request (GitLab, self-managed too)."""
    from gpuci.forges._gitlab import GitLab

    env = rt.environ
    token = to.token or settings.GITLAB_TOKEN.value(env)
    rt.mask(token)
    rt.mask(settings.CI_JOB_TOKEN.value(env))
    project = settings.CI_PROJECT_ID.value(env) or ctx.repository
    iid = to.pr or ctx.pull_request
    server = settings.CI_SERVER_URL.value(env).rstrip("/")
    api_url = to.api_url or settings.CI_API_V4_URL.value(env) or (server and f"{server}/api/v4")
    reason = ""
    if not token and settings.CI_JOB_TOKEN.value(env):
        reason = (
            "CI_JOB_TOKEN cannot write merge request notes; set GPUCI_GITLAB_TOKEN to a project "
            "access token with the api scope (a masked CI/CD variable)"
        )
    elif not token:
        reason = "no token (set GPUCI_GITLAB_TOKEN to a project access token with the api scope)"
    elif not iid:
        reason = "not a merge request pipeline"
    elif not project or not api_url:
        reason = "no project or API URL (CI_PROJECT_ID, CI_API_V4_URL)"
    project_url = settings.CI_PROJECT_URL.value(env).rstrip("/")
    _post_sticky(
        result,
        rt,
        _Sticky("MR note", "note", f"{ctx.repository or project}!{iid}", api_url, iid, reason),
        lambda: GitLab(api_url, token, project),
        marker_comment(to.marker or "training"),
        body,
        lambda note: (
            f"{project_url}/-/merge_requests/{iid}#note_{note.get('id')}" if project_url else ""
        ),
    )


@dataclass(frozen=True)
class _Sticky:
    """Where one sticky report goes, as the messages name it."""

    label: str  # "PR comment" / "MR note"
    noun: str  # "comment" / "note"
    target: str  # "org/repo#7" / "group/project!7"
    api_url: str
    number: Any
    skip_reason: str


def _post_sticky(
    result: Result,
    rt: Runtime,
    sticky: _Sticky,
    make_client: Callable[[], Any],
    marker: str,
    body: str,
    url_of: Callable[[dict[str, Any]], str],
) -> None:
    """Skip (saying why), plan, or create-or-update the one report on a PR or MR: the same
    steps on GitHub and GitLab once each platform has found its token, target and API."""
    from gpuci.forges._rest import Forbidden

    if sticky.skip_reason:
        result.notice(f"{sticky.label} skipped: {sticky.skip_reason}", "gpu-ci report")
        result.report["comment"] = {"action": "skipped", "reason": sticky.skip_reason}
        return
    if rt.dry_run:
        result.notice(
            f"dry run: would post or update the sticky {sticky.noun} on {sticky.target} "
            f"via {sticky.api_url}",
            "gpu-ci report",
        )
        result.report["comment"] = {"action": "would-post", "pr": sticky.number}
        return
    client = make_client()
    try:
        with client:
            action, posted = client.upsert(int(sticky.number), marker, body)
    except Forbidden as exc:
        result.warning(f"{sticky.label} skipped: {exc.one_line()}", "gpu-ci report")
        result.report["comment"] = {"action": "skipped", "reason": exc.message}
        return
    finally:  # what the client refused to do (a foreign next page, an unknown identity)
        for text in client.warnings:
            result.warning(text, "gpu-ci report")
    url = url_of(posted)  # the forge's answer: a later step may put it in a message or a shell
    result.outputs.update({"comment": action, "comment-url": url if _inert_url(url) else ""})
    result.report["comment"] = {"action": action, "id": posted.get("id"), "pr": sticky.number}
    rt.log(f"{action} the report {sticky.noun} on {sticky.target}")


def run(inp: ReportInputs, rt: Runtime) -> Result:
    """``python -m gpuci report``: the job summary always, the PR comment with ``--comment``.

    Raises InputError for an unreadable gate report or provenance record.
    """
    result = Result(command="report")
    gate, prov = collect(rt.environ, inp.gate_report, inp.provenance)
    minutes = gpu_minutes(rt.environ, inp.gpu_minutes)
    from gpuci.training import _history as history

    past = history.read_past(
        rt, result, url=inp.history, series=inp.marker, points=inp.history_points
    )
    body = render(inp.marker or DEFAULT_MARKER, gate, prov, minutes, ci.detect(rt.environ), past)
    result.summary.append(body.split("\n\n", 1)[1])  # the summary without the hidden marker
    result.outputs["gpu-minutes"] = round(minutes[0], 2) if minutes[0] is not None else ""
    if inp.comment:
        publish(inp, rt, body, result)
    else:
        result.outputs.update({"comment": "skipped", "comment-url": ""})
    verdict = (
        "no gate ran in this job"
        if gate is None
        else "gate passed"
        if gate_passed(gate)
        else "gate failed"
    )
    result.headline = f"{verdict}; comment {result.outputs['comment']}"
    if rt.dry_run:
        result.headline = "dry run: " + result.headline
    result.report["body"] = body
    if gate is not None:
        charts_markdown(gate, past, result)
    return result


# What a comment's link needs (https://host/o/r/pull/7#issuecomment-5, or a merge request's
# .../-/merge_requests/3#note_9), none of it a shell's, cmd's or PowerShell's: a step that pastes
# ${{ ...comment-url }} into a run: line runs no $(...), `;`, `&`, `'`, `%VAR%` or glob the
# forge put in it.
_INERT_URL_CHARS = re.compile(r"[A-Za-z0-9._~:/#@+=-]+\Z")


def _inert_url(url: object) -> bool:
    """Whether the forge's link is one plain http(s) URL of shell-inert characters only."""
    return is_plain_url(url) and _INERT_URL_CHARS.match(str(url)) is not None
