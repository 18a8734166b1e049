"""Provenance: digests checked against the real files, the journal's datasets as dependencies."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from training_cli import answer, cli_json, github_env, run_gate

from gpuci import journal
from gpuci_testing import clean_env, run_cli_here


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_gate_with_artifacts_writes_record_and_statement(tmp_path):
    env = github_env(tmp_path)
    model = tmp_path / "out" / "model.npz"
    model.parent.mkdir()
    model.write_bytes(b"weights" * 1000)
    tokenizer = tmp_path / "out" / "tokenizer.json"
    tokenizer.write_text("{}")
    (tmp_path / "out" / "junk.incomplete").write_text("half")
    data = {"key": "data-v1", "matched_key": "data-v1", "manifest": "b" * 64, "path": ["data"]}
    journal.record("cache-restore", {**data, "files": 3, "bytes": 1234}, env)
    journal.record("cache-restore", {"key": "weights-v2", "matched_key": "", "manifest": ""}, env)
    base = {"url": "https://example.com/base.npz", "path": "weights/base.npz"}
    journal.record("retry-fetch", {"files": [{**base, "sha256": "d" * 64, "bytes": 99}]}, env)
    journal.record("gpu-setup", {"gpus": [{"name": "NVIDIA H100"}], "driver": "550.54"}, env)

    metrics = {"eval": {"accuracy": 0.95}}
    artifacts = ("--artifacts", str(tmp_path / "out"))
    body = answer(
        run_gate(tmp_path, metrics, "--min", "eval.accuracy=0.9", *artifacts, "--json", env=env)
    )
    assert body["rc"] == 0, body
    prov = tmp_path / "o"
    statement_path = Path(body["outputs"]["statement"])
    assert body["outputs"]["digest"] == "sha256:" + sha256(statement_path)
    record = json.loads((prov / "provenance.json").read_text())
    statement = json.loads(statement_path.read_text())
    predicate = json.loads((prov / "predicate.json").read_text())
    assert not list(prov.glob("*.incomplete"))

    # subjects: every real file, with its real digest; never the half-written one
    subjects = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    assert subjects == {model.as_posix(): sha256(model), tokenizer.as_posix(): sha256(tokenizer)}
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    assert predicate == statement["predicate"]

    deps = predicate["buildDefinition"]["resolvedDependencies"]
    assert deps[0] == {
        "uri": "git+https://github.com/acme/models@refs/pull/7/merge",
        "digest": {"gitCommit": "a" * 40},
    }
    assert deps[1]["name"] == "data-v1" and deps[1]["digest"] == {"sha256": "b" * 64}
    assert deps[1]["annotations"]["bytes"] == 1234
    assert deps[2] == {
        "name": "weights/base.npz",
        "uri": "https://example.com/base.npz",
        "digest": {"sha256": "d" * 64},
        "annotations": {"bytes": 99},
    }
    assert len(deps) == 3  # the cache miss has no digest: recorded, not claimed as a dependency
    assert record["cache_misses"][0]["key"] == "weights-v2"
    run = predicate["runDetails"]
    assert run["builder"]["id"] == "https://github.com/actions/runner/self-hosted"
    assert run["metadata"]["invocationId"] == (
        "https://github.com/acme/models/actions/runs/123/attempts/2"
    )
    assert run["byproducts"][0]["digest"]["sha256"] == sha256(tmp_path / "m.json")
    assert run["byproducts"][0]["annotations"]["verdict"] == "passed"

    assert record["source"]["commit"] == "a" * 40
    assert record["run"]["pull_request"] == 7
    assert record["gpu"]["gpus"][0]["name"] == "NVIDIA H100"
    assert record["verdict"] == "passed" and record["gate"]["passed"] is True
    assert record["metrics"]["values"] == {"eval.accuracy": 0.95}
    assert record["python"]["packages"]["httpx"]  # versions from the job's interpreter
    assert record["statement_digest"] == body["outputs"]["digest"]


def test_provenance_command_reads_the_gate_from_the_journal(tmp_path):
    env = github_env(tmp_path)
    model = tmp_path / "model.bin"
    model.write_bytes(b"\0" * 4096)
    assert run_gate(tmp_path, {"acc": 0.1}, "--min", "acc=0.5", env=env).returncode == 1
    out = ("--output-dir", str(tmp_path / "o"))
    body = cli_json(env, "provenance", "--artifacts", str(tmp_path / "*.bin"), *out)
    assert body["rc"] == 0, body
    record = json.loads((tmp_path / "o" / "provenance.json").read_text())
    assert record["verdict"] == "failed"
    assert record["gate"]["failed_rules"] == ["acc >= 0.5"]
    assert record["metrics"]["sha256"] == sha256(tmp_path / "m.json")
    assert record["artifacts"] == [
        {"path": model.as_posix(), "size": 4096, "sha256": sha256(model)}
    ]


def test_missing_artifact_fails_and_dry_run_writes_nothing(tmp_path):
    env = clean_env(GPUCI_JOURNAL=str(tmp_path / "j.jsonl"))
    out = ("--output-dir", str(tmp_path / "o"))
    proc = run_cli_here("provenance", "--artifacts", str(tmp_path / "nope"), *out, env=env)
    assert proc.returncode == 1 and "matches no file" in proc.stdout
    (tmp_path / "m.bin").write_bytes(b"x" * 2048)
    model = str(tmp_path / "m.bin")
    proc = run_cli_here("provenance", "--dry-run", "--artifacts", model, *out, env=env)
    assert proc.returncode == 0, proc.stdout
    assert "1 file(s), 2.0 KiB" in proc.stdout
    assert not (tmp_path / "o").exists() and not (tmp_path / "j.jsonl").exists()
