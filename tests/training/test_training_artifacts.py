"""The artifacts provenance hashes are found without going down a link and read through the
one hash loop: a link loop the PR's training leaves in its checkpoint folder is not walked, a
link out of the folder (or of the workspace, for the path a pattern names) is a warning and not
hashed, an unreadable file (or one that reads on past its size) is one line naming it."""

from __future__ import annotations

import glob
import hashlib
import os
from pathlib import Path

import pytest
from training_cli import run_gate

from forges.fake_github import FakeGitHub
from gpuci.errors import CheckFailed, InputError
from gpuci.training import _artifacts as artifacts
from gpuci.training import _provenance as provenance
from gpuci_testing import clean_env

FIX = "(save the file itself there, or name its real path in artifacts)"


def checkpoint(tmp_path: Path) -> Path:
    """ckpt/model.safetensors and ckpt/run/shard.safetensors."""
    ckpt = tmp_path / "ckpt"
    (ckpt / "run").mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"weights")
    (ckpt / "run" / "shard.safetensors").write_bytes(b"shard")
    return ckpt


def recorded(tmp_path: Path, patterns: list[str]) -> tuple[list[dict], list[str]]:
    """The artifacts ``provenance.produce`` records (path, size, sha256) and its warnings."""
    env = clean_env(GPUCI_JOURNAL=str(tmp_path / "j.jsonl"))
    out = str(tmp_path / "o")
    produced = provenance.produce(patterns, environ=env, out_dir=out, python="python3")
    return produced.record["artifacts"], produced.warnings


def paths(tmp_path: Path, patterns: list[str]) -> list[str]:
    return [a["path"] for a in recorded(tmp_path, patterns)[0]]


def test_a_folder_link_loop_is_not_walked(tmp_path):
    """glob's ``**`` followed ckpt/a -> . round and round (with two such links, 2**40 paths:
    the gate never ended); every file is found once, where it is."""
    ckpt = checkpoint(tmp_path)
    (ckpt / "a").symlink_to(".")
    for pattern in (f"{ckpt}/**/*.safetensors", str(ckpt), f"{ckpt}/*"):
        assert paths(tmp_path, [pattern]) == [
            f"{ckpt}/model.safetensors",
            f"{ckpt}/run/shard.safetensors",
        ], pattern


def test_a_link_out_of_the_folder_is_a_warning_and_not_hashed(tmp_path):
    ckpt = checkpoint(tmp_path)
    secret = tmp_path / "outside" / "deep"
    secret.mkdir(parents=True)
    (secret / "token.safetensors").write_bytes(b"secret")
    (ckpt / "sys").symlink_to(tmp_path / "outside")  # a folder: not walked
    (ckpt / "stolen.safetensors").symlink_to(secret / "token.safetensors")  # a file: not read
    (ckpt / "latest.safetensors").symlink_to("model.safetensors")  # inside: hashed
    found, warnings = recorded(tmp_path, [f"{ckpt}/**/*.safetensors"])
    assert [a["path"] for a in found] == [
        f"{ckpt}/latest.safetensors",
        f"{ckpt}/model.safetensors",
        f"{ckpt}/run/shard.safetensors",
    ]
    assert found[0]["sha256"] == found[1]["sha256"] == hashlib.sha256(b"weights").hexdigest()
    assert warnings == [
        f"artifact {ckpt}/stolen.safetensors is a link out of {ckpt}: not hashed {FIX}"
    ]


