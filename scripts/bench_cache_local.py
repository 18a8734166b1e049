#!/usr/bin/env python3
"""Benchmark a warm restore from the runner-local tier, in each trust mode, against ``cp -a``.

Self-hosted runners keep their disks, so the second job on a runner should pay little for a
cache hit. This saves a tree (default: 3 x 320 MiB plus 1024 x 64 KiB, 1 GiB in all) into a
file store with the local tier on, then times, alternately, ``python -m gpuci cache-weights
restore --local-cache-mode MODE`` (the whole CLI, interpreter start included) into a fresh
folder for each mode, and ``cp -a`` of the tree into a fresh folder. ``copy`` (the default)
reflinks where the filesystem can and copies elsewhere, ``verify`` also hashes what it places,
``link`` hardlinks large files (single-tenant runners only; docs/security.md).

    python scripts/bench_cache_local.py                              # 1 GiB mixed, 3 runs
    python scripts/bench_cache_local.py --workdir /mnt/xfs/bench     # on a reflink filesystem
    python scripts/bench_cache_local.py --size 16MiB --small 64 --runs 1   # quick
    python scripts/bench_cache_local.py --server seaweedfs   # an S3 store on a custom endpoint

``--server seaweedfs`` keeps the store in SeaweedFS (scripts/seaweedfs.py) on 127.0.0.1, named
by ``AWS_ENDPOINT_URL`` with credentials in the environment, as a job using MinIO, R2 or
SeaweedFS would: every file still comes from the tier, so the difference from a file store is
what the S3 store's ref, manifest and usage record cost at start-up.

Run it alone; the cold-restore benchmark against S3 is scripts/bench_cache.py.
"""

from __future__ import annotations

import argparse
import atexit
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


def make_tree(root: Path, count: int, size: int, small: int, small_size: int) -> None:
    """``count`` big files of ``size`` bytes and ``small`` files of ``small_size`` in 16 folders."""
    root.mkdir(parents=True)
    block = os.urandom(4 << 20)
    for i in range(count):
        with open(root / f"shard-{i}.bin", "wb") as handle:
            left = size
            while left > 0:
                n = min(left, len(block))
                handle.write(block[:n] if i == 0 else bytes([i]) + block[1:n])
                left -= n
    for i in range(small):
        folder = root / f"part-{i % 16:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{i:05d}.bin").write_bytes(os.urandom(small_size))


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return time.perf_counter() - start, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=3, help="big files (default 3)")
    parser.add_argument("--size", default="320MiB", help="big file size (default 320MiB)")
    parser.add_argument("--small", type=int, default=1024, help="small files (default 1024)")
    parser.add_argument("--small-size", default="64KiB", help="small file size (default 64KiB)")
    parser.add_argument("--modes", default="copy,verify,link", help="local-cache-mode values")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "gpuci-bench-local"))
    parser.add_argument(
        "--server", choices=("file", "seaweedfs"), default="file", help="where the store is"
    )
    args = parser.parse_args()
    size = parse_size(args.size, "--size")
    small_size = parse_size(args.small_size, "--small-size")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    tree, store, tier = work / "tree", work / "store", work / "tier"
    make_tree(tree, args.count, size, args.small, small_size)
    total = args.count * size + args.small * small_size
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "INPUT_"))},
        "PYTHONPATH": str(REPO / "src"),
        "GPUCI_JOURNAL": str(work / "journal.jsonl"),
        "GPUCI_LOCAL_CACHE": str(tier),
    }
    weed = None
    store_url = store.as_uri()
    if args.server == "seaweedfs":
        weed, store_url = _seaweedfs(work / "seaweedfs", env)
    gpuci = [sys.executable, "-m", "gpuci", "cache-weights"]
    common = ["--key", "bench-local", "--store", store_url, "--local-cache-size", "0"]
    subprocess.run(
        [*gpuci, "save", *common, "--path", str(tree)],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(["sync"], check=True)
    walls: dict[str, list[float]] = {m: [] for m in [*modes, "cp -a"]}
    inner: dict[str, list[float]] = {m: [] for m in modes}
    placed: dict[str, dict[str, int]] = {}
    for run in range(args.runs):
        for mode in modes:
            dest = work / f"restore-{mode}-{run}"
            cmd = [*gpuci, "restore", *common, "--local-cache-mode", mode, "--json"]
            wall, out = timed([*cmd, "--path", str(dest)], env)
            report = json.loads(out)
            outputs = report["outputs"]
            assert int(outputs["bytes-from-local"]) == total, outputs
            walls[mode].append(wall)
            inner[mode].append(float(outputs["seconds"]))
            placed[mode] = report.get("report", {}).get("placed", {})
            _remove(dest)
        copy = work / f"copy-{run}"
        walls["cp -a"].append(timed(["cp", "-a", str(tree), str(copy)], env)[0])
        _remove(copy)
    if weed is not None:
        weed.stop()
    c = statistics.median(walls["cp -a"])
    print(
        f"tree: {args.count} x {human_bytes(size)} + {args.small} x {human_bytes(small_size)}"
        f" = {human_bytes(total)}, {args.runs} runs each, median (min-max), in {work}, "
        f"store {store_url}" + (f" at {env['AWS_ENDPOINT_URL']}" if weed is not None else "")
    )
    print("| tool | placed | seconds, whole CLI | vs cp -a | restore itself (output seconds) |")
    print("|---|---|---|---|---|")
    for name, times in walls.items():
        r = statistics.median(times)
        how = ", ".join(f"{k} {v}" for k, v in sorted(placed.get(name, {}).items())) or "-"
        own = f"{statistics.median(inner[name]):.3f}" if name in inner else "-"
        print(
            f"| {name if name == 'cp -a' else 'restore --local-cache-mode ' + name} | {how} | "
            f"{r:.3f} ({min(times):.3f}-{max(times):.3f}) | {r / c:.2f}x | {own} |"
        )
    shutil.rmtree(work, ignore_errors=True)
    return 0


def _seaweedfs(root: Path, env: dict[str, str]):
    """Start SeaweedFS, make a bucket, point ``env`` at it; (server, store URL)."""
    sys.path.insert(0, str(REPO / "scripts"))
    import boto3
    import seaweedfs

    server = seaweedfs.SeaweedFS(root)
    endpoint = server.start()
    atexit.register(server.stop)  # also when the benchmark fails half-way
    access, secret = seaweedfs.ADMIN
    env.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID=access,
        AWS_SECRET_ACCESS_KEY=secret,
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
    )
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        env.pop(name, None)
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        region_name="us-east-1",
    )
    client.create_bucket(Bucket="gpuci-bench")
    return server, "s3://gpuci-bench/local"


def _remove(path: Path) -> None:
    """Delete a restored tree (link mode leaves read-only files) and flush the writes."""
    for item in path.rglob("*"):
        if item.is_file():
            item.chmod(0o644)
    shutil.rmtree(path)
    subprocess.run(["sync"], check=True)


if __name__ == "__main__":
    raise SystemExit(main())
