"""The S3 store's bounds on the data plane and in listings (issue 33), whatever the credentials:
each hostile answer ends a real ``python -m gpuci`` process with one line (exit 3) in bounded
memory, with a short time limit (GPUCI_S3_TIMEOUT=2, 1 where a test waits out a deadline).

- a ranged GET answered ``200`` claiming 10^12 bytes, or ``206`` with a ``Content-Range`` that
  is not the range asked for (``/²``): refused at once, never read;
- a body trickled a byte at a time: every attempt at one range shares one deadline, so the step
  ends however many attempts ``AWS_MAX_ATTEMPTS`` allows;
- a listing declaring entities: refused, nothing expanded; a listing of long keys with fresh
  continuation tokens for ever: ends within its caps;
- credentials from a profile (no key in the environment) take the same bounded path: trickled
  headers end in time, and a region redirect is signed again for the region on the same
  endpoint, then held to the same deadlines.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cache"))

from hostile_s3 import (
    HostileS3,
    Rule,
    _frame,
    _trickle,
    one_error_line,
    run_s3,
)
from hostile_s3 import hostile_env as _env
from treeutil import snapshot, write_tree

from gpuci_testing import run_python

PEAK_KIB = 300 * 1024
SAVED_BYTES = 3_000_000  # the large file of the tree the ``saved`` fixture saves
# The tests that wait out one operation's deadline (8 timeouts, or the grace plus the size at the
# minimum rate) use a 1 s timeout and 1 MiB/s: the same bounds, reached in about 8 s, not 16;
# the store's own answers, relayed, still come well within a second.
DEADLINE = {"GPUCI_S3_TIMEOUT": "1", "GPUCI_S3_MIN_RATE": str(1 << 20)}


class Plan:
    """Several rules in order, each firing at most ``times`` times (HostileS3 asks its one
    ``rule``: this stands in for it and fires whichever matches first)."""

    def __init__(self, *rules: tuple[Rule, int]) -> None:
        self.rules = list(rules)
        self.current: Rule | None = None
        self.headers: list[dict[str, str]] = []

    def matches(self, method: str, target: str, length: int = 0) -> bool:
        for rule, times in self.rules:
            if rule.fired < times and rule.matches(method, target, length):
                self.current = rule
                return True
        return False

    @property
    def mode(self) -> str:
        assert self.current is not None
        return self.current.mode

    @property
    def fired(self) -> int:
        return self.current.fired if self.current is not None else 0

    @fired.setter
    def fired(self, value: int) -> None:
        assert self.current is not None
        self.current.fired = value


class Hostile(HostileS3):
    """HostileS3 with the answers this file is about."""

    def _misbehave(self, mode, conn, method, target, headers, body) -> bool:  # type: ignore[no-untyped-def]
        if mode == "range-200-huge":  # ignores the Range, claims 10^12 bytes, then trickles
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n")
            _trickle(conn, b"x" * 600, self._stop)
            return False
        if mode == "range-superscript-total":
            status, reason, answer, data = self._upstream(method, target, headers, body)
            answer = [
                (k, re.sub(r"/\d+$", "/\u00b2", v) if k.lower() == "content-range" else v)
                for k, v in answer
            ]
            conn.sendall(_frame(status, reason, answer, data, method))
            return True
        if mode == "redirect-eu":  # S3's answer for a bucket in another region
            page = (
                b"<Error><Code>PermanentRedirect</Code><Message>use the bucket's region"
                b"</Message><Region>eu-west-1</Region></Error>"
            )
            extra = [("x-amz-bucket-region", "eu-west-1"), ("Location", "http://evil.test/x")]
            conn.sendall(_frame(301, "Moved Permanently", extra, page, method))
            return True
        if mode == "note":  # relayed, its headers kept
            assert isinstance(self.rule, Plan)
            self.rule.headers.append(headers)
            conn.sendall(self._relay(method, target, headers, body))
            return True
        if mode == "entity-listing":
            conn.sendall(_frame(200, "OK", [], _entity_page(), method))
            return True
        if mode == "long-keys":
            conn.sendall(_frame(200, "OK", [], _long_key_page(), method))
            return True
        return super()._misbehave(mode, conn, method, target, headers, body)


def _entity_page() -> bytes:
    """8 MiB at most on the wire, about 90 times that once its entities are expanded."""
    inner = "x" * 1000
    decl = f'<!DOCTYPE l [<!ENTITY a "{inner}"><!ENTITY b "{"&a;" * 90}">]>'
    key = "<Contents><Key>c/refs/default/&b;</Key><Size>1</Size>"
    key += "<LastModified>2026-11-30T10:00:00.000Z</LastModified></Contents>"
    per = len(key)
    count = (7 << 20) // per
    return (decl + "<ListBucketResult>" + key * count + "</ListBucketResult>").encode()


def _long_key_page() -> bytes:
    """1,000 well-formed keys of 480 characters and a fresh continuation token."""
    stamp = "<LastModified>2026-11-30T10:00:00.000Z</LastModified>"
    tag = uuid.uuid4().hex
    items = "".join(
        f"<Contents><Key>c/refs/default/{tag}{i:06d}{'k' * 440}</Key><Size>1</Size>{stamp}"
        "</Contents>"
        for i in range(1000)
    )
    more = f"<IsTruncated>true</IsTruncated><NextContinuationToken>{tag}</NextContinuationToken>"
    return f"<ListBucketResult>{items}{more}</ListBucketResult>".encode()


def _profile_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """Credentials only in an AWS profile: no key in the environment."""
    creds = tmp_path / "aws-credentials"
    creds.write_text(
        "[lab]\naws_access_key_id = testing\naws_secret_access_key = testing-secret-key\n"
    )
    config = tmp_path / "aws-config"
    config.write_text("[profile lab]\nregion = us-east-1\n")
    env = _env(tmp_path, **extra)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        env.pop(name, None)
    env.update(
        AWS_PROFILE="lab", AWS_CONFIG_FILE=str(config), AWS_SHARED_CREDENTIALS_FILE=str(creds)
    )
    return env


def _restore(hostile: HostileS3, bucket: str, env: dict[str, str], tmp_path: Path, *extra: str):
    out = str(tmp_path / "out")
    return run_s3("restore", bucket, hostile.url, env, "--path", out, *extra, timeout=200)


# ----- ranged answers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        pytest.param("range-200-huge", ["ignored a Range request"], id="200-claiming-a-terabyte"),
        pytest.param("range-superscript-total", ["Content-Range", "invalid response"], id="digits"),
    ],
)
def test_a_ranged_get_answered_with_another_range_is_refused_at_once(
    saved, moto_endpoint, tmp_path, mode, says
):
    """A 200 claiming 10^12 bytes, or a 206 whose Content-Range total is in other digits."""
    bucket, _ = saved
    with Hostile(moto_endpoint) as hostile:
        hostile.rule = Rule(mode, "GET", "/blobs/")
        run = _restore(hostile, bucket, _env(tmp_path), tmp_path, "--key", "k-1")
    one_error_line(run, 3, peak_kib=PEAK_KIB)
    assert all(word in run.output for word in says), run.output
    assert hostile.rule.fired == 1  # refused, not retried: no retry makes it a range


def test_a_trickled_body_ends_by_the_ranges_one_deadline_whatever_the_attempts(
    saved, moto_endpoint, tmp_path
):
    """Each attempt ends within the timeout's grace; all of them within one deadline."""
    bucket, _ = saved
    env = _env(tmp_path, AWS_MAX_ATTEMPTS="1000", GPUCI_CACHE_WORKERS="1", **DEADLINE)
    with Hostile(moto_endpoint) as hostile:
        hostile.rule = Rule("trickle-body", "GET", "/blobs/")
        run = _restore(hostile, bucket, env, tmp_path, "--key", "k-1")
    assert hostile.rule.fired >= 2  # a first attempt cut, then more within the deadline
    one_error_line(run, 3, peak_kib=PEAK_KIB)
    assert "did not deliver" in run.output and "GPUCI_S3_MIN_RATE" in run.output, run.output
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# ----- listings ------------------------------------------------------------------------------


