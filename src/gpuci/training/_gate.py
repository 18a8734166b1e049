"""``python -m gpuci gate``: fail the job when a model's metrics miss their thresholds.

Tests gate a merge; this gates a model. The gate reads the metrics the run wrote, judges every
rule (a missing metric, NaN or a non-number fails, never passes), writes ``gate.json`` and a
journal record for the later steps, and, because the metric-gate action is one step, also writes
the provenance (when ``artifacts`` is given) and posts the pull-request report (``comment``) —
before failing, so a failed gate is recorded and shown too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpuci import journal
from gpuci.cache import _layout as layout
from gpuci.errors import CheckFailed, ExitCode, GpuciError, InputError
from gpuci.files import json_bytes, write_file
from gpuci.runtime import OutputValue, Result, Runtime
from gpuci.training import _history as history
from gpuci.training import _metrics as metrics_mod
from gpuci.training import _provenance as provenance
from gpuci.training import _report as report
from gpuci.training._rules import Row, Rule, Verdict, judge, numeric_deltas, parse_rules
from gpuci.training.options import DEFAULT_MARKER, GateInputs

__all__ = ["GATE_NAME", "evaluate", "parse_all", "run"]

GATE_NAME = "gate.json"


def parse_all(inp: GateInputs) -> list[Rule]:
    """Every rule the gate judges; InputError for a malformed rule or none at all."""
    rules = [rule for kind, lines in inp.rule_lines().items() for rule in parse_rules(kind, lines)]
    if not rules:
        raise InputError(
            "the gate has no rules",
            hint="set min, max or max-regression, e.g. --min eval.accuracy=0.92",
        )
    return rules


def _missing_file_verdict(rules: list[Rule], message: str) -> Verdict:
    """Every rule failed by ``message``: there are no metrics to judge."""
    fail = f"FAIL: {message}"
    return Verdict(
        [Row(rule=r, rule_text=r.describe(), metric=r.metric, verdict=fail) for r in rules]
    )


def evaluate(inp: GateInputs, rules: list[Rule]) -> tuple[dict[str, Any], list[str]]:
    """Judge the metrics file: bad data fails rows (never raises); bad input raises InputError."""
    warnings: list[str] = []
    metrics_path = Path(inp.metrics)
    baseline_path = inp.baseline
    baseline = None
    if baseline_path:
        try:
            baseline = metrics_mod.load(baseline_path, what="baseline", missing_ok=True)
        except CheckFailed as exc:
            raise InputError(exc.message, hint="fix or remove the baseline file") from None
        if baseline is None:
            warnings.append(
                f"baseline {baseline_path} not found: max-regression rules skipped"
                + (" (and failed: require-baseline is true)" if inp.require_baseline else "")
            )
    error, sha256 = "", ""
    try:
        metrics, sha256 = metrics_mod.load_hashed(metrics_path)
    except CheckFailed as exc:
        metrics, error = None, exc.one_line()
    if metrics is None:
        verdict = _missing_file_verdict(rules, "metrics file unusable")
    else:
        verdict = judge(
            metrics,
            rules,
            baseline,
            lower_better_names=inp.lower_is_better,
            require_baseline=inp.require_baseline,
        )
    record = {
        "passed": verdict.passed,
        "failed_rules": [row.rule_text for row in verdict.failed],
        "rows": [row.as_dict() for row in verdict.rows],
        "rules": inp.rule_lines(),
        "metrics_path": metrics_path.as_posix(),
        "metrics_sha256": sha256,  # of the bytes judged: a file swapped since is not hashed
        "metrics_error": error,
        "baseline_path": baseline_path or "",
        "baseline_found": baseline is not None,
        "deltas": numeric_deltas(metrics or {}, baseline),
    }
    return record, warnings


def _dry_run(inp: GateInputs, rules: list[Rule], rt: Runtime, result: Result) -> Result:
    """Plan only: judge the metrics if they already exist, say what would be written and posted."""
    lines = [f"would check {len(rules)} rule(s): " + "; ".join(r.describe() for r in rules)]
    head = [f"would check {len(rules)} rule(s)"]
    result.outputs = {}  # nothing was judged for real: no verdict to hand to later steps
    if os.path.isfile(inp.metrics):  # False, not OSError, for a name too long
        record, _ = evaluate(inp, rules)
        would = "pass" if record["passed"] else "FAIL"
        lines.append(f"metrics {inp.metrics} is here: the gate would {would}")
        head.append(f"the metrics here would {would}")
        result.outputs = {
            "passed": record["passed"],
            "failed-rules": ", ".join(record["failed_rules"]),
        }
        result.summary.append(
            "_Dry run: the metrics already here, judged:_\n\n"
            + report.gate_markdown(record, None, details=False)
        )
        if not record["passed"]:
            result.exit_code = ExitCode.CHECK_FAILED
    else:
        lines.append(f"metrics {inp.metrics} not there yet (training writes it)")
    if inp.baseline:
        found = os.path.isfile(inp.baseline)
        lines.append(f"baseline {inp.baseline}: {'found' if found else 'not there yet'}")
    lines.append(f"would write {(Path(inp.output_dir) / GATE_NAME).as_posix()}")
    if inp.artifacts:
        lines += provenance.plan(inp.artifacts, inp.output_dir, rt.environ)
        head.append("then provenance")
        if inp.pin:
            hits = [r for r in journal.read("cache-restore", rt.environ) if r.get("manifest")]
            digests = ", ".join(str(r["manifest"])[:12] for r in hits) or "none yet"
            lines.append(
                f"if it passes, would pin the manifests of the {len(hits)} dataset(s) restored "
                f"in this job ({digests}) so prune keeps them"
            )
            head.append("then pin")
    if inp.comment:
        report.publish(inp, rt, "", result)
        lines += [n.message for n in result.annotations if n.title == "gpu-ci report"]
        head.append(f"then the PR comment ({result.report['comment']['action']})")
    result.outputs.pop("comment", None)
    result.outputs.pop("comment-url", None)
    result.headline = "dry run: " + ", ".join(head)
    result.summary.insert(0, "### Model gate plan\n\n" + "\n".join(f"- {ln}" for ln in lines))
    result.report["plan"] = lines
    return result


# Every output set from the start, so a step that stops early leaves none empty.
_BLANK_OUTPUTS: dict[str, OutputValue] = {
    "passed": False,
    "failed-rules": "",
    "gate-report": "",
    "record": "",
    "statement": "",
    "predicate": "",
    "digest": "",
    "commands": "",
    "pinned": 0,
    "comment": "skipped",
    "comment-url": "",
}


def run(inp: GateInputs, rt: Runtime) -> Result:
    """``python -m gpuci gate``: judge, write gate.json, then provenance, pins, history, report.

    Raises InputError for no rules, a malformed rule or an unusable baseline; a failed rule
    is the Result's exit code 1, not an exception. With ``comment``, an error raised once the
    rules are read first replaces the sticky report with one saying the gate errored.
    """
    result = Result(command="gate")
    rules = parse_all(inp)
    result.outputs = dict(_BLANK_OUTPUTS)
    if rt.dry_run:
        return _dry_run(inp, rules, rt, result)
    try:
        return _judge(inp, rules, rt, result)
    except Exception as exc:  # re-raised: the CLI says it in its one line and exit code
        if inp.comment:
            _report_error(inp, rt, exc)
        raise


def _judge(inp: GateInputs, rules: list[Rule], rt: Runtime, result: Result) -> Result:
    """Judge, write gate.json and the journal record, then provenance, pins, history, report."""
    record, warnings = evaluate(inp, rules)
    for warning in warnings:
        result.warning(warning, "gpu-ci gate")
    if record["metrics_error"]:
        result.error(record["metrics_error"], "gpu-ci gate")
    out = Path(inp.output_dir) / GATE_NAME
    write_file(out, json_bytes(record))
    record["report"] = out.as_posix()
    journal.record("gate", record, rt.environ)
    failed = record["failed_rules"]
    result.outputs.update(
        {"passed": record["passed"], "failed-rules": ", ".join(failed), "gate-report": str(out)}
    )
    past = history.read_past(
        rt, result, url=inp.history, series=inp.marker, points=inp.history_points
    )  # before this run joins it
    result.summary.append(report.gate_markdown(record, past, result, details=False))
    if record["passed"]:
        result.headline = f"{len(record['rows'])} rule(s) passed"
    else:
        result.exit_code = ExitCode.CHECK_FAILED
        result.headline = f"{len(failed)} of {len(record['rows'])} rule(s) failed: " + "; ".join(
            failed
        )
        result.error(result.headline, "gpu-ci: model gate failed")
    prov = _provenance(inp, rt, record, result)
    if inp.pin and record["passed"] and prov is not None:
        _pin(rt, prov, result)
    history.record_run(
        rt, record, prov, result, url=inp.history, mode=inp.history_append, series=inp.marker
    )
    if inp.comment:
        _report(inp, rt, record, prov, result, past)
    result.report["gate"] = record
    return result


def _fail_soft(result: Result, exc: GpuciError, what: str) -> None:
    result.error(f"{what}: {exc.one_line()}", f"gpu-ci {what}")
    if result.exit_code == ExitCode.OK:
        result.exit_code = exc.exit_code


def _provenance(
    inp: GateInputs, rt: Runtime, record: dict[str, Any], result: Result
) -> dict[str, Any] | None:
    if not inp.artifacts:
        return None
    try:
        produced = provenance.produce(
            inp.artifacts,
            environ=rt.environ,
            out_dir=inp.output_dir,
            metrics_path=inp.metrics,
            gate=record,
            python=inp.python or None,
        )
    except GpuciError as exc:
        _fail_soft(result, exc, "provenance")
        return None
    for warning in produced.warnings:
        result.warning(warning, "gpu-ci provenance")
    result.outputs.update(provenance.result_outputs(produced))
    result.summary.append(provenance.summary_markdown(produced))
    return produced.record


def _pin(rt: Runtime, prov: dict[str, Any], result: Result) -> None:
    """Pin every dataset manifest a passing model's provenance names, in the store it came from.

    A pin that fails fails the step: without it the model cannot be promised a rebuild.
    """
    from gpuci.cache._stores import open_store
    from gpuci.cache._upkeep import pins

    source, run = prov.get("source") or {}, prov.get("run") or {}
    reason = pins.check_reason(
        f"inputs of a model that passed its gate: {source.get('repository') or 'repository'}"
        f"@{str(source.get('commit') or '')[:12]} {run.get('run_url') or run.get('run_id') or ''}"
    )
    done: list[dict[str, Any]] = []
    for ds in prov.get("datasets") or []:
        try:
            store = open_store(
                ds.get("store") or None,
                endpoint_url=ds.get("endpoint_url") or None,
                region=None,
                environ=rt.environ,
                mask=rt.mask,
            )
            digest = layout.manifest_digest(str(ds.get("manifest") or ""))
            done.append(pins.pin_manifest(store, digest, reason, rt.environ, rt.dry_run))
        except GpuciError as exc:
            _fail_soft(result, exc, "pin")
    result.outputs["pinned"] = len(done)
    result.report["pins"] = done
    if done:
        result.summary.append("\n".join(f"- {pins.describe_pin(d)}" for d in done))


def _report(
    inp: GateInputs,
    rt: Runtime,
    record: dict[str, Any],
    prov: dict[str, Any] | None,
    result: Result,
    past: list[dict[str, Any]] | None = None,
) -> None:
    from gpuci.training import _ci as ci

    minutes = report.gpu_minutes(rt.environ, inp.gpu_minutes)
    marker = inp.marker or DEFAULT_MARKER
    body = report.render(marker, record, prov, minutes, ci.detect(rt.environ), past)
    try:
        report.publish(inp, rt, body, result)
    except GpuciError as exc:  # the comment is a courtesy: it never hides the gate's verdict
        result.warning(f"PR comment not posted: {exc.one_line()}", "gpu-ci report")


def _report_error(inp: GateInputs, rt: Runtime, error: Exception) -> None:
    """Replace the sticky report with "the gate errored" and one line why: left alone, the last
    push's "passed" would stay up over a job that failed. Its own failure is only logged, so
    the gate's error is the one the job ends with."""
    from gpuci.training import _ci as ci

    if isinstance(error, GpuciError):
        why = rt.line(error.one_line())
    else:  # a bug's message may hold the PR's data: its type only, the job log has the rest
        why = f"internal error in gpu-ci ({type(error).__name__}); the job log has the details"
    said = Result(command="gate")
    try:
        body = report.error_body(inp.marker or DEFAULT_MARKER, why, ci.detect(rt.environ))
        report.publish(inp, rt, body, said)
    except Exception as exc:  # the gate's own error is the one raised
        shown = exc.one_line() if isinstance(exc, GpuciError) else type(exc).__name__
        rt.log(f"PR comment not updated to say the gate errored: {shown}")
    for note in said.annotations:
        rt.log(note.message)
