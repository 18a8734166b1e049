"""The restore data path: the stdlib SigV4 signer, O_DIRECT target files, pipelined parts.

The signer is checked against botocore's own presigner; restores run against the real moto
server (conftest), once with O_DIRECT and once buffered, and in a fresh interpreter to prove
that a restore hit never imports boto3.
"""

from __future__ import annotations

import datetime
import errno
import hashlib
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from botocore.config import Config
from cache_testing import REPO_ROOT, StoreCase, cache_cmd
from cache_testing import store_flags as _flags
from treeutil import snapshot, write_tree

from gpuci.cache import _layout as layout
from gpuci.cache._format.manifest import Entry
from gpuci.cache._stores import splicing
from gpuci.cache._stores.s3.config import resolve
from gpuci.cache._stores.s3.network import Limits
from gpuci.cache._stores.s3.pool import Pool, Ranged
from gpuci.cache._stores.s3.signer import Presigner
from gpuci.cache._transfer import directio
from gpuci.cache._transfer import download as transfer
from gpuci.cache._transfer.blob_target import BlobTarget
from gpuci.cache._transfer.receive import spliced
from gpuci.errors import InputError, IntegrityError

ENV_CREDS = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "wJalr/secret+key"}


# ----- the signer -------------------------------------------------------------------------------