def test_a_listing_declaring_entities_is_refused_unexpanded(saved, moto_endpoint, tmp_path):
    bucket, _ = saved
    with Hostile(moto_endpoint) as hostile:
        hostile.rule = Rule("entity-listing", "GET", "list-type=2")
        run = run_s3("ls", bucket, hostile.url, _env(tmp_path), timeout=200)
    assert hostile.rule.fired
    one_error_line(run, 3, peak_kib=PEAK_KIB)
    assert "declares a DTD or entities" in run.output, run.output


def test_a_listing_of_long_keys_with_fresh_tokens_ends_within_its_caps(
    saved, moto_endpoint, tmp_path
):
    """The cap on the names a listing hands on ends it, long before its time (the default
    timeout here: the listing has 240 s), in bounded memory though ``ls`` keeps every key."""
    bucket, _ = saved
    env = _env(tmp_path, GPUCI_S3_TIMEOUT="30")
    with Hostile(moto_endpoint) as hostile:
        hostile.rule = Rule("long-keys", "GET", "list-type=2")
        run = run_s3("ls", bucket, hostile.url, env, timeout=200)
    assert hostile.rule.fired > 1
    one_error_line(run, 3, peak_kib=PEAK_KIB)
    assert "MiB of names" in run.output, run.output


# ----- credentials from a profile: the same bounded path ---------------------------------------


