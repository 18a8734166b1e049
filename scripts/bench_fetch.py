#!/usr/bin/env python3
"""Benchmark retry-fetch against ``curl --retry 5 -C -`` on loopback (a script, not a test).

Measures, side by side on one random file served by the tests' faulty server (in its own
process, so it never shares a GIL with the client):

* throughput of a clean download (median of ``--repeat`` runs, fresh output file each time);
* total bytes the server sent when the connection drops once at 50% and at 90%.

gpu-ci is timed through its Python API (the read path itself) and through the CLI (adds the
interpreter start). ``--small`` runs a 64 MiB file, seconds long, for a CI smoke. Prints a
markdown table; ``--json FILE`` also writes the figures.

    python scripts/bench_fetch.py            # 1 GiB
    python scripts/bench_fetch.py --small
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "fetch"))
sys.path.insert(0, str(ROOT / "tests"))  # fetch_server builds on loopback_http
sys.path.insert(0, str(ROOT / "src"))

from fetch_server import Fault, FaultyServer  # noqa: E402

from gpuci.fetch import FetchPolicy, fetch_file  # noqa: E402

MiB = 1 << 20


def serve(conn, source: str) -> None:
    """Child process: run the server, answer control messages until told to stop."""
    with FaultyServer() as srv:
        srv.add("/blob", file=Path(source))
        conn.send(srv.url("/blob"))
        while True:
            msg = conn.recv()
            if msg[0] == "fault":
                srv.faults("/blob", msg[1])
                conn.send(True)
            elif msg[0] == "served":
                conn.send(srv.served())
            else:
                conn.send(True)
                return


class Remote:
    def __init__(self, source: Path) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=serve, args=(child, str(source)), daemon=True)
        self.proc.start()
        self.url: str = self.conn.recv()

    def ask(self, *msg):
        self.conn.send(msg)
        return self.conn.recv()

    def close(self) -> None:
        self.ask("stop")
        self.proc.join(10)


def make_source(path: Path, size: int) -> str:
    hasher = hashlib.sha256()
    with open(path, "wb") as handle:
        left = size
        while left:
            block = os.urandom(min(16 * MiB, left))
            handle.write(block)
            hasher.update(block)
            left -= len(block)
    return hasher.hexdigest()


def fresh(path: Path) -> None:
    """Remove earlier output and flush dirty pages, so each run starts from the same state."""
    for p in path.parent.glob(path.name + "*"):
        p.unlink()
    os.sync()


def run_curl(url: str, out: Path, extra: list[str]) -> tuple[float, int]:
    started = time.monotonic()
    proc = subprocess.run(
        ["curl", "-sS", "--retry", "5", "-C", "-", *extra, "-o", str(out), url],
        capture_output=True,
        timeout=600,
    )
    return time.monotonic() - started, proc.returncode


def run_api(url: str, out: Path, sha: str) -> tuple[float, int]:
    policy = FetchPolicy(attempts=5, timeout=30, deadline=600, max_wait=1, initial_wait=0.1)
    started = time.monotonic()
    fetch_file(url, out, sha, policy=policy)
    return time.monotonic() - started, 0


def run_cli(url: str, out: Path, sha: str) -> tuple[float, int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("GITHUB_ACTIONS", None)
    cmd = [sys.executable, "-m", "gpuci", "retry-fetch", "--url", url, "--dest", str(out)]
    cmd += ["--sha256", sha, "--max-wait", "1s", "--json"]
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, timeout=600)
    return time.monotonic() - started, proc.returncode


def verify(out: Path, sha: str) -> bool:
    if not out.is_file():
        return False
    hasher = hashlib.sha256()
    with open(out, "rb") as handle:
        while block := handle.read(16 * MiB):
            hasher.update(block)
    return hasher.hexdigest() == sha


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="64 MiB, for a CI smoke")
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3, help="clean runs per tool (median)")
    parser.add_argument("--dir", type=Path, help="work folder (default: a temporary one)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if shutil.which("curl") is None:
        print("curl is not installed: nothing to compare against", file=sys.stderr)
        return 2
    size = (64 if args.small else args.size_mib) * MiB
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-fetch-"))
    work.mkdir(parents=True, exist_ok=True)
    source, out = work / "source.bin", work / "out.bin"
    print(f"making a {size // MiB} MiB random file in {work} ...", file=sys.stderr)
    sha = make_source(source, size)
    server = Remote(source)
    figures: dict[str, object] = {"size_bytes": size, "repeat": args.repeat}
    try:
        tools = {
            "curl": lambda: run_curl(server.url, out, []),
            "gpuci (API)": lambda: run_api(server.url, out, sha),
            "gpuci (CLI)": lambda: run_cli(server.url, out, sha),
        }
        times: dict[str, list[float]] = {name: [] for name in tools}
        for _ in range(args.repeat):  # interleaved, so drift hits every tool alike
            for name, call in tools.items():
                fresh(out)
                seconds, code = call()
                if code != 0 or not verify(out, sha):
                    raise SystemExit(f"{name} failed a clean download (exit {code})")
                times[name].append(seconds)
        rate = {n: size / MiB / statistics.median(t) for n, t in times.items()}
        figures["throughput_mib_s"] = rate
        figures["seconds"] = times

        drops: dict[str, dict[str, object]] = {}
        for pct in (50, 90):
            for name, call in (
                ("curl --retry 5 -C -", lambda: run_curl(server.url, out, [])),
                (
                    "curl --retry 5 -C - --retry-all-errors",
                    lambda: run_curl(server.url, out, ["--retry-all-errors"]),
                ),
                ("gpuci (API)", lambda: run_api(server.url, out, sha)),
            ):
                fresh(out)
                server.ask("fault", Fault(drop_after=size * pct // 100))
                before = server.ask("served")
                try:
                    _, code = call()
                except Exception as exc:  # a failed download is a figure here, not a crash
                    print(f"{name}: {exc}", file=sys.stderr)
                    code = -1
                served = server.ask("served") - before
                drops[f"{name} @ {pct}%"] = {
                    "served_bytes": served,
                    "ratio": served / size,
                    "exit": code,
                    "complete": verify(out, sha),
                }
        figures["drops"] = drops
    finally:
        server.close()
        fresh(out)
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)

    curl_rate = rate["curl"]
    lines = [
        f"File: {size // MiB} MiB over loopback, median of {args.repeat} clean runs each.",
        "",
        "| tool | MiB/s | vs curl |",
        "|---|---|---|",
    ]
    lines += [f"| {n} | {r:.0f} | {r / curl_rate:.2f}x |" for n, r in rate.items()]
    lines += [
        "",
        "| connection dropped once | bytes served | x file size | complete |",
        "|---|---|---|---|",
    ]
    for name, d in drops.items():
        state = "yes" if d["complete"] else f"no (exit {d['exit']})"
        lines.append(f"| {name} | {d['served_bytes']:,} | {d['ratio']:.3f} | {state} |")
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
