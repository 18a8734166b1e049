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
