"""What made this model: commit, run, data, GPU, packages, metrics, verdict.

Two forms of one truth. ``provenance.json`` is the plain record a person or a later job reads.
``provenance.intoto.json`` is an in-toto Statement v1 whose predicate is SLSA provenance v1, with
the trained artifacts as subjects and the restored datasets/weights (by manifest digest) under
``resolvedDependencies``; ``predicate.json`` is that predicate alone, which is what
``actions/attest`` takes to sign it. Where attestations are not available the unsigned files are
kept as a build artifact. The other steps of the job tell us what they did through the journal.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuci import journal, untrusted_child, untrusted_json
from gpuci.cache import _layout as layout
from gpuci.errors import CheckFailed, GpuciError, InputError
from gpuci.files import json_bytes, write_file
from gpuci.markdown import Code
from gpuci.runtime import OutputValue, Result, Runtime, markdown_table
from gpuci.training import _ci as ci
from gpuci.training._artifacts import Artifact, digest, find_artifacts, in_workspace
from gpuci.training._intoto import BUILD_TYPE, PREDICATE_TYPE, STATEMENT_TYPE, statement
from gpuci.training._rules import gate_passed
from gpuci.training.options import ProvenanceInputs
from gpuci.units import human_bytes, utc_iso

__all__ = [
    "BUILD_TYPE",
    "PREDICATE_TYPE",
    "SCHEMA",
    "STATEMENT_TYPE",
    "Artifact",
    "Produced",
    "build_record",
    "find_artifacts",
    "load_record",
    "plan",
    "produce",
    "python_environment",
    "restore_commands",
    "result_outputs",
    "run",
    "statement",
    "summary_markdown",
]

# What provenance writes, by the output that names its path.
FILES = {
    "record": "provenance.json",
    "statement": "provenance.intoto.json",
    "predicate": "predicate.json",
}
SCHEMA = "gpuci.provenance/v1"

_PACKAGES_SCRIPT = """
import importlib.metadata as m, json, platform, sys
packages = {}
for d in m.distributions():
    name = d.metadata["Name"]
    if name:
        packages.setdefault(name, d.version)
print(json.dumps({"version": platform.python_version(),
                  "implementation": platform.python_implementation(),
                  "executable": sys.executable,
                  "packages": dict(sorted(packages.items(), key=lambda kv: kv[0].lower()))}))
