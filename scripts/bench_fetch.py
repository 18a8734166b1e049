#!/usr/bin/env python3
"""Benchmark retry-fetch against curl and aria2c, on loopback or a remote-like link (a script).

Measures, side by side on one random file served by the tests' faulty server (in its own
process, so it never shares a GIL with the client; it honours ``Range`` with a strong ETag):

* throughput of a clean download (median of ``--repeat`` runs, tools interleaved in a shuffled
  order, fresh output file each time) with ``curl``, gpu-ci and ``aria2c -x8 -s8`` (eight
  ranged connections per file; a missing aria2c reads "not installed");
* total bytes the server sent when the connection drops once at 50% and at 90% (loopback only).

gpu-ci is timed through its Python API (the read path itself) and through the CLI (adds the
interpreter start). ``--wan RATE_MIB_PER_CONN,LATENCY_MS`` puts scripts/wanproxy.py between
the server and every client (each connection gets RATE MiB/s, each response's first byte waits
LATENCY ms, as from a hub or CDN), where one connection per file is the ceiling.
``--small`` runs a 64 MiB file, seconds long, for a CI smoke. ``--before SRC`` adds a row for
another checkout's ``src/`` (e.g. ``git worktree add /tmp/main main``, then ``--before
/tmp/main/src``), through the CLI like the "gpuci (CLI)" row, so a change is measured against
what it replaces in the same run. The load average (``/proc/loadavg``, as ``uptime`` shows it)
is printed before and after the clean runs: on a shared machine, read ratios beside it. Prints
a markdown table; ``--json FILE`` also writes the figures.

    python scripts/bench_fetch.py                    # 1 GiB on loopback
    python scripts/bench_fetch.py --wan 16,30        # 256 MiB, remote-like
    python scripts/bench_fetch.py --small
    python scripts/bench_fetch.py --wan 16,30 --repeat 2 --before /tmp/main/src
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "fetch"))
sys.path.insert(0, str(ROOT / "tests"))  # fetch_server builds on loopback_http
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

import wanproxy  # noqa: E402
from bench_cache import round_orders  # noqa: E402
from fetch_server import Fault, FaultyServer  # noqa: E402

from gpuci.fetch import FetchPolicy, fetch_file  # noqa: E402
from gpuci.fetch._memory import keep_buffers_in_heap  # noqa: E402

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
        netloc = self.url.split("/")[2]
        self.address = (netloc.rsplit(":", 1)[0], int(netloc.rsplit(":", 1)[1]))

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


ARIA2C = "aria2c -x8 -s8"


def run_aria2c(url: str, out: Path) -> tuple[float, int]:
    started = time.monotonic()
    proc = subprocess.run(
        [
            *("aria2c", "-x8", "-s8", "-q", "--allow-overwrite=true"),
            *("--auto-file-renaming=false", "-d", str(out.parent), "-o", out.name, url),
        ],
        capture_output=True,
        timeout=600,
    )
    return time.monotonic() - started, proc.returncode


#: ``--connections``: passed to every gpu-ci row (None: the default); 1 times the one-connection
#: path (small files, servers without ranges), which the default file never takes.
CONNECTIONS: int | None = None


def run_api(url: str, out: Path, sha: str) -> tuple[float, int]:
    keep_buffers_in_heap()  # what the retry-fetch command does in its process (opt-in for the API)
    policy = FetchPolicy(attempts=5, timeout=30, deadline=600, max_wait=1, initial_wait=0.1)
    if CONNECTIONS is not None:
        policy = replace(policy, connections=CONNECTIONS)
    started = time.monotonic()
    fetch_file(url, out, sha, policy=policy)
    return time.monotonic() - started, 0


def run_cli(url: str, out: Path, sha: str, src: Path = ROOT / "src") -> tuple[float, int]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    env.pop("GITHUB_ACTIONS", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # cached bytecode, as on a runner after one call
    cmd = [sys.executable, "-m", "gpuci", "retry-fetch", "--url", url, "--dest", str(out)]
    cmd += ["--sha256", sha, "--max-wait", "1s", "--json"]
    if CONNECTIONS is not None:
        cmd += ["--connections", str(CONNECTIONS)]
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, timeout=600)
    return time.monotonic() - started, proc.returncode


def load_average() -> str:
    """``uptime``'s three load averages (1, 5, 15 minutes)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def verify(out: Path, sha: str) -> bool:
    if not out.is_file():
        return False
    hasher = hashlib.sha256()
    with open(out, "rb") as handle:
        while block := handle.read(16 * MiB):
            hasher.update(block)
    return hasher.hexdigest() == sha


def cpu_seconds() -> float:
    """User + system CPU of this process and its finished children: a tool's CPU is the
    difference around its run (the server runs in a child that is reaped only at the end)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def clean_runs(
    tools: dict, out: Path, sha: str, repeat: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each tool ``repeat`` times, interleaved in a shuffled order (:func:`round_orders`), so
    drift in the machine's load hits every tool alike. Returns wall and CPU seconds."""
    names = list(tools)
    times: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for run, order in enumerate(round_orders(names, repeat)):
        for name in order:
            fresh(out)
            used = cpu_seconds()
            seconds, code = tools[name]()
            used = cpu_seconds() - used
            if code != 0 or not verify(out, sha):
                raise SystemExit(f"{name} failed a clean download (exit {code})")
            times[name].append(seconds)
            cpu[name].append(used)
            print(f"  {name} run {run + 1}: {seconds:.2f}s, CPU {used:.2f}s", file=sys.stderr)
    return times, cpu


