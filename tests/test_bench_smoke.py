"""A small smoke of the benchmark scripts: they run end to end and their exact rows hold.

Benchmarks are not timed tests: throughput figures are printed, never asserted. What is
asserted is what a run can't get wrong by noise: bytes served after a dropped connection.
"""

import json
import shutil
import subprocess
import sys

import pytest

from gpuci_testing import REPO, clean_env


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed here")
def test_bench_fetch_small(tmp_path):
    out = tmp_path / "fetch.json"
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/bench_fetch.py",
            "--small",
            "--repeat",
            "1",
            "--dir",
            str(tmp_path / "work"),
            "--json",
            str(out),
        ],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    figures = json.loads(out.read_text())
    assert "| gpuci (API) |" in proc.stdout and "vs curl" in proc.stdout
    for at in ("50%", "90%"):
        ours = figures["drops"][f"gpuci (API) @ {at}"]
        assert ours["complete"] is True
        assert ours["served_bytes"] == figures["size_bytes"]  # resumed: not one byte twice


S3RVER = REPO / ".bench" / "node" / "node_modules" / ".bin" / "s3rver"


@pytest.mark.skipif(
    not S3RVER.exists(),
    reason="s3rver is not installed (npm install --prefix .bench/node s3rver; .ci/run does)",
)
def test_bench_cache_small(tmp_path):
    out = tmp_path / "cache.md"
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/bench_cache.py",
            "--small",
            "--workdir",
            str(tmp_path / "w"),
            "--out",
            str(out),
        ],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = out.read_text()
    assert "| 4 x 8 MiB | gpu-ci restore (sha256) |" in table
    assert "| 200 x 100 KiB | gpu-ci restore (sha256) |" in table
    rows = dict(
        (cells[1].strip(), cells[2].strip())
        for cells in (line.split("|") for line in table.splitlines())
        if len(cells) == 4
    )
    # the incremental save moves the one changed file and a few KiB of metadata, nothing more
    changed = int(rows["of which file data"].split()[0].replace(",", ""))
    second = int(rows["second save uploaded"].replace(",", ""))
    assert changed == 1_048_576
    assert changed < second < changed + 16_384


def test_bench_write_path_small(tmp_path):
    # Every way of landing bytes runs end to end (4 x 8 MiB); the figures are printed only.
    small = ["--rounds", "1", "--file-size", str(8 << 20), "--workdir", str(tmp_path)]
    proc = subprocess.run(
        [sys.executable, "scripts/bench_write_path.py", *small],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("copy-4M", "copy-256K", "splice-pread", "splice-mmap"):
        assert f"| {name} |" in proc.stdout
