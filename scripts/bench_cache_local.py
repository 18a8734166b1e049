#!/usr/bin/env python3
"""Benchmark a warm restore from the runner-local tier, in each trust mode, against ``cp -a``.

Self-hosted runners keep their disks, so the second job on a runner should pay little for a
cache hit. This saves a tree (default: 3 x 320 MiB plus 1024 x 64 KiB, 1 GiB in all) into a
file store with the local tier on, then times, alternately, ``python -m gpuci cache-weights
restore --local-cache-mode MODE`` (the whole CLI, interpreter start included) into a fresh
folder for each mode, and ``cp -a`` of the tree into a fresh folder. ``copy`` (the default)
reflinks where the filesystem can and copies elsewhere, ``verify`` also hashes what it places,
``link`` hardlinks every file without exec bits (single-tenant runners only; docs/security.md).

``--stores file,s3`` also times the same restores against an S3 store at a custom endpoint
(``--endpoint-url``, as for MinIO, R2 or SeaweedFS; npm s3rver on 127.0.0.1 here): every file
still comes from the tier, but the ref and the manifest come from S3, so this is the start-up
cost of the S3 path (imports, credentials, signing) on top of the placement.

    python scripts/bench_cache_local.py                              # 1 GiB mixed, 3 runs
    python scripts/bench_cache_local.py --stores file,s3 --modes copy,link
    python scripts/bench_cache_local.py --stores s3 --wan 16,30       # S3 30 ms away

``--wan RATE_MIB_PER_CONN,LATENCY_MS`` puts scripts/wanproxy.py between the timed restores and
the S3 store, so each of the hit's requests (ref, manifest, the last-use record) pays the
latency of a remote store.
    python scripts/bench_cache_local.py --workdir /mnt/xfs/bench     # on a reflink filesystem
    python scripts/bench_cache_local.py --size 16MiB --small 64 --runs 1   # quick

``--also-src DIR`` times a second gpu-ci source tree in the same run (e.g. ``git worktree add
--detach /tmp/main main`` then ``--also-src /tmp/main/src``), its rows marked ``[other]``: on a
shared machine, before and after are only comparable side by side. The CPU column is the
command's user + system seconds (its children's rusage), which another process's load inflates
less than the wall time.

Run it alone; the cold-restore benchmark against S3 is scripts/bench_cache.py.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "scripts"))

import bench_cache  # noqa: E402

from gpuci.cache._stores.tier_open import parse_size  # noqa: E402
from gpuci.units import human_bytes  # noqa: E402


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


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str, float]:
    """(wall seconds, stdout, CPU seconds: user + system) of one command."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - used.ru_utime + after.ru_stime - used.ru_stime
    return wall, done.stdout, cpu


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
        "--stores",
        default="file",
        help="comma-separated: file, s3 (s3rver at --endpoint-url), seaweedfs (SeaweedFS named "
        "by AWS_ENDPOINT_URL, as a job using MinIO or R2 would) (default file)",
    )
    parser.add_argument("--s3rver", default=str(REPO / ".bench/node/node_modules/.bin/s3rver"))
    parser.add_argument("--json", help="also write every run's figures to this file")
    parser.add_argument(
        "--wan",
        metavar="RATE_MIB_PER_CONN,LATENCY_MS",
        help="timed S3 restores through scripts/wanproxy.py (e.g. 16,30)",
    )
    parser.add_argument(
        "--also-src",
        metavar="DIR",
        help="also time the gpu-ci in this src folder (e.g. a worktree of main), in the same run",
    )
    args = parser.parse_args()
    size = parse_size(args.size, "--size")
    small_size = parse_size(args.small_size, "--small-size")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    kinds = [k.strip() for k in args.stores.split(",") if k.strip()]
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    tree, tier = work / "tree", work / "tier"
    make_tree(tree, args.count, size, args.small, small_size)
    total = args.count * size + args.small * small_size
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "INPUT_", "AWS_"))},
        "PYTHONPATH": str(REPO / "src"),
        "GPUCI_JOURNAL": str(work / "journal.jsonl"),
        "GPUCI_LOCAL_CACHE": str(tier),
    }
    env.pop("GPUCI_STORE", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # cached bytecode, as on a runner after one call
    server = proxy = None
    stores: dict[str, list[str]] = {}
    timed_stores: dict[str, list[str]] = {}
    envs: dict[str, dict[str, str]] = {}  # a store kind's own environment, where it needs one
    weed = None
    if "file" in kinds:
        stores["file"] = ["--store", (work / "store").as_uri()]
    if "s3" in kinds:
        server, endpoint = bench_cache.start_s3rver(Path(args.s3rver), work, "bench")
        env.update(bench_cache.CREDS)
        stores["s3"] = ["--store", "s3://bench/local", "--endpoint-url", endpoint]
        if args.wan:
            rate, latency = bench_cache.wanproxy.parse_wan(args.wan)
            host, port = endpoint.rsplit("/", 1)[1].rsplit(":", 1)
            proxy = bench_cache.wanproxy.ProxyProcess((host, int(port)), rate, latency)
            far = f"http://127.0.0.1:{proxy.port}"
            timed_stores["s3"] = ["--store", "s3://bench/local", "--endpoint-url", far]
    if "seaweedfs" in kinds:
        weed, envs["seaweedfs"] = _seaweedfs(work / "seaweedfs", env)
        stores["seaweedfs"] = ["--store", "s3://bench/local"]
    gpuci = [sys.executable, "-m", "gpuci", "cache-weights"]
    common = ["--key", "bench-local", "--local-cache-size", "0"]
    srcs = {"this": str(REPO / "src")}
    if args.also_src:
        srcs["other"] = str(Path(args.also_src).resolve())
    rows = [(kind, mode, src) for kind in stores for mode in modes for src in srcs]
    far_label = f" (remote-like {args.wan})" if args.wan else ""
    label = {
        row: f"{row[0]} store{far_label if row[0] == 's3' else ''}, --local-cache-mode {row[1]}"
        + (f" [{row[2]}]" if len(srcs) > 1 else "")
        for row in rows
    }
    walls: dict[object, list[float]] = {row: [] for row in [*rows, "cp -a"]}
    cpus: dict[object, list[float]] = {row: [] for row in [*rows, "cp -a"]}
    inner: dict[object, list[float]] = {row: [] for row in rows}
    placed: dict[object, dict[str, int]] = {}
    try:
        for kind, where in stores.items():
            subprocess.run(
                [*gpuci, "save", *common, *where, "--path", str(tree)],
                env=envs.get(kind, env),
                check=True,
                stdout=subprocess.DEVNULL,
            )
            warm = work / "warm-up"  # fills the tier from this store if save did not
            subprocess.run(
                [*gpuci, "restore", *common, *where, "--path", str(warm)],
                env=envs.get(kind, env),
                check=True,
                stdout=subprocess.DEVNULL,
            )
            _remove(warm)
        subprocess.run(["sync"], check=True)
        for run in range(args.runs):
            for row in rows:
                kind, mode, src = row
                dest = work / f"restore-{kind}-{mode}-{src}-{run}"
                where = timed_stores.get(kind, stores[kind])
                cmd = [*gpuci, "restore", *common, *where, "--local-cache-mode", mode]
                own_env = {**envs.get(kind, env), "PYTHONPATH": srcs[src]}
                wall, out, cpu = timed([*cmd, "--json", "--path", str(dest)], own_env)
                report = json.loads(out)
                outputs = report["outputs"]
                assert int(outputs["bytes-from-local"]) == total, outputs
                walls[row].append(wall)
                cpus[row].append(cpu)
                inner[row].append(float(outputs["seconds"]))
                placed[row] = report.get("report", {}).get("placed", {})
                _remove(dest)
            copy = work / f"copy-{run}"
            wall, _, cpu = timed(["cp", "-a", str(tree), str(copy)], env)
            walls["cp -a"].append(wall)
            cpus["cp -a"].append(cpu)
            _remove(copy)
    finally:
        if proxy is not None:
            proxy.close()
        if server is not None:
            server.terminate()
            server.wait(10)
        if weed is not None:
            weed.stop()
    c = statistics.median(walls["cp -a"])
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"tree: {args.count} x {human_bytes(size)} + {args.small} x {human_bytes(small_size)}"
        f" = {human_bytes(total)}, {args.runs} runs each, median (min-max), in {work};"
        f" load average at the end {load} on {os.cpu_count()} CPUs"
    )
    print(
        "| restore (whole CLI) | placed | seconds | vs cp -a | CPU s | "
        "restore itself (output seconds) |"
    )
    print("|---|---|---|---|---|---|")
    figures = []
    for row, times in walls.items():
        r = statistics.median(times)
        how = ", ".join(f"{k} {v}" for k, v in sorted(placed.get(row, {}).items())) or "-"
        own = f"{statistics.median(inner[row]):.3f}" if row in inner else "-"
        name = label.get(row, "cp -a")  # type: ignore[arg-type]
        span = f"{r:.3f} ({min(times):.3f}-{max(times):.3f})"
        cpu = statistics.median(cpus[row])
        print(f"| {name} | {how} | {span} | {r / c:.2f}x | {cpu:.3f} | {own} |")
        figures.append(
            {
                "row": name,
                "seconds": times,
                "cpu": cpus[row],
                "inner": inner.get(row),
                "placed": placed.get(row),
            }
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"bytes": total, "rows": figures}, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


def _seaweedfs(root: Path, env: dict[str, str]) -> tuple[object, dict[str, str]]:
    """Start SeaweedFS with a ``bench`` bucket; (server, env naming it by AWS_ENDPOINT_URL)."""
    sys.path.insert(0, str(REPO / "scripts"))
    import boto3
    import seaweedfs

    server = seaweedfs.SeaweedFS(root)
    endpoint = server.start()
    access, secret = seaweedfs.ADMIN
    own = {
        **{k: v for k, v in env.items() if not k.startswith("AWS_")},
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": access,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        region_name="us-east-1",
    ).create_bucket(Bucket="bench")
    return server, own


def _remove(path: Path) -> None:
    """Delete a restored tree (link mode leaves read-only files) and flush the writes."""
    for item in path.rglob("*"):
        if item.is_file():
            item.chmod(0o644)
    shutil.rmtree(path)
    subprocess.run(["sync"], check=True)


if __name__ == "__main__":
    raise SystemExit(main())