def _botocore_presign(op: str, params: dict, region: str | None, token: str = "") -> str:
    """botocore's own presigned URL, path-style on a custom endpoint, as S3Store configures it."""
    client = boto3.session.Session(
        aws_access_key_id=ENV_CREDS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=ENV_CREDS["AWS_SECRET_ACCESS_KEY"],
        aws_session_token=token or None,
        region_name=region,
    ).client(
        "s3",
        endpoint_url="http://127.0.0.1:9000",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    method = "HEAD" if op == "head_object" else None
    return client.generate_presigned_url(op, Params=params, ExpiresIn=900, HttpMethod=method)


def _signer(bucket: str, endpoint: str | None, region: str | None, env: dict) -> Presigner:
    """The store's signer, credentials, region and endpoint resolved as the store does."""
    settings = resolve(bucket, endpoint, region, env, None)
    return Presigner(settings.address, settings.creds)


def _same_url(ours: str, theirs: str) -> None:
    assert urlsplit(ours).netloc == urlsplit(theirs).netloc
    assert urlsplit(ours).path == urlsplit(theirs).path
    assert parse_qs(urlsplit(ours).query) == parse_qs(urlsplit(theirs).query)  # same signature


def _when(url: str) -> datetime.datetime:
    stamp = parse_qs(urlsplit(url).query)["X-Amz-Date"][0]
    return datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ")


@pytest.mark.parametrize("method", ["GET", "PUT", "HEAD"])
def test_presigned_urls_sign_exactly_as_botocore(method):
    key = "cache/refs/default/a%2Fb c+d~é"
    op = {"GET": "get_object", "PUT": "put_object", "HEAD": "head_object"}[method]
    token = "token/with+chars="
    theirs = _botocore_presign(op, {"Bucket": "bench", "Key": key}, "eu-west-3", token)
    env = {**ENV_CREDS, "AWS_SESSION_TOKEN": token}
    presigner = _signer("bench", "http://127.0.0.1:9000", "eu-west-3", env)
    assert presigner is not None
    _same_url(presigner.url(key, 900, _when(theirs), method=method), theirs)


def test_listing_urls_sign_exactly_as_botocore():
    """ListObjectsV2 on the bucket (path-style: /bucket, the parameters signed in the query)."""
    params = {
        "Bucket": "bench",
        "Prefix": "cache/refs/default/we ights+",
        "ContinuationToken": "a/b==",
    }
    theirs = _botocore_presign("list_objects_v2", params, "eu-west-3")
    presigner = _signer("bench", "http://127.0.0.1:9000", "eu-west-3", ENV_CREDS)
    assert presigner is not None
    query = {
        "list-type": "2",
        "prefix": params["Prefix"],
        "continuation-token": params["ContinuationToken"],
        "encoding-type": "url",
    }
    _same_url(presigner.url("", 900, _when(theirs), query=query), theirs)


@pytest.mark.parametrize(
    ("method", "key", "query", "body"),
    [
        ("GET", "cache/refs/default/a%2Fb c+d~é", None, b""),
        ("HEAD", "cache/manifests/abc.json", None, b""),
        ("PUT", "cache/uses/default/k", None, b'{"used": 1}'),
        ("GET", "", {"list-type": "2", "prefix": "cache/refs/x y", "encoding-type": "url"}, b""),
    ],
)
def test_header_signed_requests_sign_exactly_as_botocore(method, key, query, body):
    """The control plane's requests carry an Authorization header, as boto3's own do."""
    from unittest import mock

    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    token = "token/with+chars="
    now = datetime.datetime(2026, 11, 30, 15, 4, 5)
    env = {**ENV_CREDS, "AWS_SESSION_TOKEN": token}
    presigner = _signer("bench", "http://127.0.0.1:9000", "eu-west-3", env)
    assert presigner is not None
    url, headers = presigner.signed(method, key, body, query, now)
    request = AWSRequest(method=method, url=url, data=body)
    creds = Credentials(ENV_CREDS["AWS_ACCESS_KEY_ID"], ENV_CREDS["AWS_SECRET_ACCESS_KEY"], token)
    signer = S3SigV4Auth(creds, "s3", "eu-west-3")
    with mock.patch("botocore.auth.get_current_datetime", return_value=now):
        signer.add_auth(request)
    assert headers["authorization"] == request.headers["Authorization"]
    assert headers["x-amz-content-sha256"] == hashlib.sha256(body).hexdigest()


def test_a_custom_endpoint_with_no_region_signs_for_us_east_1_as_botocore():
    theirs = _botocore_presign("get_object", {"Bucket": "bench", "Key": "k"}, None)
    env = {**ENV_CREDS, "AWS_CONFIG_FILE": "/dev/null"}
    presigner = _signer("bench", "http://127.0.0.1:9000", None, env)
    assert presigner is not None and presigner.region == "us-east-1"
    _same_url(presigner.url("k", 900, _when(theirs)), theirs)


def test_addresses_as_botocore_picks_them(tmp_path):
    env = {**ENV_CREDS, "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": "/dev/null"}
    ok = _signer("b", "http://127.0.0.1:9000", None, env)
    assert ok.region == "us-east-1" and ok.base_url == "http://127.0.0.1:9000/b"
    assert _signer("b", None, None, env).base_url == "https://b.s3.us-east-1.amazonaws.com"
    # No region anywhere: us-east-1, as from botocore (S3 then names the bucket's own region).
    no_region = {**ENV_CREDS, "AWS_CONFIG_FILE": "/dev/null"}
    assert _signer("b", "http://h:1", None, no_region).region == "us-east-1"
    config = tmp_path / "config"
    config.write_text("[default]\nregion = eu-west-1\n")
    from_config = {**ENV_CREDS, "AWS_CONFIG_FILE": str(config)}
    assert _signer("b", "http://h:1", None, from_config).region == "eu-west-1"
    fips = _signer("b", None, None, {**env, "AWS_USE_FIPS_ENDPOINT": "true"})
    assert fips.base_url == "https://b.s3-fips.us-east-1.amazonaws.com"
    dual = _signer("b", None, None, {**env, "AWS_USE_DUALSTACK_ENDPOINT": "true"})
    assert dual.base_url == "https://b.s3.dualstack.us-east-1.amazonaws.com"
    dotted = _signer("my.dotted.bucket", None, None, env)
    assert dotted.base_url == "https://s3.us-east-1.amazonaws.com/my.dotted.bucket"
    assert _signer("b", "http://h:1/sub/path/", None, env).base_url == "http://h:1/sub/path/b"
    assert _signer("b", "http://u:pw@[::1]:9/?t=x", None, env).base_url == "http://[::1]:9/b"
    with pytest.raises(InputError, match="is not an http"):
        _signer("b", "ftp://h:1", None, env)


def test_endpoints_from_the_environment_are_signed_path_style_as_botocore_picks_them():
    env = {**ENV_CREDS, "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": "/dev/null"}

    def base(endpoint: str | None, **more: str) -> str:
        return _signer("my.bucket", endpoint, None, {**env, **more}).base_url

    assert base(None, AWS_ENDPOINT_URL="http://g:1") == "http://g:1/my.bucket"
    assert base(None, AWS_ENDPOINT_URL_S3="https://s:2/") == "https://s:2/my.bucket"
    both = {"AWS_ENDPOINT_URL": "http://g:1", "AWS_ENDPOINT_URL_S3": "http://s:2"}
    assert base(None, **both) == "http://s:2/my.bucket"  # the service's own beats the global
    assert base("http://input:3", **both) == "http://input:3/my.bucket"  # the input beats both
    ignored = {**both, "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"}
    assert base(None, **ignored) == "https://s3.us-east-1.amazonaws.com/my.bucket"  # AWS itself
    assert base("http://input:3", **ignored) == "http://input:3/my.bucket"


def test_a_restore_hit_never_imports_boto3(s3_store, env, tmp_path):
    src = write_tree(
        tmp_path / "src",
        {"big.bin": random.Random(3).randbytes(3_000_001), "small.txt": "tokenizer\n"},
    )
    assert cache_cmd("save", _flags(s3_store, "k", src), env)[0].ok
    out = tmp_path / "out"
    script = (
        "import sys\n"
        "from gpuci.cli import main\n"
        "try:\n"
        "    code = main()\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "print('BOTO3', 'boto3' in sys.modules, 'CODE', code)\n"
    )
    args = ["cache-weights", "restore", "--key", "k", "--path", str(out)]
    args += ["--store", s3_store.url, "--endpoint-url", s3_store.endpoint]
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        env={**env, "PATH": os.environ["PATH"], "PYTHONPATH": str(REPO_ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "BOTO3 False CODE 0" in proc.stdout, proc.stdout[-800:] + proc.stderr[-800:]
    assert snapshot(out) == snapshot(src)


# ----- O_DIRECT target files --------------------------------------------------------------------


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "buffered"])
def test_target_file_writes_aligned_parts_and_an_unaligned_tail(tmp_path, direct):
    size = 3 * 1024 * 1024 + 12345  # the last chunk is not a multiple of the block size
    data = random.Random(5).randbytes(size)
    chunk = 1 << 20
    offsets = list(range(0, size, chunk))
    random.Random(6).shuffle(offsets)  # parts land in any order
    buf = directio.aligned_buffer(chunk)
    target = directio.TargetFile(tmp_path / "f.bin", size, direct)
    try:
        for offset in offsets:
            piece = data[offset : offset + chunk]
            buf[: len(piece)] = piece
            target.write(buf[: len(piece)], offset)
        scratch = directio.aligned_buffer(chunk)
        tail = offsets and max(offsets)
        got = target.read_into(scratch, tail, size - tail)
        assert bytes(scratch[:got]) == data[tail:]
    finally:
        target.close()
    assert target.closed
    assert hashlib.sha256((tmp_path / "f.bin").read_bytes()).digest() == (
        hashlib.sha256(data).digest()
    )


def test_direct_io_is_opt_in():
    # Off by default: a job reads its weights right after the restore (page cache stays warm).
    assert not directio.enabled({})
    assert not directio.enabled({"GPUCI_CACHE_DIRECT_IO": "off"})
    assert directio.enabled({"GPUCI_CACHE_DIRECT_IO": "on"}) == hasattr(os, "O_DIRECT")


# ----- splice: socket -> pipe -> file, no copy through user space --------------------------------


def _ranged(
    body: bytes, early: int, cut: int = 0, timeout: float = 30
) -> tuple[Ranged, socket.socket]:
    """A 206 answer from a one-shot server on 127.0.0.1, through the store's HTTP pool: the
    headers and the first ``early`` body bytes in one send, the rest in another; with ``cut``,
    the server hangs up that many bytes before the end."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        head = f"HTTP/1.1 206 Partial Content\r\nContent-Length: {len(body)}\r\n\r\n"
        conn.sendall(head.encode() + body[:early])
        conn.sendall(body[early : len(body) - cut])
        if cut:
            conn.shutdown(socket.SHUT_WR)
        conn.recv(1)  # until the client lets go
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    port = listener.getsockname()[1]
    until = time.monotonic() + 600
    status, _, got = Pool({}, Limits(timeout)).open(f"http://127.0.0.1:{port}/blob", {}, until)
    assert status == 206 and isinstance(got, Ranged)
    return got, listener


@contextmanager
def _pipe_to(path: Path) -> Iterator[tuple[splicing.Pipe, int]]:
    """A splice pipe and ``path`` open for writing: what a spliced body goes through and to,
    both closed however the test ends."""
    pipe = splicing.Pipe()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        yield pipe, fd
    finally:
        pipe.close()
        os.close(fd)


@pytest.mark.skipif(not splicing.available(), reason="os.splice is Linux-only")
@pytest.mark.parametrize("file_splices", [True, False], ids=["splice", "refused-by-fs"])
def test_splice_moves_early_and_socket_bytes_to_their_offset(tmp_path, monkeypatch, file_splices):
    body = random.Random(3).randbytes(3_000_001)
    resp, peer = _ranged(body, early=40_000)
    real_splice = os.splice

    def refusing(src, dst, count, *args, **kwargs):  # a filesystem without splice_write
        if dst == fd:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_splice(src, dst, count, *args, **kwargs)

    if not file_splices:
        monkeypatch.setattr(os, "splice", refusing)
    with closing(peer), _pipe_to(tmp_path / "f.bin") as (pipe, fd):
        pos = 4096
        while resp.left:
            assert resp.splice_into(pipe, 300_000) > 0
            pos += pipe.drain(fd, pos)
        assert pipe.held == 0 and pipe.file_splices is file_splices
        assert resp.splice_into(pipe, 1) == 0  # the body is over: nothing more is taken
    data = (tmp_path / "f.bin").read_bytes()
    assert data[:4096] == bytes(4096) and data[4096:] == body


@pytest.mark.skipif(not splicing.available(), reason="os.splice is Linux-only")
def test_splice_of_a_cut_body_is_a_dropped_connection(tmp_path):
    body = random.Random(4).randbytes(200_000)
    resp, peer = _ranged(body, early=0, cut=50_000)  # promised 200,000, sends 150,000
    with (
        closing(peer),
        _pipe_to(tmp_path / "f.bin") as (pipe, fd),
        pytest.raises(ConnectionResetError),
    ):
        while True:
            resp.splice_into(pipe, 1 << 20)
            pipe.drain(fd, 0)


def _lowat(fd: int) -> int:
    """The SO_RCVLOWAT of the socket behind ``fd`` (a duplicate is asked, then closed)."""
    sock = socket.socket(fileno=os.dup(fd))
    try:
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)
    finally:
        sock.close()


@pytest.mark.skipif(not splicing.available(), reason="os.splice is Linux-only")
def test_a_spliced_body_wakes_on_many_bytes_never_on_more_than_are_left(tmp_path, monkeypatch):
    """A splice from a socket returns whatever is queued: without SO_RCVLOWAT a worker woke for
    every segment the server sent (~64 KiB from s3rver, 128 KiB through the WAN proxy). Each
    splice now waits for many bytes, but never for more than the body has left (that wake-up
    would never come), and the connection goes back to the pool at the default of 1."""
    body = random.Random(5).randbytes(3_000_001)
    resp, peer = _ranged(body, early=0)
    real_splice = os.splice
    seen: list[tuple[int, int]] = []
    sock_fd = resp.conn.last_sock.fileno()

    def watching(src, dst, count, *args, **kwargs):
        if src == sock_fd:
            seen.append((_lowat(src), resp.left))
        return real_splice(src, dst, count, *args, **kwargs)

    monkeypatch.setattr(os, "splice", watching)
    with closing(peer), _pipe_to(tmp_path / "f.bin") as (pipe, fd):
        pos = 0
        while resp.left:
            resp.splice_into(pipe, 1 << 20)
            pos += pipe.drain(fd, pos)
        assert seen and max(lowat for lowat, _ in seen) > 1
        assert all(lowat <= left for lowat, left in seen)
        assert _lowat(sock_fd) == 1  # back to the default before the connection is reused
    assert (tmp_path / "f.bin").read_bytes() == body


@pytest.mark.skipif(not splicing.available(), reason="os.splice is Linux-only")
def test_a_kept_alive_connection_reads_its_next_answer_after_a_spliced_body(tmp_path):
    """The second answer on the same connection is a few bytes: a receive low-water mark left
    over from the spliced body would hold its headers until the socket's timeout."""
    first = random.Random(6).randbytes(2_000_000)
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            for body in (first, b"tail"):
                conn.recv(65536)
                head = f"HTTP/1.1 206 Partial Content\r\nContent-Length: {len(body)}\r\n\r\n"
                conn.sendall(head.encode())
                for at in range(0, len(body), 100_000):  # in pieces, as a server writes
                    conn.sendall(body[at : at + 100_000])
            conn.recv(1)

    threading.Thread(target=serve, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/blob"
    pool = Pool({}, Limits(3))
    with closing(listener), _pipe_to(tmp_path / "f.bin") as (pipe, fd):
        _, _, got = pool.open(url, {}, time.monotonic() + 600)
        assert isinstance(got, Ranged)
        pos = 0
        while got.left:
            got.splice_into(pipe, 1 << 20)
            pos += pipe.drain(fd, pos)
        got.close()
        # the same connection: the pool kept it
        status, _, second = pool.open(url, {}, time.monotonic() + 600)
        assert status == 206 and isinstance(second, Ranged)
        buf = memoryview(bytearray(16))
        assert second.readinto(buf) == 4 and bytes(buf[:4]) == b"tail"
    assert (tmp_path / "f.bin").read_bytes() == first


# ----- whole restores: spliced, copied, O_DIRECT ------------------------------------------------


@pytest.mark.parametrize(
    "direct,splice", [("off", True), ("off", False), ("on", True)], ids=["splice", "copy", "direct"]
)
def test_many_parts_per_file_restore_bit_exact(
    s3_store, env, tmp_path, monkeypatch, direct, splice
):
    monkeypatch.setattr(layout, "MIN_PART", 256 << 10)  # several parts per file, out of order
    monkeypatch.setattr(layout, "IO_CHUNK", 64 << 10)  # several chunks per part: the pipeline
    monkeypatch.setattr(layout, "WRITE_SLICE", 16 << 10)  # several slices per chunk
    monkeypatch.setattr(transfer, "SPLICE", splice and splicing.available())
    pipes = []
    monkeypatch.setattr(splicing, "Pipe", lambda real=splicing.Pipe: pipes.append(1) or real())
    monkeypatch.setenv("GPUCI_CACHE_DIRECT_IO", direct)
    src = tmp_path / "src"
    src.mkdir()
    rng = random.Random(11)
    for i, size in enumerate((2_000_000, 1_048_576, 1_500_007)):
        (src / f"w{i}.bin").write_bytes(rng.randbytes(size))
    assert cache_cmd("save", _flags(s3_store, "k", src), env)[0].ok
    out = tmp_path / "out"
    got, _ = cache_cmd("restore", _flags(s3_store, "k", out), {**env, "GPUCI_CACHE_WORKERS": "3"})
    assert got.ok, got.headline
    assert int(got.outputs["bytes-downloaded"]) >= 4_548_583
    assert snapshot(out) == snapshot(src)
    # The socket -> pipe -> file path ran exactly where it applies (buffered, plain http).
    assert bool(pipes) == (transfer.SPLICE and direct == "off")


def test_several_big_files_are_cut_for_the_connections_together(
    s3_store, proxy, env, tmp_path, monkeypatch
):
    """Parts are sized from all the large files' bytes over the connection ceiling: 4 files
    of 2 MiB with 8 connections are 8 GETs of 1 MiB (each file cut on its own for 8
    connections made 32 GETs of 256 KiB, each paying a first byte and the server's per-request
    work); a lone file is still spread over every connection."""
    monkeypatch.setattr(layout, "MIN_PART", 64 << 10)
    via = StoreCase("s3", s3_store.url, proxy.url)
    src = tmp_path / "src"
    src.mkdir()
    rng = random.Random(12)
    for i in range(4):
        (src / f"w{i}.bin").write_bytes(rng.randbytes(2 << 20))
    assert cache_cmd("save", _flags(via, "k", src), env)[0].ok
    got, _ = cache_cmd("restore", _flags(via, "k", tmp_path / "out"), env)  # 8 connections
    assert got.ok, got.headline
    assert snapshot(tmp_path / "out") == snapshot(src)
    assert proxy.count("GET", "/blobs/") == 8

    lone = write_tree(tmp_path / "lone", {"model.bin": rng.randbytes(2 << 20)})
    assert cache_cmd("save", _flags(via, "lone", lone), env)[0].ok
    before = proxy.count("GET", "/blobs/")
    got, _ = cache_cmd("restore", _flags(via, "lone", tmp_path / "out2"), env)
    assert got.ok, got.headline
    assert snapshot(tmp_path / "out2") == snapshot(lone)
    assert proxy.count("GET", "/blobs/") - before == 8  # 8 parts of 256 KiB


def test_the_last_use_is_written_while_the_tree_is_still_coming(
    s3_store, proxy, env, tmp_path, monkeypatch
):
    """The last-use record goes out beside the transfer, not after its last byte: on a remote
    store that is one round trip less at the end of every restore."""
    monkeypatch.setattr(layout, "MIN_PART", 64 << 10)
    via = StoreCase("s3", s3_store.url, proxy.url)
    src = write_tree(tmp_path / "src", {"model.bin": random.Random(13).randbytes(2 << 20)})
    assert cache_cmd("save", _flags(via, "k", src), env)[0].ok
    # the tree's first GET is answered only once the use record has come (or after 60 s): a
    # restore writing it after the tree's last byte holds that GET out to the deadline
    held = proxy.add("GET", "/blobs/", "hold-until", seconds=60, until=("PUT", "/uses/"))
    got, _ = cache_cmd(
        "restore", _flags(via, "k", tmp_path / "out"), {**env, "GPUCI_CACHE_WORKERS": "2"}
    )
    assert got.ok, got.headline
    assert snapshot(tmp_path / "out") == snapshot(src)
    assert held.fired == 1 and held.released == 1, "the use record waited for the tree"


# ----- the hash cursor ----------------------------------------------------------------------------


def test_hash_cursor_reads_back_spliced_and_early_parts_in_order(tmp_path):
    data = random.Random(8).randbytes(1_000_003)
    entry = Entry("file", 0, "w.bin", size=len(data), sha256=hashlib.sha256(data).hexdigest())
    target = BlobTarget(entry, tmp_path / "w.bin")
    target.open(direct=False)
    scratch = memoryview(bytearray(64 << 10))  # smaller than a part: read back piece by piece
    try:
        cuts = [(600_000, len(data)), (0, 300_000), (300_000, 600_000)]  # the last part first
        for start, stop in cuts:
            target.file.write(memoryview(data)[start:stop], start)
        assert not target.advance(600_000, len(data) - 600_000, None, scratch)  # spliced, early
        assert not target.advance(0, 300_000, memoryview(data)[:300_000], scratch)  # in memory
        assert target.advance(300_000, 300_000, None, scratch)  # completes the file
        target.finish()
    finally:
        target.close()


def test_a_staging_file_cut_short_under_the_hash_is_an_error_not_a_hang(tmp_path):
    data = random.Random(9).randbytes(500_000)
    entry = Entry("file", 0, "w.bin", size=len(data), sha256=hashlib.sha256(data).hexdigest())
    target = BlobTarget(entry, tmp_path / "w.bin")
    target.open(direct=False)
    try:
        target.file.write(memoryview(data), 0)
        os.truncate(tmp_path / "w.bin", 100_000)  # another process of the runner's user
        with pytest.raises(IntegrityError, match="truncated the staging file"):
            target.advance(0, len(data), None, memoryview(bytearray(64 << 10)))
    finally:
        target.close()


@pytest.mark.skipif(not splicing.available(), reason="os.splice is Linux-only")
def test_a_server_stalling_mid_body_times_out_the_splice():
    # A hostile or wedged server sends the headers and a little body, then nothing: the
    # socket's receive timeout must bound splice as it bounds recv, or the restore hangs.
    listener = socket.create_server(("127.0.0.1", 0))
    stall, hung_up = threading.Event(), threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 206 Partial Content\r\nContent-Length: 1000000\r\n\r\n")
        conn.sendall(bytes(70_000))
        stall.wait(60)  # a hang guard: the client's 1 s timeout is what ends it
        hung_up.set()
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    pipe = splicing.Pipe()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/blob"
    try:
        _, _, resp = Pool({}, Limits(1)).open(url, {}, time.monotonic() + 600)
        assert isinstance(resp, Ranged)
        with pytest.raises(OSError):
            while True:
                resp.splice_into(pipe, 1 << 20)
                while pipe.held:  # discard: only the wait matters here
                    pipe.held -= len(os.read(pipe.r, pipe.held))
        assert not hung_up.is_set()  # the receive timeout ended it, not the server hanging up
    finally:
        stall.set()
        pipe.close()
        listener.close()


class _SlowFirstPartStore:
    """Serves one blob from memory; the answer for byte 0 stalls after its first MiB until a
    range starting off the part grid is asked for (another worker stole its tail)."""

    url = "mem://steal"
    local_disk = False

    def __init__(self, data: bytes, part: int) -> None:
        self.data, self.part = data, part
        self.asked: list[tuple[int, int]] = []
        self.stolen = threading.Event()

    def stop_flag(self) -> threading.Event:
        return threading.Event()

    def open_range(self, key: str, offset: int, length: int):
        self.asked.append((offset, length))
        if offset % self.part:
            self.stolen.set()
        store, view = self, memoryview(self.data)[offset : offset + length]

        class Reader:
            pos, stalled = 0, False

            def readinto(self, buf: memoryview) -> int:
                if offset == 0 and self.pos >= 1 << 20 and not self.stalled:
                    self.stalled = True  # once: without work stealing nobody ever sets it
                    store.stolen.wait(60)
                n = min(len(buf), len(view) - self.pos, 1 << 20)
                buf[:n] = view[self.pos : self.pos + n]
                self.pos += n
                return n

            def close(self) -> None:
                pass

        return Reader()


def test_a_free_worker_steals_the_tail_of_a_slow_part(tmp_path, monkeypatch):
    """A large file is one plan of parts: once its own part is done and no task waits, a
    worker takes the far half of the part still coming, and the slow connection stops at the
    new boundary; the file is whole and verified."""
    monkeypatch.setattr(transfer, "SPLICE", False)
    monkeypatch.setenv("GPUCI_CACHE_DIRECT_IO", "off")
    data = random.Random(5).randbytes(64 << 20)
    part = 32 << 20  # 64 MiB over 2 connections
    store = _SlowFirstPartStore(data, part)
    entry = Entry("file", 0, "w.bin", size=len(data), sha256=hashlib.sha256(data).hexdigest())
    down = transfer.Downloader(store, 2, on_bytes=lambda _n: None)  # type: ignore[arg-type]
    down.fetch([(entry, tmp_path / "w.bin")])
    assert (tmp_path / "w.bin").read_bytes() == data
    assert store.stolen.is_set() and any(offset % part for offset, _ in store.asked)
    assert down.bytes == len(data)  # every byte hashed once: the slow part stopped at the cut


def test_a_spliced_segment_never_writes_past_an_end_lowered_meanwhile(tmp_path):
    """Spliced bytes reach the disk before the driver claims them: a thief that takes the tail
    while bytes sit in the pipe gets its range untouched (the late bytes are dropped), so what
    it writes and hashes there stays what is on disk, whatever another connection was sent."""

    from gpuci.ranged._plan import Segment

    size, new_end = 4 << 20, 1 << 20
    path = tmp_path / "blob"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.ftruncate(fd, size)
    seg = Segment(0, 0, size, 0)
    sent = [0]

    def splice_into(pipe: splicing.Pipe, want: int) -> int:
        n = min(want, pipe.room(), 512 << 10)
        os.write(pipe.w, b"v" * n)  # the victim's connection
        pipe.filled(n)
        sent[0] += n
        if sent[0] > new_end:  # a thief takes the tail while these bytes sit in the pipe
            with lock:
                seg.end = new_end
        return n

    lock = threading.Lock()
    try:
        for _chunk in spliced(splice_into, fd, seg, lock, threading.Event(), lambda _n: None):
            pass
    finally:
        os.close(fd)
    data = path.read_bytes()
    assert data[:new_end] == b"v" * new_end
    assert data[new_end:] == bytes(size - new_end)  # the thief's range: nothing written there