def drop_runs(server: Remote, url: str, out: Path, sha: str, size: int) -> dict[str, dict]:
    """Bytes the server wrote when the connection drops once at 50% and at 90%."""
    drops: dict[str, dict[str, object]] = {}
    for pct in (50, 90):
        for name, call in (
            ("curl --retry 5 -C -", lambda: run_curl(url, out, [])),
            (
                "curl --retry 5 -C - --retry-all-errors",
                lambda: run_curl(url, out, ["--retry-all-errors"]),
            ),
            ("gpuci (API)", lambda: run_api(url, out, sha)),
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
    return drops


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="64 MiB, for a CI smoke")
    parser.add_argument("--size-mib", type=int, help="file size (1024 on loopback, 256 --wan)")
    parser.add_argument("--repeat", type=int, default=3, help="clean runs per tool (median)")
    parser.add_argument("--dir", type=Path, help="work folder (default: a temporary one)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--before",
        type=Path,
        metavar="SRC",
        help="also time another checkout's src/ through the CLI (a 'before' row)",
    )
    parser.add_argument("--no-drops", action="store_true", help="skip the dropped-connection rows")
    parser.add_argument(
        "--connections",
        type=int,
        metavar="N",
        help="gpu-ci's most connections per file (1: the one-connection path)",
    )
    parser.add_argument(
        "--wan",
        metavar="RATE_MIB_PER_CONN,LATENCY_MS",
        help="remote-like: every client through scripts/wanproxy.py, e.g. 16,30 (no drop rows)",
    )
    args = parser.parse_args()
    global CONNECTIONS
    CONNECTIONS = args.connections
    try:
        wan = wanproxy.parse_wan(args.wan) if args.wan else None
    except ValueError as exc:
        parser.error(str(exc))
    if shutil.which("curl") is None:
        print("curl is not installed: nothing to compare against", file=sys.stderr)
        return 2
    size = (64 if args.small else args.size_mib or (256 if wan else 1024)) * MiB
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-fetch-"))
    work.mkdir(parents=True, exist_ok=True)
    source, out = work / "source.bin", work / "out.bin"
    print(f"making a {size // MiB} MiB random file in {work} ...", file=sys.stderr)
    sha = make_source(source, size)
    server = Remote(source)
    proxy = None
    url = server.url
    link = "loopback"
    if wan:
        proxy = wanproxy.ProxyProcess(server.address, *wan)
        url = server.url.replace(f":{server.address[1]}/", f":{proxy.port}/")
        link = (
            f"a remote-like link ({wan[0]:g} MiB/s per connection, {wan[1]:g} ms to each "
            "response's first byte, scripts/wanproxy.py)"
        )
    figures: dict[str, object] = {"size_bytes": size, "repeat": args.repeat, "wan": wan}
    figures["connections"] = args.connections
    drops: dict[str, dict[str, object]] = {}
    try:
        tools = {
            "curl": lambda: run_curl(url, out, []),
            "gpuci (API)": lambda: run_api(url, out, sha),
            "gpuci (CLI)": lambda: run_cli(url, out, sha),
        }
        if args.before:
            before_src = args.before.resolve()
            tools["gpuci before (CLI)"] = lambda: run_cli(url, out, sha, before_src)
        if shutil.which("aria2c"):
            tools[ARIA2C] = lambda: run_aria2c(url, out)
        load_start = load_average()
        times, cpu = clean_runs(tools, out, sha, args.repeat)
        load_end = load_average()
        figures["load_average"] = {"start": load_start, "end": load_end}
        rate = {n: size / MiB / statistics.median(t) for n, t in times.items()}
        figures["throughput_mib_s"] = rate
        figures["seconds"] = times
        figures["cpu_seconds"] = cpu
        if not wan and not args.no_drops:
            drops = drop_runs(server, url, out, sha, size)
            figures["drops"] = drops
    finally:
        if proxy:
            proxy.close()
        server.close()
        fresh(out)
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)

    curl_rate, aria_rate = rate["curl"], rate.get(ARIA2C)
    lines = [
        f"File: {size // MiB} MiB over {link}, median of {args.repeat} clean runs each, "
        f"tools interleaved; load average {load_start} before, {load_end} after"
        + (f"; gpu-ci at most {args.connections} connection(s)." if args.connections else "."),
        "",
        "| tool | seconds, median (min-max) | MiB/s | vs curl | time vs aria2c -x8 -s8 "
        "| client CPU s, median |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in rate.items():
        t = times[name]
        vs_aria = f"{aria_rate / r:.2f}x" if aria_rate else ""
        lines.append(
            f"| {name} | {statistics.median(t):.2f} ({min(t):.2f}-{max(t):.2f}) | {r:.0f} | "
            f"{r / curl_rate:.2f}x | {vs_aria} | {statistics.median(cpu[name]):.2f} |"
        )
    if not aria_rate:
        lines.append(f"| {ARIA2C} | not installed | | | | |")
    if drops:
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
