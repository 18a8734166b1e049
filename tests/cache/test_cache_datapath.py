"""The restore data path: the stdlib SigV4 signer, O_DIRECT target files, pipelined parts.

The signer is checked against botocore's own presigner; restores run against the real moto
server (conftest), once with O_DIRECT and once buffered, and in a fresh interpreter to prove
that a restore hit never imports boto3.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import random
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from botocore.config import Config
from treeutil import snapshot

from conftest import REPO_ROOT, cache_cmd
from gpuci.cache import directio, layout
from gpuci.cache.sigv4 import Presigner

ENV_CREDS = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "wJalr/secret+key"}


def _flags(store, key: str, *paths: Path) -> dict[str, str]:
    return {**store.flags(), "key": key, "path": "\n".join(str(p) for p in paths)}


# ----- the signer -------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "PUT"])
def test_presigned_urls_sign_exactly_as_botocore(method):
    key = "cache/refs/default/a%2Fb c+d~é"
    client = boto3.session.Session(
        aws_access_key_id=ENV_CREDS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=ENV_CREDS["AWS_SECRET_ACCESS_KEY"],
        aws_session_token="token/with+chars=",
        region_name="eu-west-3",
    ).client(
        "s3",
        endpoint_url="http://127.0.0.1:9000",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    op = "get_object" if method == "GET" else "put_object"
    theirs = client.generate_presigned_url(
        op, Params={"Bucket": "bench", "Key": key}, ExpiresIn=900
    )
    query = parse_qs(urlsplit(theirs).query)
    when = datetime.datetime.strptime(query["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ")
    env = {**ENV_CREDS, "AWS_SESSION_TOKEN": "token/with+chars="}
    presigner = Presigner.for_store("bench", "http://127.0.0.1:9000", "eu-west-3", env)
    assert presigner is not None
    ours = presigner.url(key, 900, when, method=method)
    assert urlsplit(ours).path == urlsplit(theirs).path
    assert parse_qs(urlsplit(ours).query) == query  # same parameters, same signature


def test_fast_path_only_where_it_signs_as_boto3_would():
    env = {**ENV_CREDS, "AWS_DEFAULT_REGION": "us-east-1"}
    ok = Presigner.for_store("b", "http://127.0.0.1:9000", None, env)
    assert ok is not None and ok.region == "us-east-1"
    assert Presigner.for_store("b", None, None, env).base_url == (
        "https://b.s3.us-east-1.amazonaws.com"
    )
    # Credentials from a profile, SSO or an instance role: only botocore can resolve them.
    assert Presigner.for_store("b", "http://h:1", "us-east-1", {}) is None
    assert Presigner.for_store("b", "http://h:1", None, ENV_CREDS) is None  # region unknown
    for knob in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_USE_FIPS_ENDPOINT"):
        assert Presigner.for_store("b", None, None, {**env, knob: "x"}) is None
    assert Presigner.for_store("my.dotted.bucket", None, None, env) is None
    assert Presigner.for_store("b", "http://h:1/sub/path", None, env) is None


def test_a_restore_hit_never_imports_boto3(s3_store, env, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "big.bin").write_bytes(random.Random(3).randbytes(3_000_001))
    (src / "small.txt").write_text("tokenizer\n")
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


# ----- whole restores, O_DIRECT on and off --------------------------------------------------------


@pytest.mark.parametrize("direct", ["on", "off"])
def test_many_parts_per_file_restore_bit_exact(s3_store, env, tmp_path, monkeypatch, direct):
    monkeypatch.setattr(layout, "MIN_PART", 256 << 10)  # several parts per file, out of order
    monkeypatch.setattr(layout, "IO_CHUNK", 64 << 10)  # several chunks per part: the pipeline
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
