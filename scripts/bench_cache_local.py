#!/usr/bin/env python3
"""Benchmark a warm restore from the runner-local tier against ``cp -a`` of the same tree.

Self-hosted runners keep their disks, so the second job on a runner should pay almost nothing
for a cache hit. This saves dataset (a) (4 x 512 MiB by default) into a file store with the
local tier on, then times, alternately, ``python -m gpuci cache-weights restore`` (the whole
CLI, interpreter start included) into a fresh folder and ``cp -a`` of the tree into a fresh
folder. Target: the restore takes at most 0.05x the copy's time.

    python scripts/bench_cache_local.py                      # 4 x 512 MiB, 3 runs each
    python scripts/bench_cache_local.py --size 64MiB --runs 2  # quick

Run it alone; the cold-restore benchmark against S3 is scripts/bench_cache.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from gpuci.cache.tier import parse_size  # noqa: E402
from gpuci.runtime import human_bytes  # noqa: E402


def make_tree(root: Path, count: int, size: int) -> None:
    root.mkdir(parents=True)
    block = os.urandom(4 << 20)
    for i in range(count):
        with open(root / f"shard-{i}.bin", "wb") as handle:
            left = size
            while left > 0:
                n = min(left, len(block))
                handle.write(block[:n] if i == 0 else bytes([i]) + block[1:n])
                left -= n


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return time.perf_counter() - start, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=4)
    parser.add_argument("--size", default="512MiB", help="file size (default 512MiB)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "gpuci-bench-local"))
    args = parser.parse_args()
    size = parse_size(args.size, "--size")
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    tree, store, tier = work / "tree", work / "store", work / "tier"
    make_tree(tree, args.count, size)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "INPUT_"))},
        "PYTHONPATH": str(REPO / "src"),
        "GPUCI_JOURNAL": str(work / "journal.jsonl"),
        "GPUCI_LOCAL_CACHE": str(tier),
    }
    gpuci = [sys.executable, "-m", "gpuci", "cache-weights"]
    common = ["--key", "bench-local", "--store", store.as_uri(), "--local-cache-size", "0"]
    subprocess.run(
        [*gpuci, "save", *common, "--path", str(tree)],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(["sync"], check=True)
    restore_s, inner_s, copy_s = [], [], []
    for run in range(args.runs):
        dest = work / f"restore-{run}"
        wall, out = timed([*gpuci, "restore", *common, "--json", "--path", str(dest)], env)
        outputs = json.loads(out)["outputs"]
        assert int(outputs["bytes-from-local"]) == args.count * size, outputs
        restore_s.append(wall)
        inner_s.append(float(outputs["seconds"]))
        copy = work / f"copy-{run}"
        copy_s.append(timed(["cp", "-a", str(tree), str(copy)], env)[0])
        for path in (dest, copy):
            for item in path.rglob("*"):
                if item.is_file():
                    item.chmod(0o644)
            shutil.rmtree(path)
        subprocess.run(["sync"], check=True)
    r, c = statistics.median(restore_s), statistics.median(copy_s)
    total = args.count * size
    print(
        f"dataset (a): {args.count} x {human_bytes(size)} = {human_bytes(total)}, "
        f"{args.runs} runs each, median (min-max)"
    )
    print("| tool | seconds | ratio to cp -a |")
    print("|---|---|---|")
    print(
        f"| gpu-ci warm restore (local tier) | {r:.3f} ({min(restore_s):.3f}-{max(restore_s):.3f})"
        f" | {r / c:.3f}x |"
    )
    i = statistics.median(inner_s)
    print(
        f"| of which the restore itself (output seconds) | {i:.3f} "
        f"({min(inner_s):.3f}-{max(inner_s):.3f}) | {i / c:.3f}x |"
    )
    print(f"| cp -a | {c:.3f} ({min(copy_s):.3f}-{max(copy_s):.3f}) | 1x |")
    print(f"target <= 0.05x (whole CLI): {'met' if r / c <= 0.05 else 'NOT met'}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
