"""Output streams: stdout carries the result only; progress and logs go to stderr.

``gpuci cache-weights restore ... | true`` (or ``| head``) must finish the restore: the reader
leaving early is no reason to roll back a tree that was already fetched and verified.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cache_testing import REPO_ROOT, cache_cmd
from treeutil import leftovers, make_tree, snapshot

from gpuci_testing import clean_env


def _cli(*args: str, env: dict[str, str], stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    cwd = Path(env["HOME"]).parent  # the test's tmp_path: reports written to cwd land there
    return subprocess.run(
        [sys.executable, "-m", "gpuci", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    return clean_env(
        HOME=str(tmp_path / "home"),
        GPUCI_JOURNAL=str(tmp_path / "journal.jsonl"),
        GPUCI_PROGRESS_INTERVAL="0",  # a progress line on every chunk: the pipe is hit at once
        GPUCI_LOCAL_CACHE="off",
        GPUCI_FAKE_NVML="h200",
        PYTHONPATH=str(REPO_ROOT / "src"),
    )


def test_a_restore_whose_reader_left_still_finishes(tmp_path, cli_env):
    store = (tmp_path / "store").as_uri()
    src = make_tree(tmp_path / "src", small=4, big=6_000_000)
    saved = _cli("cache-weights", "save", "--store", store, "--key", "k", "--path", str(src),
                 env=cli_env)  # fmt: skip
    assert saved.returncode == 0, saved.stdout + saved.stderr
    out = tmp_path / "out"
    read_end, write_end = os.pipe()
    os.close(read_end)  # `... | true`: the reader is gone before the first byte
    try:
        got = _cli("cache-weights", "restore", "--store", store, "--key", "k", "--path", str(out),
                   env=cli_env, stdout=write_end)  # fmt: skip
    finally:
        os.close(write_end)
    assert "Traceback" not in got.stderr
    assert got.returncode == 0, got.stderr
    assert snapshot(out) == snapshot(src)
    assert leftovers(tmp_path) == []
    assert "restore k:" in got.stderr  # the progress went to stderr


@pytest.mark.parametrize(
    "args",
    [
        ["gpu-setup", "--require-gpu", "false"],
        ["gpu-smoke", "--budget-seconds", "5"],
        ["dry-run", str(REPO_ROOT / "examples/workflows/train.yml")],
        ["cache-weights", "save", "--key", "k", "--path", "{src}"],
        ["cache-weights", "restore", "--key", "k", "--path", "{out}"],
        ["cache-weights", "ls"],
        ["cache-weights", "prune", "--older-than", "1d"],
    ],
    ids=lambda a: " ".join(a[:2]).replace(str(REPO_ROOT) + "/", ""),
)
def test_stdout_holds_the_result_and_nothing_before_it(tmp_path, cli_env, args):
    src = make_tree(tmp_path / "src", small=2)
    cli_env["GPUCI_STORE"] = (tmp_path / "store").as_uri()
    seeded = _cli("cache-weights", "save", "--key", "k", "--path", str(src), env=cli_env)
    assert seeded.returncode == 0, seeded.stdout + seeded.stderr
    argv = [a.format(src=src, out=tmp_path / "out") for a in args]
    got = _cli(*argv, env=cli_env)
    assert "Traceback" not in got.stderr, got.stderr
    name = " ".join(a for a in argv[:2] if not a.startswith("-") and "/" not in a)
    first = got.stdout.splitlines()[0] if got.stdout else ""
    assert first.startswith(f"{name}: "), got.stdout  # the result's first line, nothing before
    assert [line for line in got.stdout.splitlines() if line.startswith(name)] == [first]


def test_an_include_that_matches_nothing_warns(env, tmp_path):
    flags = {"store": (tmp_path / "store").as_uri(), "key": "k"}
    src = make_tree(tmp_path / "src", small=2)
    assert cache_cmd("save", {**flags, "path": str(src)}, env)[0].ok
    for dry_run in (True, False):
        flags_out = {**flags, "path": str(tmp_path / "o"), "include": "*.safetensors\n*.txt"}
        got, _ = cache_cmd("restore", flags_out, env, dry_run=dry_run)
        assert got.ok and got.outputs["cache-hit"] is True
        warned = [a.message for a in got.annotations if a.level == "warning"]
        assert len(warned) == 1 and "'*.safetensors' matches nothing in k" in warned[0], warned
        assert "*.txt" not in warned[0]  # that one picked the text files