def test_a_named_folder_or_file_that_links_out_of_the_workspace_is_a_warning(tmp_path, monkeypatch):
    """The training made ``ckpt`` a link to ~ (the whole home walked, its secrets' hashes in
    the record) or ``model.safetensors`` one to a secret, in the checkout or in a folder the
    workflow named: what a pattern names is resolved once and must stay in its workspace."""
    home = tmp_path / "home"
    (home / "keys").mkdir(parents=True)
    (home / "keys" / "id.safetensors").write_bytes(b"secret")
    work, temp = tmp_path / "work", tmp_path / "runner-temp"
    (work / "real").mkdir(parents=True)
    (work / "real" / "model.safetensors").write_bytes(b"weights")
    temp.mkdir()
    (work / "ckpt").symlink_to(home)
    (work / "model.safetensors").symlink_to(home / "keys" / "id.safetensors")
    (temp / "model.safetensors").symlink_to(home / "keys" / "id.safetensors")
    monkeypatch.chdir(work)
    here, out_of_temp = os.getcwd(), os.path.realpath(temp)
    for pattern, named, workspace in (
        ("ckpt", "ckpt", here),
        ("ckpt/**/*.safetensors", "ckpt", here),
        ("model.safetensors", "model.safetensors", here),
        (f"{temp}/model.safetensors", f"{temp}/model.safetensors", out_of_temp),
    ):
        found, warnings = recorded(tmp_path, [pattern])
        assert found == [], pattern
        assert warnings == [f"artifact {named} is a link out of {workspace}: not hashed {FIX}"], (
            pattern
        )
    (work / "out").symlink_to("real")  # links that stay inside are followed once
    (work / "latest.safetensors").symlink_to("real/model.safetensors")
    assert paths(tmp_path, ["out", "latest.safetensors"]) == [
        "latest.safetensors",
        "out/model.safetensors",
    ]


def test_globs_match_as_glob_did_without_links(tmp_path):
    """The walk finds what ``glob`` (and a folder's ``rglob``) found in a tree with no link:
    ``*`` passes over dot names, a folder a glob matches gives every file below it, a file
    still being written (``.incomplete``) is none."""
    ckpt = checkpoint(tmp_path)
    (ckpt / ".hidden").mkdir()
    (ckpt / ".hidden" / "x.safetensors").write_bytes(b"x")
    (ckpt / ".dot.safetensors").write_bytes(b"d")
    (ckpt / "run" / ".state").write_bytes(b"s")
    (ckpt / "run" / "part.safetensors.incomplete").write_bytes(b"p")
    (ckpt / "run.safetensors").mkdir()
    (ckpt / "run.safetensors" / "inner.bin").write_bytes(b"i")
    for pattern in ("**/*.safetensors", "*", "r*", "run/*", "**", "*/*.safetensors", "?un"):
        full = f"{ckpt}/{pattern}"
        expected: set[str] = set()
        for path in map(Path, glob.glob(full, recursive=True)):
            below = path.rglob("*") if path.is_dir() else [path]
            expected |= {p.as_posix() for p in below if p.is_file()}
        expected = {p for p in expected if not p.endswith(".incomplete")}
        assert paths(tmp_path, [full]) == sorted(expected), pattern


def test_more_files_than_the_cap_is_one_line(tmp_path, monkeypatch):
    ckpt = checkpoint(tmp_path)
    monkeypatch.setattr(artifacts, "MAX_ARTIFACT_FILES", 1)
    with pytest.raises(InputError, match="artifacts match more than 1 files"):
        artifacts.find_artifacts([str(ckpt)])


def test_a_fifo_in_the_folder_is_no_artifact(tmp_path):
    ckpt = checkpoint(tmp_path)
    os.mkfifo(ckpt / "pipe.safetensors")
    assert paths(tmp_path, [f"{ckpt}/*.safetensors"]) == [f"{ckpt}/model.safetensors"]
    with pytest.raises(CheckFailed, match="matches no file"):
        recorded(tmp_path, [str(ckpt / "pipe.safetensors")])


def test_an_unreadable_artifact_is_one_line_and_the_gate_goes_on(tmp_path):
    """An artifact named in the workflow that cannot be read (here /proc/self/mem: EIO on
    read, as root too) ended the gate in an internal error after gate.json, so no PR comment
    and no history."""
    with FakeGitHub() as github:
        env = github.pull_request_env(tmp_path, "acme/models", 7)
        flags = ("--min", "accuracy=0.5", "--artifacts", "/proc/self/mem", "--comment")
        proc = run_gate(tmp_path, {"accuracy": 0.95}, *flags, env=env)
        comments = github.state.comments.get("acme/models#7", [])
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text
    assert "internal error" not in text and "Traceback" not in text
    assert "cannot read the artifact /proc/self/mem: Input/output error" in text
    assert (tmp_path / "o" / "gate.json").is_file()
    assert len(comments) == 1


