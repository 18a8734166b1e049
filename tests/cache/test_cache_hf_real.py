"""layout hf with the real clients: huggingface_hub (and transformers, where torch is here) load
a restored hub cache offline, exactly as the original.

The tiny model is made here from transformers' config classes (no hub download, no network);
each client runs in a child process, so ``HF_HUB_CACHE`` and ``HF_HUB_OFFLINE`` are read the way
a job reads them, at import. torch and transformers are imported once, by one child that makes
the model, waits while the test saves and restores it, then loads the restored copy and
reads it with the hub client.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cache_testing import cache_cmd

from gpuci_testing import clean_env

REPO_ID = "org/tiny-bert"
FOLDER = "models--org--tiny-bert"
COMMIT = "c0ffee" + "0" * 34
HF = {"layout": "hf", "hf-repo": REPO_ID}
HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None

# The hub client's offline look-ups in HF_HUB_CACHE: ``hub_view(repo)``.
_HUB_VIEW = """
import json, sys
from pathlib import Path
from huggingface_hub import hf_hub_download, scan_cache_dir, snapshot_download

def hub_view(repo):
    snap = Path(snapshot_download(repo, local_files_only=True))
    files = {p.name: p.read_bytes().hex() for p in sorted(snap.iterdir())}
    config = Path(hf_hub_download(repo, "config.json")).read_bytes().hex()
    info = scan_cache_dir()
    return {
        "snapshot": snap.name,
        "files": files,
        "config": config,
        "warnings": [str(w) for w in info.warnings],
        "repos": [[r.repo_id, r.repo_type, [[v.commit_hash, sorted(v.refs), v.nb_files]
                  for v in r.revisions]] for r in info.repos],
    }
"""

# Child process: the hub client alone.
_HUB_SCRIPT = _HUB_VIEW + "print(json.dumps(hub_view(sys.argv[1])))\n"

# Child process: make the model in DIR and print a JSON line with the sha256 of its outputs on a
# fixed input, as float32 bytes; then, once told on stdin (the test has saved and restored it),
# load REPO offline from HF_HUB_CACHE and print the same line for the restored model, then the
# hub client's view of it (``_HUB_VIEW`` goes first). One interpreter for all: importing torch
# and transformers is the slow part.
_MODEL_SCRIPT = """
import hashlib, json, sys
import torch
from transformers import AutoModel, BertConfig, BertModel

def digest(model):
    model.eval()
    ids = torch.tensor([[1, 5, 7, 11, 13, 2]])
    with torch.no_grad():
        out = model(input_ids=ids).last_hidden_state
    return hashlib.sha256(out.to(torch.float32).contiguous().numpy().tobytes()).hexdigest()

def say(model):
    print(json.dumps({"outputs": digest(model), "class": type(model).__name__}), flush=True)

torch.manual_seed(0)
config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2,
                    num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
made = BertModel(config)
made.save_pretrained(sys.argv[1])
say(made)
del made
if sys.stdin.readline().strip() == "load":
    say(AutoModel.from_pretrained(sys.argv[2]))
    print(json.dumps(hub_view(sys.argv[2])), flush=True)
"""


def _child_env(hub: Path | None) -> dict[str, str]:
    """A job's environment for the hub clients: offline, ``hub`` as HF_HUB_CACHE, no token."""
    env = clean_env(HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", TRANSFORMERS_OFFLINE="1")
    env["OMP_NUM_THREADS"] = "1"  # a tiny model: threads only contend on a shared runner
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode cached, as on a runner
    if hub is not None:
        env["HF_HUB_CACHE"] = str(hub)
    env.pop("HF_HOME", None)
    env.pop("HF_TOKEN", None)
    return env


def _child(script: str, *args: str, hub: Path | None = None) -> dict:
    env = _child_env(hub)
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _as_hub_cache(files: Path, hub: Path) -> Path:
    """Lay ``files`` out as huggingface_hub does: blobs by hash, a snapshot of relative links."""
    repo = hub / FOLDER
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / COMMIT).mkdir(parents=True)
    (repo / "refs").mkdir()
    for path in sorted(files.iterdir()):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        (repo / "blobs" / digest).write_bytes(path.read_bytes())
        os.symlink(f"../../blobs/{digest}", repo / "snapshots" / COMMIT / path.name)
    (repo / "refs" / "main").write_text(COMMIT)
    return hub