def test_trickled_ref_headers_end_in_time_with_profile_credentials(saved, moto_endpoint, tmp_path):
    bucket, _ = saved
    env = _profile_env(tmp_path, **DEADLINE)
    with Hostile(moto_endpoint) as hostile:
        hostile.rule = Rule("trickle-headers", "GET", "/refs/")
        run = _restore(hostile, bucket, env, tmp_path, "--key", "k-1")
    assert hostile.rule.fired
    one_error_line(run, 3, peak_kib=PEAK_KIB)
    assert "did not answer in time" in run.output, run.output


def test_a_region_redirect_is_signed_again_on_the_same_endpoint_and_stays_bounded(
    saved, moto_endpoint, tmp_path
):
    """301 PermanentRedirect naming eu-west-1 (and a Location elsewhere) for the ref: the ref is
    asked again of the same endpoint, signed for eu-west-1, never of the Location's host; the
    manifest it names then trickles, and the step still ends within its deadline."""
    bucket, _ = saved
    env = _profile_env(tmp_path, **DEADLINE)
    plan = Plan(
        (Rule("redirect-eu", "GET", "/refs/"), 1),
        (Rule("note", "GET", "/refs/"), 1),
        (Rule("trickle-body", "GET", "/manifests/"), 100),
    )
    with Hostile(moto_endpoint) as hostile:
        hostile.rule = plan  # type: ignore[assignment]
        run = _restore(hostile, bucket, env, tmp_path, "--key", "k-1")
    assert [rule.fired for rule, _ in plan.rules][:2] == [1, 1], hostile.seen
    assert "/eu-west-1/s3/aws4_request" in plan.headers[0]["authorization"]
    one_error_line(run, 3, peak_kib=PEAK_KIB)
    assert "did not answer in time" in run.output, run.output


def test_save_and_restore_with_profile_credentials_never_import_boto3(
    saved, moto_endpoint, tmp_path
):
    """The whole round trip on the one client: credential_process gives the keys; botocore
    resolves them, boto3 is never imported, and every request carries a signature."""
    bucket, _ = saved
    helper = tmp_path / "creds.py"
    helper.write_text(
        "import json\nprint(json.dumps({'Version': 1, 'AccessKeyId': 'testing',"
        " 'SecretAccessKey': 'testing-secret-key'}))\n"
    )
    env = _profile_env(tmp_path)
    Path(env["AWS_CONFIG_FILE"]).write_text(
        f"[profile lab]\nregion = us-east-1\ncredential_process = {sys.executable} {helper}\n"
    )
    Path(env["AWS_SHARED_CREDENTIALS_FILE"]).write_text("")
    src = write_tree(tmp_path / "src", {"a.txt": b"a\n", "big.bin": os.urandom(6 << 20)})
    probe = "import sys, runpy; sys.argv = ['gpuci', *sys.argv[1:]]; "
    probe += "code = 0\ntry:\n    runpy.run_module('gpuci', run_name='__main__')\n"
    probe += "except SystemExit as exc:\n    code = exc.code\n"
    probe += "print('boto3 loaded:', 'boto3' in sys.modules, file=sys.stderr)\nsys.exit(code)\n"
    with Hostile(moto_endpoint) as hostile:
        hostile.rule = None
        store = ["--store", f"s3://{bucket}/p", "--endpoint-url", hostile.url]
        runs = []
        for args in (
            ["save", *store, "--key", "prof", "--path", str(src)],
            ["restore", *store, "--key", "prof", "--path", str(tmp_path / "out")],
        ):
            threshold = {**env, "GPUCI_MULTIPART_THRESHOLD": "5MiB"}
            runs.append(run_python("-c", probe, "cache-weights", *args, env=threshold, timeout=200))
        seen = list(hostile.seen)
    for done in runs:
        assert done.returncode == 0, done.stdout + done.stderr
        assert "boto3 loaded: False" in done.stderr, done.stderr
    assert snapshot(tmp_path / "out") == snapshot(src)
    assert any("uploadId=" in target for _, target in seen)  # the multipart upload, hand-signed