@pytest.mark.skipif(not os.path.exists("/proc/self/pagemap"), reason="Linux's pagemap")
def test_an_artifact_that_reads_on_past_its_size_is_one_line():
    """/proc/self/pagemap is a regular file of 0 bytes that reads on for hundreds of GiB: the
    gate hashed it for ever. A file is read up to the size it states, refused past it."""
    with pytest.raises(InputError) as caught:
        artifacts.find_artifacts(["/proc/self/pagemap"])
    assert str(caught.value) == (
        "cannot read the artifact /proc/self/pagemap: it reads on past the 0 bytes it states"
    )


def test_provenance_warns_of_a_link_out(tmp_path):
    ckpt = checkpoint(tmp_path)
    (ckpt / "shard2.safetensors").symlink_to("/proc/self/mem")
    found, warnings = recorded(tmp_path, [str(ckpt)])
    assert [a["path"] for a in found] == [
        f"{ckpt}/model.safetensors",
        f"{ckpt}/run/shard.safetensors",
    ]
    assert any("shard2.safetensors is a link out of" in w for w in warnings)


@pytest.mark.parametrize("target", ["/proc/self/mem", "/proc/self/pagemap"])
def test_a_metrics_file_that_cannot_be_read_is_a_warning(tmp_path, target):
    """provenance hashed the metrics file by a plain open(): an unreadable one was an internal
    error after the gate had judged (or failed) it; one that reads on past its size (pagemap:
    0 bytes stated, hundreds of GiB read) held the gate for ever."""
    ckpt = checkpoint(tmp_path)
    (tmp_path / "m.json").symlink_to(target)
    env = clean_env(GPUCI_JOURNAL=str(tmp_path / "j.jsonl"))
    produced = provenance.produce(
        [str(ckpt)],
        environ=env,
        out_dir=str(tmp_path / "o"),
        metrics_path=str(tmp_path / "m.json"),
        python="python3",
    )
    assert produced.record["metrics"]["sha256"] == ""
    assert any(
        w.startswith(f"metrics file {tmp_path}/m.json not hashed") for w in produced.warnings
    )


def test_a_link_that_cannot_be_read_is_a_warning_not_an_internal_error(tmp_path, monkeypatch):
    """A link whose target the runner's user may not read (``ckpt/pid1 -> /proc/1/cwd``:
    readlink is EACCES for another user's process) made ``realpath`` raise PermissionError:
    the gate ended in an internal error. It is a warning and not hashed, named or walked."""
    ckpt = checkpoint(tmp_path)
    (ckpt / "pid1").symlink_to("/proc/1/cwd")
    real_readlink = os.readlink

    def readlink(path, *args, **kwargs):  # as a runner that is not root finds it
        if os.fspath(path) == "/proc/1/cwd":
            raise PermissionError(13, "Permission denied", path)
        return real_readlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "readlink", readlink)
    for pattern in (str(ckpt), f"{ckpt}/*", f"{ckpt}/pid1", f"{ckpt}/pid1/*"):
        found, warnings = recorded(tmp_path, [pattern, f"{ckpt}/model.safetensors"])
        assert [a["path"] for a in found] == (
            [f"{ckpt}/model.safetensors"]
            if "pid1" in pattern
            else [f"{ckpt}/model.safetensors", f"{ckpt}/run/shard.safetensors"]
        ), pattern
        assert any(f"{ckpt}/pid1 is a link that cannot be resolved" in w for w in warnings), (
            pattern,
            warnings,
        )