def _save_and_restore(store, env, src_hub: Path, dest_hub: Path) -> None:
    saved, _ = cache_cmd("save", {**store.flags(), "key": "tiny", "path": str(src_hub), **HF}, env)
    assert saved.ok, saved.headline
    got, _ = cache_cmd(
        "restore", {**store.flags(), "key": "tiny", "path": str(dest_hub), **HF}, env
    )
    assert got.ok and got.outputs["cache-hit"] is True, got.headline


def _fake_model(folder: Path) -> Path:
    """Model files without torch: a config and weights bytes (the hub client never parses them)."""
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert", "hidden_size": 16}')
    (folder / "model.safetensors").write_bytes(hashlib.sha256(b"w").digest() * 4096)
    return folder


def test_huggingface_hub_finds_the_restored_repo_offline(store, env, tmp_path):
    files = _fake_model(tmp_path / "model")
    src_hub = _as_hub_cache(files, tmp_path / "hub-src")
    dest_hub = tmp_path / "hub-fresh"
    _save_and_restore(store, env, src_hub, dest_hub)
    got = _child(_HUB_SCRIPT, REPO_ID, hub=dest_hub)
    assert got["warnings"] == []
    assert got["repos"] == [[REPO_ID, "model", [[COMMIT, ["main"], 2]]]]
    assert got["snapshot"] == COMMIT
    assert got["files"] == {p.name: p.read_bytes().hex() for p in sorted(files.iterdir())}
    assert got["config"] == (files / "config.json").read_bytes().hex()


@pytest.mark.skipif(not HAS_TRANSFORMERS, reason="transformers is not installed (dev extra)")
@pytest.mark.skipif(
    not HAS_TORCH,
    reason="no torch here: scripts/dev.sh installs a CPU wheel only from a local wheel folder",
)
@pytest.mark.timeout(900)  # one interpreter importing torch on a busy 2-core runner
@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_transformers_loads_the_restored_model_offline_bit_identical(store, env, tmp_path):
    files, dest_hub = tmp_path / "model", tmp_path / "hub-fresh"
    log = tmp_path / "child.log"
    with (
        log.open("w") as err,
        subprocess.Popen(
            [sys.executable, "-c", _HUB_VIEW + _MODEL_SCRIPT, str(files), REPO_ID],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=_child_env(dest_hub),  # read at import, before the restore, as a job's would be
        ) as child,
    ):
        assert child.stdin is not None and child.stdout is not None
        made = child.stdout.readline()
        assert made, "the model child died: " + log.read_text()[-3000:]
        told = "stop\n"  # a failed save or restore ends the child without a load
        try:
            assert sorted(p.name for p in files.iterdir()) == ["config.json", "model.safetensors"]
            src_hub = _as_hub_cache(files, tmp_path / "hub-src")
            _save_and_restore(store, env, src_hub, dest_hub)
            told = "load\n"
        finally:
            out, _ = child.communicate(told, timeout=600)
    assert child.returncode == 0, log.read_text()[-3000:]
    loaded_line, hub_line = out.strip().splitlines()[-2:]
    loaded, hub = json.loads(loaded_line), json.loads(hub_line)
    assert loaded == json.loads(made) and loaded["class"] == "BertModel"
    # the hub client's view, in the same interpreter after the load: the same repo
    assert hub["warnings"] == [] and hub["repos"] == [[REPO_ID, "model", [[COMMIT, ["main"], 2]]]]
    assert hub["files"] == {p.name: p.read_bytes().hex() for p in sorted(files.iterdir())}