"""


@dataclass
class Produced:
    record: dict[str, Any]
    statement: dict[str, Any]
    files: dict[str, str] = field(default_factory=dict)  # record/statement/predicate -> path
    digest: str = ""  # sha256:<hex> of the statement file
    warnings: list[str] = field(default_factory=list)


def python_environment(python: str | None) -> tuple[dict[str, Any] | None, str]:
    """Versions of the packages in the interpreter that trained (not gpu-ci's private venv).

    Asked in a child process, so the answer describes that interpreter, whichever it is.
    """
    exe = shutil.which(python) if python else shutil.which("python3") or shutil.which("python")
    if python and not exe:
        return None, f"python interpreter '{python}' not found: package versions not recorded"
    try:
        # That interpreter runs the project's code (a sitecustomize, a .pth): its answer is
        # read as untrusted (bounded in time and size; a list, a deep nesting or a huge number
        # is no answer).
        _, out = untrusted_child.run([exe or sys.executable, "-c", _PACKAGES_SCRIPT], timeout=60)
        last = out.strip().splitlines()[-1]
        return untrusted_json.parse_object(last, what="a package list"), ""
    except (OSError, ValueError, IndexError):
        return None, f"could not list the packages of {exe}: package versions not recorded"


def _datasets(environ: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Cache restores from the journal: (hits with a manifest digest, misses)."""
    hits: list[dict[str, Any]] = []
    misses: list[dict[str, Any]] = []
    for rec in journal.read("cache-restore", environ):
        (hits if rec.get("manifest") else misses).append(
            {k: v for k, v in rec.items() if k != "kind"}
        )
    return hits, misses


def _downloads(environ: Any) -> list[dict[str, Any]]:
    """Files ``retry-fetch`` verified in this job (url, path, sha256, bytes)."""
    return [
        f
        for rec in journal.read("retry-fetch", environ)
        for f in rec.get("files", [])
        if isinstance(f, dict) and f.get("sha256")
    ]


def _metrics(
    metrics_path: str | None, warnings: list[str], judged: str = ""
) -> dict[str, Any] | None:
    """The metrics file's path, sha256 and values, both of one read; what cannot be read is a
    warning, not fatal here (the gate has judged them already). ``judged``: the sha256 the
    gate judged; a file changed since is recorded as it is now, and said so."""
    if not metrics_path:
        return None
    path = Path(metrics_path)
    if not os.path.isfile(path):  # False, not OSError, for a name too long
        warnings.append(f"metrics file {metrics_path} not found: not recorded")
        return None
    from gpuci.training._metrics import load_hashed

    try:
        values, sha256 = load_hashed(path)
    except GpuciError as exc:
        values, sha256 = None, ""
        warnings.append(f"metrics file {path} not recorded as values: {exc.message}")
    target, link_out = in_workspace(path)  # a file that is no metrics is still hashed, unless so
    try:
        if not sha256 and target:  # opened as the gate reads it: a link swapped in since is not
            sha256 = digest(Path(target))[0]
    except OSError as exc:
        warnings.append(f"metrics file {path} not hashed: {exc.strerror or exc}")
    except untrusted_json.Unusable as exc:
        warnings.append(f"metrics file {path} not hashed: {exc}")
    if link_out:
        warnings.append(f"metrics file {path} not hashed: it {link_out}")
    if judged and sha256 != judged:
        warnings.append(
            f"metrics file {path} changed since the gate judged it (sha256 {judged[:12]}, now "
            f"{sha256[:12] or 'unreadable'}): the record holds it as it is now"
        )
    return {"path": path.as_posix(), "sha256": sha256, "values": values}


def build_record(
    artifacts: list[Artifact],
    *,
    environ: Any,
    metrics_path: str | None,
    gate: dict[str, Any] | None,
    python: str | None,
) -> tuple[dict[str, Any], list[str]]:
    warnings: list[str] = []
    ctx = ci.detect(environ)
    hits, misses = _datasets(environ)
    py, why = python_environment(python)
    if why:
        warnings.append(why)
    judged = (gate or {}).get("metrics_sha256")  # of the file it judged, when it is this one
    same = metrics_path and (gate or {}).get("metrics_path") == Path(metrics_path).as_posix()
    metrics = _metrics(metrics_path, warnings, judged if same and isinstance(judged, str) else "")
    record = {
        "schema": SCHEMA,
        "created": utc_iso(time.time()),
        "source": {
            "repository": ctx.repository,
            "server_url": ctx.server_url,
            "commit": ctx.commit,
            "ref": ctx.ref,
        },
        "run": {
            "platform": ctx.platform,
            "workflow": ctx.workflow,
            "run_id": ctx.run_id,
            "run_attempt": ctx.run_attempt,
            "run_url": ctx.run_url,
            "job": ctx.job,
            "runner": ctx.runner,
            "pull_request": ctx.pull_request,
            "builder_id": ci.builder_id(ctx),
        },
        "artifacts": [a.__dict__ for a in artifacts],
        "datasets": hits,
        "cache_misses": misses,
        "downloads": _downloads(environ),
        "gpu": journal.latest("gpu-setup", environ),
        "python": py,
        "metrics": metrics,
        "gate": gate,
        "verdict": "not gated" if gate is None else ("passed" if gate_passed(gate) else "failed"),
    }
    return record, warnings


def produce(
    patterns: list[str],
    *,
    environ: Any,
    out_dir: str,
    metrics_path: str | None = None,
    gate: dict[str, Any] | None = None,
    python: str | None = None,
) -> Produced:
    """Hash the artifacts, build the record and the statement, write all three atomically."""
    artifacts, skipped = find_artifacts(patterns)
    record, warnings = build_record(
        artifacts, environ=environ, metrics_path=metrics_path, gate=gate, python=python
    )
    warnings[:0] = skipped
    stmt = statement(record)
    paths = {what: Path(out_dir) / name for what, name in FILES.items()}
    produced = Produced(record=record, statement=stmt, warnings=warnings)
    payload = json_bytes(stmt)
    produced.digest = "sha256:" + write_file(paths["statement"], payload)
    write_file(paths["predicate"], json_bytes(stmt["predicate"]))
    record_out = {**record, "statement_digest": produced.digest}
    write_file(paths["record"], json_bytes(record_out))
    produced.record = record_out
    produced.files = {what: path.as_posix() for what, path in paths.items()}
    journal.record(
        "provenance",
        {**produced.files, "digest": produced.digest, "artifacts": len(artifacts)},
        environ,
    )
    return produced


def plan(patterns: list[str], out_dir: str, environ: Any) -> list[str]:
    """Dry run: what would be hashed and written, without hashing or writing anything."""
    lines: list[str] = []
    for pattern in patterns:
        try:
            arts, _ = find_artifacts([pattern], hash_files=False)
        except CheckFailed:
            lines.append(f"would hash '{pattern}': nothing there yet (training writes it)")
            continue
        total = sum(a.size for a in arts)
        lines.append(f"would hash '{pattern}': {len(arts)} file(s), {human_bytes(total)}")
    hits, misses = _datasets(environ)
    lines.append(
        f"journal: {len(hits)} restored dataset/weights manifest(s), {len(misses)} miss(es), "
        f"gpu-setup report {'found' if journal.latest('gpu-setup', environ) else 'not found yet'}"
    )
    paths = ((Path(out_dir) / name).as_posix() for name in FILES.values())
    lines.append(f"would write {', '.join(paths)}")
    return lines


def _replay(path: str) -> Result:
    """``provenance --record provenance.json``: print how to restore that model's inputs."""
    record = load_record(path)
    commands, skipped = restore_commands(record)
    result = Result(command="provenance")
    commit = str((record.get("source") or {}).get("commit") or "")[:12]
    result.headline = (
        f"{len(commands)} restore command(s) for the inputs of the model built from "
        f"{commit or 'an unknown commit'}"
    )
    for why in skipped:
        result.warning(f"dataset {why}: no restore command", "gpu-ci provenance")
    if commands:
        result.summary.append(commands_markdown(commands))
    result.outputs = {"commands": "\n".join(commands)}
    result.report = {"commands": commands, "skipped": skipped, "record": path}
    return result


def summary_markdown(produced: Produced) -> str:
    rec = produced.record
    rows = [
        (a["path"], human_bytes(a["size"]), Code(a["sha256"][:16] + "…")) for a in rec["artifacts"]
    ]
    text = "### Provenance\n\n" + markdown_table(["artifact", "size", "sha256"], rows)
    if rec["datasets"]:
        drows = [
            (
                d.get("matched_key") or d.get("key"),
                Code(str(d["manifest"])[:16] + "…"),
                d.get("path", ""),
            )
            for d in rec["datasets"]
        ]
        text += "\n\n" + markdown_table(["dataset / weights", "manifest", "path"], drows)
    commands, _ = restore_commands(rec)
    if commands:
        text += "\n\n" + commands_markdown(commands)
    text += f"\n\nStatement digest: `{produced.digest}` (in-toto v1, SLSA provenance v1)"
    return text


def result_outputs(produced: Produced) -> dict[str, OutputValue]:
    commands, _ = restore_commands(produced.record)
    return {**produced.files, "digest": produced.digest, "commands": "\n".join(commands)}


def run(inp: ProvenanceInputs, rt: Runtime) -> Result:
    """``python -m gpuci provenance``: the record of what produced the model.

    Raises InputError with neither artifacts nor record (or an unreadable record), and
    CheckFailed when no artifact matches.
    """
    if inp.record:
        return _replay(inp.record)
    patterns = inp.artifacts
    if not patterns:
        raise InputError(
            "provenance needs artifacts (to record a model) or record (to replay one)",
            hint="give artifacts: the trained model files, or record: a provenance.json",
        )
    result = Result(command="provenance")
    out_dir = inp.output_dir
    if rt.dry_run:
        lines = plan(patterns, out_dir, rt.environ)
        result.headline = "dry run: " + lines[0]
        result.summary.append("### Provenance (dry run)\n\n" + "\n".join(f"- {ln}" for ln in lines))
        result.report = {"plan": lines}
        return result
    gate = journal.latest("gate", rt.environ)
    named = (gate or {}).get("metrics_path")  # the journal is the job's: the PR may write it
    metrics_path = inp.metrics or (named if isinstance(named, str) else None)
    with rt.group("provenance: hashing artifacts"):
        produced = produce(
            patterns,
            environ=rt.environ,
            out_dir=out_dir,
            metrics_path=metrics_path,
            gate=gate,
            python=inp.python or None,
        )
    for warning in produced.warnings:
        result.warning(warning, "gpu-ci provenance")
    result.outputs = result_outputs(produced)
    result.summary.append(summary_markdown(produced))
    result.headline = (
        f"{len(produced.record['artifacts'])} artifact(s), "
        f"{len(produced.record['datasets'])} dataset(s); {produced.digest}"
    )
    result.report = {"record": produced.record}
    if gate is not None:
        from gpuci.training import _history as history

        history.record_run(
            rt, gate, produced.record, result, url=inp.history, mode=inp.history_append
        )
    return result


# ----- a record read back: checked as input (someone may have edited it), and the exact restore
# commands of the model's cached inputs it records ------------------------------------------
def restore_commands(record: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The commands that restore a recorded model's cached inputs, exact tree by manifest.

    Returns (commands, why some dataset has none). Every value comes from a record someone may
    have edited, so digests are checked and anything with a control character is refused.
    """
    commands: list[str] = []
    skipped: list[str] = []
    datasets = record.get("datasets")
    if not isinstance(datasets, list):
        datasets = []
    for ds in datasets:
        if not isinstance(ds, dict):
            continue
        name = str(ds.get("matched_key") or ds.get("key") or "dataset")
        try:
            digest = layout.manifest_digest(str(ds.get("manifest") or ""))
        except InputError:
            skipped.append(f"{name!r}: no valid manifest digest recorded")
            continue
        paths = ds.get("path") or []
        paths = [paths] if isinstance(paths, str) else [str(p) for p in paths]
        parts = ["python", "-m", "gpuci", "cache-weights", "restore", "--manifest", digest]
        for flag, field_name in (("--store", "store"), ("--endpoint-url", "endpoint_url")):
            if ds.get(field_name):
                parts += [flag, str(ds[field_name])]
        for path in paths:
            parts += ["--path", path]
        line = shlex.join(parts)
        if not paths or any(ord(c) < 32 or c == "\x7f" for c in line):
            skipped.append(f"{name!r}: no usable path or store recorded")
            continue
        commands.append(line)
    return commands, skipped


def commands_markdown(commands: list[str]) -> str:
    """The restore commands as a markdown block for a summary."""
    return "Restore the inputs of this model (exact trees, by manifest):\n\n```sh\n" + (
        "\n".join(commands) + "\n```"
    )


def load_record(path: str) -> dict[str, Any]:
    """A provenance.json written by this tool (or edited since: it is checked as input).

    Raises InputError when it cannot be read or is not a gpu-ci provenance record.
    """
    hint = "give the provenance.json the training job wrote (a build artifact)"
    raw = untrusted_json.object_input(Path(path), "provenance record", hint)
    if raw.get("schema") != SCHEMA:
        raise InputError(
            f"{path} is not a gpu-ci provenance record (schema {SCHEMA})",
            hint="give provenance.json, not the in-toto statement or the predicate",
        )
    return raw