def test_a_walk_over_more_names_than_the_cap_is_one_line(tmp_path, monkeypatch):
    """The training may leave millions of empty folders (or of files the pattern does not
    match) beside the model: no count of files saw them, so the walk went on through all of
    them. It lists at most MAX_ARTIFACT_WALKED names, then stops in one line."""
    ckpt = checkpoint(tmp_path)
    for i in range(20):
        (ckpt / "empty" / f"d{i:02}").mkdir(parents=True)
    monkeypatch.setattr(artifacts, "MAX_ARTIFACT_WALKED", 10)
    for pattern in (str(ckpt), f"{ckpt}/**/*.safetensors"):
        with pytest.raises(InputError, match=r"holds more than 10 files and folders to walk"):
            artifacts.find_artifacts([pattern])
    monkeypatch.setattr(artifacts, "MAX_ARTIFACT_WALKED", 25)  # 2 files, 22 folders
    assert paths(tmp_path, [f"{ckpt}/**/*.safetensors"]) == [
        f"{ckpt}/model.safetensors",
        f"{ckpt}/run/shard.safetensors",
    ]


def swap_for_link(path: Path, to: Path) -> None:
    """What a process the training left behind does once ``path`` was checked: the file or
    folder moved aside, a link to ``to`` (a secret of the runner's) in its place."""
    path.rename(path.with_name(path.name + ".was"))
    path.symlink_to(to)


@pytest.mark.parametrize("swapped", ["file", "folder"])
def test_a_metrics_file_swapped_for_a_link_after_the_check_is_not_hashed(
    tmp_path, monkeypatch, swapped
):
    """Metrics that will not load are still hashed for the record. A process the training
    left behind swaps ``outputs/m.json`` (or ``outputs/``) for a link to a secret once found
    inside the workspace: the hash opened by path, followed it, and the record held the
    secret's sha256. It is opened as the gate's read is, never through a link."""
    secret = tmp_path / "home" / "m.json"
    secret.parent.mkdir()
    secret.write_text("refresh_token=s3cr3t-value\n")
    metrics = tmp_path / "ws" / "outputs" / "m.json"
    metrics.parent.mkdir(parents=True)
    metrics.write_text("no metrics\n")
    real_check = provenance.in_workspace

    def check_then_swap(named):
        found = real_check(named)
        if swapped == "file":
            swap_for_link(metrics, secret)
        else:
            swap_for_link(metrics.parent, secret.parent)
        return found

    monkeypatch.setattr(provenance, "in_workspace", check_then_swap)
    warnings: list[str] = []
    record = provenance._metrics(str(metrics), warnings)
    assert record is not None and record["sha256"] == "", record
    assert any(f"metrics file {metrics} not hashed" in w for w in warnings), warnings


@pytest.mark.parametrize("named", ["file", "walked"])
def test_an_artifact_swapped_for_a_link_after_the_check_is_not_hashed(tmp_path, monkeypatch, named):
    """``ckpt/run/shard.safetensors`` named as given (or found walking ``ckpt``): a process the
    training left behind swaps ``ckpt/run`` for a link to a folder of the runner's secrets once
    checked inside the workspace (walked): the hash opened the path, followed the link, and the
    record held a secret's sha256 and size. Each artifact is opened never through a link."""
    ckpt = checkpoint(tmp_path)
    secrets = tmp_path / "home"
    secrets.mkdir()
    (secrets / "shard.safetensors").write_bytes(b"s3cr3t-value")
    if named == "file":
        real_check = artifacts.in_workspace

        def check_then_swap(path):
            found = real_check(path)
            swap_for_link(ckpt / "run", secrets)
            return found

        monkeypatch.setattr(artifacts, "in_workspace", check_then_swap)
        pattern = f"{ckpt}/run/shard.safetensors"
    else:
        real_walk = artifacts._walk

        def walk_then_swap(*args):
            found = real_walk(*args)
            swap_for_link(ckpt / "run", secrets)
            return found

        monkeypatch.setattr(artifacts, "_walk", walk_then_swap)
        pattern = str(ckpt)
    with pytest.raises(InputError) as caught:
        artifacts.find_artifacts([pattern])
    assert str(caught.value) == (
        f"cannot read the artifact {ckpt}/run/shard.safetensors: a link was swapped in on its path"
    )
