"""A small smoke of the benchmark scripts: they run end to end and their exact rows hold.

Benchmarks are not timed tests: throughput figures are printed, never asserted. What is
asserted is what a run can't get wrong by noise: bytes served after a dropped connection, and
the shaping proxy's floors (it may be slower than asked on a busy machine, never faster).
"""

import hashlib
import json
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from gpuci_testing import REPO, clean_env

sys.path.insert(0, str(REPO / "scripts"))
import bench_cache
import wanproxy


def run_script(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """A benchmark script run from the repository root in a clean environment, output kept."""
    return subprocess.run(
        cmd,
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed here")
def test_bench_fetch_small(tmp_path):
    out = tmp_path / "fetch.json"
    proc = run_script(
        [
            sys.executable,
            "scripts/bench_fetch.py",
            "--small",
            "--repeat",
            "1",
            "--dir",
            str(tmp_path / "work"),
            "--json",
            str(out),
        ],
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    figures = json.loads(out.read_text())
    assert "| gpuci (API) |" in proc.stdout and "vs curl" in proc.stdout
    size = figures["size_bytes"]
    for pct in (50, 90):
        ours = figures["drops"][f"gpuci (API) @ {pct}%"]
        assert ours["complete"] is True
        # Resumed, not started over (that would serve size + the dropped share). Not "exactly
        # size": when the segmenter cuts a connection's range short, bytes the server already
        # wrote into its socket are lost, more of them the busier the machine.
        assert size <= ours["served_bytes"] < size + size * pct // 100


S3RVER = REPO / ".bench" / "node" / "node_modules" / ".bin" / "s3rver"


@pytest.mark.skipif(
    not S3RVER.exists(),
    reason="s3rver is not installed (npm install --prefix .bench/node s3rver; .ci/run does)",
)
def test_bench_cache_small(tmp_path):
    out = tmp_path / "cache.md"
    proc = run_script(
        [
            sys.executable,
            "scripts/bench_cache.py",
            "--small",
            *("--variants", "default"),  # the wan smoke runs every gpu-ci row
            # aws rows: the any-URL smoke runs them, on its small shape (its client is a
            # Python start a call, seconds of CPU on these shapes)
            *("--tools", "gpu-ci,s5cmd,tar"),
            "--workdir",
            str(tmp_path / "w"),
            "--out",
            str(out),
        ],
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = out.read_text()
    for shape in ("4 x 8 MiB = 32 MiB", "200 x 100 KiB = 19.5 MiB"):
        for op in ("cold restore", "save (whole tree, fresh prefix)"):
            section = table.split(f"{op}, {shape}\n\n", 1)[1].split("\n\n", 1)[0]
            assert "| gpu-ci " in section and "| s5cmd cp | " in section, section
            assert "failed" not in section, section  # every tool moved every byte
    rows = dict(
        (cells[1].strip(), cells[2].strip())
        for cells in (line.split("|") for line in table.splitlines())
        if len(cells) == 4
    )
    # the incremental save moves the one changed file and a few KiB of metadata, nothing more
    changed = int(rows["of which file data"].split()[0].replace(",", ""))
    second = int(rows["second save uploaded"].replace(",", ""))
    assert changed == 1_048_576
    assert changed < second < changed + 16_384


class _Responder(threading.Thread):
    """Answers every line a client sends with ``size`` bytes of ``body``: an upstream for the
    proxy whose responses are easy to count."""

    def __init__(self, body: bytes) -> None:
        super().__init__(daemon=True)
        self.body = body
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.address = self.sock.getsockname()

    def run(self) -> None:
        conn, _ = self.sock.accept()
        with conn, conn.makefile("rb") as lines:
            for _ in lines:
                conn.sendall(self.body)


def _exchange(conn: socket.socket, size: int) -> tuple[float, float, bytes]:
    """Ask once; (seconds to the first byte, seconds to the last, the bytes)."""
    asked = time.monotonic()
    conn.sendall(b"GET\n")
    got, first = bytearray(), 0.0
    while len(got) < size:
        chunk = conn.recv(1 << 20)
        assert chunk, "the proxy closed the connection early"
        first = first or time.monotonic() - asked
        got += chunk
    return first, time.monotonic() - asked, bytes(got)


def test_wanproxy_paces_each_connection_and_delays_every_response():
    body = bytes(range(256)) * 4096 * 3  # 3 MiB
    upstream = _Responder(body)
    upstream.start()
    rate_mib, latency_ms = 8, 150
    with wanproxy.ShapingProxy(upstream.address, rate_mib, latency_ms) as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port)) as conn:
            for _ in range(2):  # every response on a kept-alive connection waits, not the first
                first, total, got = _exchange(conn, len(body))
                assert hashlib.sha256(got).digest() == hashlib.sha256(body).digest()
                assert first >= latency_ms / 1000 * 0.95
                # paced: 3 MiB at 8 MiB/s takes >= 0.375 s, less one chunk sent at once
                assert total >= (len(body) - wanproxy.CHUNK) / (rate_mib << 20) * 0.95
        stats = proxy.stats.snapshot()
    assert stats["connections"] == 1 and stats["peak"] == 1
    assert stats["down_bytes"] == 2 * len(body) and stats["up_bytes"] == 8


def test_wanproxy_counts_every_byte_its_client_already_read(monkeypatch):
    """A pump counts a forward after it returns, and the client may have read those bytes
    long before that on a busy machine: a snapshot waits for the pump (else the count read
    short, as the fetch bench's server count did in fresh62)."""
    body = bytes(range(256)) * 400
    upstream = _Responder(body)
    upstream.start()
    sent, release = [0], threading.Event()
    forward = wanproxy._Link._forward

    def late(read_end: int, dst: socket.socket, count: int) -> int:
        moved = forward(read_end, dst, count)
        if dst.getpeername() == mine:  # toward the client: held once all of it went
            sent[0] += moved
            if sent[0] == len(body):
                release.wait(60)
        return moved

    monkeypatch.setattr(wanproxy._Link, "_forward", staticmethod(late))
    read: list[dict[str, int]] = []
    with (
        wanproxy.ShapingProxy(upstream.address, 0, 0) as proxy,  # no pacing, no latency
        socket.create_connection(("127.0.0.1", proxy.port)) as conn,
    ):
        mine = conn.getsockname()
        assert _exchange(conn, len(body))[2] == body
        reader = threading.Thread(target=lambda: read.append(proxy.stats.snapshot()))
        reader.start()
        reader.join(0.5)  # it waits for the held forward
        release.set()
        reader.join(60)
    assert read[0]["down_bytes"] == len(body) and read[0]["up_bytes"] == 4


def test_wanproxy_parse_wan_refuses_nonsense():
    assert wanproxy.parse_wan("16,30") == (16.0, 30.0)
    for bad in ("16", "a,b", "-1,30", "16,30,1"):
        with pytest.raises(ValueError, match="--wan"):
            wanproxy.parse_wan(bad)


@pytest.mark.skipif(
    not S3RVER.exists(),
    reason="s3rver is not installed (npm install --prefix .bench/node s3rver; .ci/run does)",
)
@pytest.mark.parametrize(
    ("harness", "shape"),
    [
        ("wanproxy", "m"),  # --wan's default shape, at its --small size
        # cpuproxy copies every byte through Python: a smaller shape, the same rows
        ("cpuproxy", "2x1MiB+4x4KiB"),
    ],
)
def test_bench_cache_small_wan(tmp_path, harness, shape):
    """Both shaping harnesses carry every tool (cpuproxy copies bytes in user space); every
    gpu-ci row once, through wanproxy (the rows differ in gpu-ci's settings, not the proxy's).
    The incremental table is the loopback smoke's."""
    out, figures = tmp_path / "cache.md", tmp_path / "cache.json"
    every_row = harness == "wanproxy"
    proc = run_script(
        [
            *(sys.executable, "scripts/bench_cache.py", "--small", "--wan", "64,5"),
            *("--harness", harness, "--variants", "all" if every_row else "default"),
            *("--tools", "gpu-ci,s5cmd", "--workers", "16", "--no-incremental"),
            *(() if shape == "m" else ("--shapes", shape)),
            *("--workdir", str(tmp_path / "w"), "--out", str(out), "--json", str(figures)),
        ],
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = out.read_text()
    assert "remote-like: 64 MiB/s per connection, 5 ms" in table
    assert f"(scripts/{harness}.py)" in table
    described = {
        "m": "4 x 8 MiB + 30 x 32 KiB = 32.9 MiB",
        "2x1MiB+4x4KiB": "2 x 1 MiB + 4 x 4 KiB = 2.0 MiB",
    }[shape]
    assert f"cold restore, {described}" in table
    assert "incremental save" not in table
    tuned = "| gpu-ci restore (sha256), tier off, GPUCI_CACHE_WORKERS=16 |"
    assert (tuned in table) == every_row
    data = json.loads(figures.read_text())["shapes"]["m" if shape == "m" else "s0"]
    for op in ("restore", "save"):
        rows = {row["tool"]: row for row in data[op]}
        default = f"gpu-ci {op} (sha256), default, self-hosted (tier on, fresh)"
        others = {
            f"gpu-ci {op} (sha256), default, self-hosted, credentials from a profile",
            f"gpu-ci {op} (sha256), default, self-hosted, credentials from credential_process",
            f"gpu-ci {op} (sha256), default, GitHub-hosted",
            f"gpu-ci {op} (sha256), GPUCI_LOCAL_CACHE=off",
            f"gpu-ci {op} (sha256), tier off, GPUCI_CACHE_WORKERS=16",
        }
        assert next(iter(rows)) == default  # the default path first, as each runner kind gets it
        assert set(rows) == {default, "s5cmd cp", *(others if every_row else ())}
        for row in rows.values():
            assert not row["error"] and len(row["seconds"]) == 1
            assert row["connections"][0] >= 1  # every tool went through the proxy
            assert row["rss"][0] > 0


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed here")
def test_bench_fetch_small_wan(tmp_path):
    out = tmp_path / "fetch.json"
    proc = run_script(
        [
            *(sys.executable, "scripts/bench_fetch.py", "--wan", "64,5", "--size-mib", "8"),
            *("--repeat", "1", "--dir", str(tmp_path / "work"), "--json", str(out)),
        ],
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    figures = json.loads(out.read_text())
    assert figures["wan"] == [64.0, 5.0] and "drops" not in figures
    assert "over a remote-like link (64 MiB/s per connection" in proc.stdout
    aria = "aria2c -x8 -s8"
    if shutil.which("aria2c"):
        assert aria in figures["throughput_mib_s"]
    else:
        assert f"| {aria} | not installed |" in proc.stdout
    # at most 64 MiB/s on one connection: curl and gpu-ci cannot beat the link
    for tool in ("curl", "gpuci (API)"):
        assert figures["throughput_mib_s"][tool] <= 64 * 1.05


def test_bench_cache_against_any_s3_url_leaves_nothing_behind(tmp_path):
    """``--server URL``: the caller's credentials, a fresh prefix, and all of it deleted after
    (a shared endpoint keeps no benchmark data)."""
    import boto3

    from moto_s3 import FAKE_S3_CREDENTIALS, moto_server

    out = tmp_path / "cache.md"
    tools = "gpu-ci,s5cmd,aws"  # the smokes' aws rows: this one's shape is the smallest
    with moto_server() as endpoint:
        proc = subprocess.run(
            [
                *(sys.executable, "scripts/bench_cache.py", "--server", endpoint, "--small"),
                *("--shapes", "2x1MiB+4x4KiB", "--tools", tools, "--bucket", "mine"),
                *("--workdir", str(tmp_path / "w"), "--out", str(out), "--no-incremental"),
            ],
            cwd=REPO,
            env=clean_env(**FAKE_S3_CREDENTIALS),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        s3 = boto3.client("s3", endpoint_url=endpoint, **_boto_creds(FAKE_S3_CREDENTIALS))
        left = s3.list_objects_v2(Bucket="mine").get("KeyCount")
    table = out.read_text()
    assert f"Regime: loopback: {endpoint};" in table
    assert "cold restore, 2 x 1 MiB + 4 x 4 KiB = 2.0 MiB" in table
    assert "| gpu-ci restore (sha256), default, self-hosted (tier on, fresh) |" in table
    assert "| s5cmd cp |" in table
    if bench_cache.aws_binary():
        assert "| aws s3 cp --recursive |" in table
    else:
        assert "aws is not installed: its rows are left out" in proc.stdout
    assert "failed" not in table
    assert left == 0


def _boto_creds(env: dict[str, str]) -> dict[str, str]:
    return {
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
        "region_name": env["AWS_DEFAULT_REGION"],
    }


def test_bench_write_path_small(tmp_path):
    # Every way of landing bytes runs end to end (4 x 8 MiB); the figures are printed only.
    small = ["--rounds", "1", "--file-size", str(8 << 20), "--workdir", str(tmp_path)]
    proc = run_script(
        [sys.executable, "scripts/bench_write_path.py", *small],
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("copy-4M", "copy-256K", "splice-pread", "splice-mmap"):
        assert f"| {name} |" in proc.stdout


def test_bench_startup_small(tmp_path):
    # The tier-hit start-up benchmark runs end to end on a file store; its times are printed
    # only (tests/cache/test_startup.py checks what such a restore imports).
    out = tmp_path / "startup.json"
    proc = run_script(
        [sys.executable, "scripts/bench_startup.py", "--runs", "1", "--json", str(out)],
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tier-hit restore, file store: median wall" in proc.stdout
    (row,) = json.loads(out.read_text())
    assert row["store"] == "file" and row["wall_ms"] > 0 and row["cpu_ms"] > 0
