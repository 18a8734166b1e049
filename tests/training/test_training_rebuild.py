"""A recorded model can be rebuilt: trained, gated, pinned; its keys moved and pruned; its inputs
restored by manifest from the provenance record, byte-identical."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
from pathlib import Path

from training_cli import answer, cli_json, github_env, run_gate

from gpuci_testing import run_cli_here


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_gated_pinned_model_is_rebuilt_after_its_keys_moved_and_were_pruned(tmp_path):
    env = {**github_env(tmp_path), "GPUCI_LOCAL_CACHE": "off", "HOME": str(tmp_path / "home")}
    store = (tmp_path / "store").as_uri()

    def weights(verb: str, *args: str) -> dict:
        """``gpuci cache-weights VERB ARGS --store STORE --json``."""
        return cli_json(env, "cache-weights", verb, *args, "--store", store)

    source = tmp_path / "dataset"
    source.mkdir()
    (source / "train.bin").write_bytes(os.urandom(1_300_000))
    (source / "labels.txt").write_text("cat\ndog\n")
    assert weights("save", "--key", "data-v1", "--path", str(source))["rc"] == 0
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "tmp.bin").write_bytes(os.urandom(1_100_000))
    unpinned = weights("save", "--key", "scratch-1", "--path", str(scratch))["outputs"]["manifest"]

    # The training job: restore the data, train, gate with pin.
    work = tmp_path / "work" / "data"
    got = weights("restore", "--key", "data-v1", "--path", str(work))
    assert got["rc"] == 0, got
    recorded = got["outputs"]["manifest"]
    model = tmp_path / "model" / "model.bin"
    model.parent.mkdir()
    model.write_bytes(hashlib.sha256((work / "train.bin").read_bytes()).digest())
    pinned = ("--min", "accuracy=0.9", "--artifacts", str(model.parent), "--pin", "true")
    plan = answer(run_gate(tmp_path, {"accuracy": 0.97}, *pinned, "--json", "--dry-run", env=env))
    assert plan["rc"] == 0, plan
    assert any("would pin the manifests of the 1 dataset(s)" in s for s in plan["report"]["plan"])
    assert not (tmp_path / "store" / "pins").exists()
    gate = answer(run_gate(tmp_path, {"accuracy": 0.97}, *pinned, "--json", env=env))
    assert gate["rc"] == 0, gate
    assert gate["outputs"]["pinned"] == "1"
    assert (tmp_path / "store" / "pins" / f"{recorded}.json").is_file()
    assert gate["outputs"]["commands"].startswith("python -m gpuci cache-weights restore")

    # Months later: the key moved on to new data, and prune ran.
    shutil.rmtree(tmp_path / "work")
    (source / "train.bin").write_bytes(os.urandom(1_300_000))
    moved = weights("save", "--key", "data-v1", "--path", str(source))
    assert moved["outputs"]["manifest"] != recorded
    pruned = weights("prune", "--older-than", "0s", "--grace", "0s")
    assert pruned["rc"] == 0, pruned
    assert f"manifests/{unpinned}.json" in pruned["report"]["manifests"]  # pruned as before
    assert f"manifests/{recorded}.json" not in pruned["report"]["manifests"]
    assert not (tmp_path / "store" / "manifests" / f"{unpinned}.json").exists()

    # A colleague rebuilds from the record alone.
    replay = cli_json(env, "provenance", "--record", str(tmp_path / "o" / "provenance.json"))
    assert replay["rc"] == 0, replay
    commands = replay["report"]["commands"]
    assert len(commands) == 1 and f"--manifest {recorded}" in commands[0]
    args = shlex.split(commands[0])
    assert args[:3] == ["python", "-m", "gpuci"]
    restored = cli_json(env, *args[3:])
    assert restored["rc"] == 0, restored
    assert restored["outputs"]["manifest"] == recorded
    rebuilt = _files(work)
    assert hashlib.sha256(rebuilt["train.bin"]).digest() == model.read_bytes()
    assert rebuilt["labels.txt"] == b"cat\ndog\n"


def test_replaying_a_hostile_record_prints_no_injected_line(tmp_path):
    env = github_env(tmp_path)
    record = tmp_path / "provenance.json"
    record.write_text(
        json.dumps(
            {
                "schema": "gpuci.provenance/v1",
                "datasets": [
                    {"key": "a", "manifest": "b" * 64, "path": ["x\n::error::owned"]},
                    {"key": "b", "manifest": "not hex", "path": ["y"]},
                    {"key": "c", "manifest": "c" * 64, "path": ["ok dir"], "store": "file:///s"},
                ],
            }
        )
    )
    got = cli_json(env, "provenance", "--record", str(record))
    assert got["rc"] == 0, got
    assert got["report"]["commands"] == [
        "python -m gpuci cache-weights restore --manifest "
        + "c" * 64
        + " --store file:///s --path 'ok dir'"
    ]
    assert len(got["report"]["skipped"]) == 2
    proc = run_cli_here("provenance", "--record", str(record), env=env)
    assert "\n::error::owned" not in proc.stdout + proc.stderr
    bad = cli_json(env, "provenance", "--record", str(tmp_path / "missing.json"))
    assert bad["rc"] == 2
