"""The S3 fast path sees the network as the AWS tools do (issue 21): a store behind a TLS front
signed by a private CA (``AWS_CA_BUNDLE``, or ``ca_bundle`` in the AWS config file) and a store
whose host name only a forward proxy can resolve (``HTTP_PROXY``/``HTTPS_PROXY``, ``NO_PROXY``).
Save, restore and restore-keys each run as a real ``python -m gpuci`` process.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cache"))

from hostile_s3 import new_s3_bucket, run_measured, run_s3
from hostile_s3 import s3_cli_env as _env
from net_fronts import ForwardProxy, TLSFront, make_ca
from treeutil import snapshot

from gpuci_testing import REPO

# Resolves nowhere but in the proxy (".invalid"); "localhost" first: moto reads it path-style.
PROXIED = "localhost-gpuci-proxied.invalid"

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def _tree(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "a.txt").write_bytes(b"hello\n")
    (root / "w.bin").write_bytes(os.urandom(200_000))
    return root


def _round_trip(endpoint: str, bucket: str, env: dict[str, str], tmp_path: Path) -> None:
    """save k-1, restore it, then find it by restore-keys: all exit 0, trees equal."""
    src = _tree(tmp_path / "src")
    saved = run_s3("save", bucket, endpoint, env, "--key", "k-1", "--path", str(src))
    assert saved.code == 0, saved.output
    for i, extra in enumerate((["--key", "k-1"], ["--key", "k-2", "--restore-keys", "k-"])):
        out = tmp_path / f"out{i}"
        got = run_s3("restore", bucket, endpoint, env, *extra, "--path", str(out))
        assert got.code == 0, got.output
        assert "cache-hit: true" in got.output or "matched-key: k-1" in got.output, got.output
        assert snapshot(out) == snapshot(src)


def test_a_private_ca_named_by_aws_ca_bundle(moto_endpoint, tmp_path):
    ca, cert, key = make_ca(tmp_path / "pki")
    host, port = moto_endpoint.removeprefix("http://").split(":")
    with TLSFront((host, int(port)), cert, key) as front:
        endpoint = f"https://localhost:{front.port}"
        bucket = new_s3_bucket(moto_endpoint, "net-")
        _round_trip(endpoint, bucket, _env(tmp_path, AWS_CA_BUNDLE=str(ca)), tmp_path)
        # The AWS config file's ca_bundle, for the active profile, counts the same.
        config = tmp_path / "aws-config"
        config.write_text(f"[profile ci]\nca_bundle = {ca}\n[default]\nregion = us-east-1\n")
        env = _env(tmp_path, AWS_CONFIG_FILE=str(config), AWS_PROFILE="ci")
        args = ["--key", "k-1", "--path"]
        got = run_s3("restore", bucket, endpoint, env, *args, str(tmp_path / "o"))
        assert got.code == 0, got.output
        # Without the bundle: one line naming the certificate problem, exit 3.
        bare = run_s3("restore", bucket, endpoint, _env(tmp_path), *args, str(tmp_path / "bare"))
    assert bare.code == 3, bare.output
    assert "certificate" in bare.output.lower() and "AWS_CA_BUNDLE" in bare.output
    assert "Traceback" not in bare.output
    assert not (tmp_path / "bare").exists()


def test_a_store_only_a_forward_proxy_can_reach(moto_endpoint, tmp_path):
    port = moto_endpoint.rsplit(":", 1)[1]
    with ForwardProxy({PROXIED: "127.0.0.1"}) as proxy:
        bucket = new_s3_bucket(moto_endpoint, "net-")
        env = _env(tmp_path, HTTP_PROXY=proxy.url, NO_PROXY="example.org")
        _round_trip(f"http://{PROXIED}:{port}", bucket, env, tmp_path)
    # The fast path itself went through the proxy, in absolute form (not only boto3's save).
    assert any(seen.startswith(f"GET http://{PROXIED}:{port}/") for seen in proxy.seen)
    assert any("/refs/" in seen for seen in proxy.seen)


def test_https_through_a_proxy_tunnel(moto_endpoint, tmp_path):
    ca, cert, key = make_ca(tmp_path / "pki", names=(PROXIED,))
    host, port = moto_endpoint.removeprefix("http://").split(":")
    front = TLSFront((host, int(port)), cert, key)
    with front, ForwardProxy({PROXIED: "127.0.0.1"}) as proxy:
        env = _env(tmp_path, https_proxy=proxy.url, AWS_CA_BUNDLE=str(ca))
        _round_trip(
            f"https://{PROXIED}:{front.port}", new_s3_bucket(moto_endpoint, "net-"), env, tmp_path
        )
    assert f"CONNECT {PROXIED}:{front.port}" in proxy.seen


def test_no_proxy_is_honoured(moto_endpoint, tmp_path):
    with ForwardProxy({}) as proxy:
        env = _env(tmp_path, HTTP_PROXY=proxy.url, no_proxy="localhost,127.0.0.1")
        _round_trip(moto_endpoint, new_s3_bucket(moto_endpoint, "net-"), env, tmp_path)
    assert proxy.seen == []


def _trickling_connect_proxy() -> tuple[str, socket.socket]:
    """A forward proxy that answers CONNECT "200", then a header line every 0.2 s, for ever: each
    ``recv`` is inside any timeout, so only a deadline on the whole exchange ends it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def one(conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n")
            while True:
                conn.sendall(b"X-Pad: 1\r\n")
                time.sleep(0.2)

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                threading.Thread(target=one, args=(server.accept()[0],), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return f"http://127.0.0.1:{server.getsockname()[1]}", server


def test_a_proxy_trickling_its_answer_to_connect_ends_the_step_in_one_line(tmp_path):
    proxy, server = _trickling_connect_proxy()
    try:
        env = _env(tmp_path, HTTPS_PROXY=proxy, GPUCI_S3_TIMEOUT="1")
        args = ["cache-weights", "restore", "--store", "s3://bucket/c", "--key", "k"]
        args += ["--endpoint-url", f"https://{PROXIED}:443", "--path", str(tmp_path / "out")]
        run = run_measured(args, env, REPO, timeout=120)  # it used to run for ever
    finally:
        server.close()
    assert run.code == 3, run.output
    assert "did not answer in time" in run.output and "Traceback" not in run.output, run.output
    assert not (tmp_path / "out").exists()
