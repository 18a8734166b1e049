"""A hostile S3 endpoint against the fast path (issue 21): one kind of misbehaviour at a time,
each in a real ``python -m gpuci`` process with a short time limit (GPUCI_S3_TIMEOUT=2).

Every hostile answer ends the command with one line and exit 3 (a failed usage record stays a
warning), the restore's files are whole or absent, and the process's peak memory stays under
300 MiB whatever the server claims or pours. Legal but unusual answers (interim 1xx, another
XML namespace) work.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cache"))

from hostile_s3 import HostileS3, Rule, fake_s3_client, new_s3_bucket, one_error_line, run_s3
from hostile_s3 import hostile_env as _env
from treeutil import snapshot

PEAK_KIB = 300 * 1024
SAVED_BYTES = 300_000  # the large file of the tree the ``saved`` fixture saves


def _restore(hostile: HostileS3, bucket: str, tmp_path: Path, *extra: str):
    out = str(tmp_path / "out")
    return run_s3("restore", bucket, hostile.url, _env(tmp_path), "--path", out, *extra)


HOSTILE = [
    # mode, method, path contains, what the line says
    ("huge-length-close", "GET", "/refs/", "closed before the body was complete"),
    ("endless-chunks", "GET", "/refs/", "over the 64 KiB cap for a ref"),
    ("endless-trailers", "GET", "/refs/", "invalid response"),
    ("nonascii-status", "GET", "/refs/", "invalid response"),
    ("trickle-headers", "GET", "/refs/", "did not answer in time"),
    ("trickle-body", "GET", "/manifests/", "did not answer in time"),
    ("silent", "GET", "/refs/", "did not answer in time"),
    # the data plane: presigned ranged GETs (the control plane signs in a header)
    ("trickle-body", "GET", "Signature=", "time limit"),
    ("silent", "GET", "Signature=", "no answer within"),
    ("endless-chunks", "GET", "Signature=", "without a Content-Length"),
    ("huge-length-close", "GET", "Signature=", ""),
]


@pytest.mark.parametrize(
    "mode,method,contains,says", HOSTILE, ids=[f"{m}-{c.strip('/=')}" for m, _, c, _ in HOSTILE]
)
def test_a_hostile_answer_is_one_line_exit_3_in_bounded_memory(
    moto_endpoint, saved, tmp_path, mode, method, contains, says
):
    bucket, _ = saved
    with HostileS3(moto_endpoint) as hostile:
        hostile.rule = Rule(mode, method, contains)
        run = _restore(hostile, bucket, tmp_path, "--key", "k-1")
    assert hostile.rule.fired, hostile.seen
    one_error_line(run, 3, peak_kib=PEAK_KIB)
    assert says in run.output, run.output
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_an_endless_http10_answer_to_the_usage_record_is_a_warning(moto_endpoint, saved, tmp_path):
    bucket, src = saved
    with HostileS3(moto_endpoint) as hostile:
        hostile.rule = Rule("http10-endless", "PUT", "/uses/")
        run = _restore(hostile, bucket, tmp_path, "--key", "k-1")
    assert hostile.rule.fired
    assert run.code == 0, run.output
    assert "over 1 MiB" in run.output and "Traceback" not in run.output
    assert snapshot(tmp_path / "out") == snapshot(src)
    assert 0 < run.peak_kib < PEAK_KIB, f"{run.peak_kib} KiB"


def test_a_listing_with_fresh_continuation_tokens_for_ever_ends(moto_endpoint, saved, tmp_path):
    bucket, _ = saved
    with HostileS3(moto_endpoint) as hostile:
        hostile.rule = Rule("fresh-token", "GET", "list-type=2")
        run = _restore(hostile, bucket, tmp_path, "--key", "nope", "--restore-keys", "k-")
    assert hostile.rule.fired > 1
    one_error_line(run, 3, peak_kib=PEAK_KIB)
    # It ends by whichever bound comes first: the page cap, the operation's time, or (on a
    # machine so busy that moto misses a request's 2 s) the request's own deadline.
    ends = ("past 2,000 pages", "took over", "did not answer in time")
    assert any(end in run.output for end in ends), run.output


def test_interim_100_and_103_answers_are_skipped(moto_endpoint, saved, tmp_path):
    bucket, src = saved
    with HostileS3(moto_endpoint) as hostile:
        hostile.rule = Rule("interim")
        run = _restore(hostile, bucket, tmp_path, "--key", "k-1")
    assert hostile.rule.fired >= 3  # the ref, the manifest, the blobs, the usage record
    assert run.code == 0, run.output
    assert snapshot(tmp_path / "out") == snapshot(src)


@pytest.mark.parametrize("mode", ["ns-no-slash", "ns-none"])
def test_a_listing_in_another_namespace_is_read(moto_endpoint, saved, tmp_path, mode):
    bucket, src = saved
    with HostileS3(moto_endpoint) as hostile:
        hostile.rule = Rule(mode, "GET", "list-type=2")
        run = _restore(hostile, bucket, tmp_path, "--key", "nope", "--restore-keys", "k-")
        assert run.code == 0, run.output
        assert snapshot(tmp_path / "out") == snapshot(src)
        listed = run_s3("ls", bucket, hostile.url, _env(tmp_path))
    assert listed.code == 0, listed.output
    assert "k-1" in listed.output


# ----- what the server takes: body limits, no multipart ------------------------------------


def _one_file(src: Path, size: int) -> Path:
    """A tree of one file of ``size`` random bytes: a blob (past the pack threshold)."""
    src.mkdir()
    (src / "w.bin").write_bytes(os.urandom(size))
    return src


def _save(
    hostile: HostileS3, bucket: str, tmp_path: Path, src: Path, key: str = "big", **extra: str
):
    env = _env(tmp_path, **extra)
    return run_s3("save", bucket, hostile.url, env, "--key", key, "--path", str(src))


def test_a_413_names_the_size_and_the_variable_that_lowers_it(moto_endpoint, saved, tmp_path):
    bucket, _ = saved
    src = _one_file(tmp_path / "big", 6 << 20)
    with HostileS3(moto_endpoint) as hostile:
        hostile.rule = Rule("too-large", "PUT", "/blobs/", limit=(11 << 19))  # 5.5 MiB
        refused = _save(hostile, bucket, tmp_path, src)
        assert hostile.rule.fired
        one_error_line(refused, 3)
        assert "PutObject" in refused.output and "6,291,456 bytes" in refused.output
        assert "GPUCI_MULTIPART_THRESHOLD" in refused.output
        # The fix the line names: parts of at most 5 MiB, each under the limit.
        saved_now = _save(hostile, bucket, tmp_path, src, GPUCI_MULTIPART_THRESHOLD="5MiB")
    assert saved_now.code == 0, saved_now.output


def test_a_complete_answered_200_with_an_error_after_padding_fails_the_save(
    moto_endpoint, saved, tmp_path
):
    """S3 keeps a slow CompleteMultipartUpload alive with whitespace, then may say in the 200's
    body that it failed: the object does not exist, so the save must not publish its key."""
    bucket, _ = saved
    src = _one_file(tmp_path / "big", 6 << 20)
    with HostileS3(moto_endpoint) as hostile:
        hostile.rule = Rule("padded-error", "POST", "uploadId=")
        run = _save(hostile, bucket, tmp_path, src, "padded", GPUCI_MULTIPART_THRESHOLD="5MiB")
        assert hostile.rule.fired
        one_error_line(run, 3)
        assert "CompleteMultipartUpload" in run.output and "InternalError" in run.output
        hostile.rule = None
        back = _restore(hostile, bucket, tmp_path, "--key", "padded")
    assert "cache-hit: false" in back.output, back.output  # no key names a missing blob


def test_a_head_claiming_another_size_is_not_taken_as_the_object_present(
    moto_endpoint, saved, tmp_path
):
    """A HEAD that says an object the save is about to send is there, old and 2^62 bytes: the
    save used to take it as present and make it young by copying it onto itself in up to 10,000
    UploadPartCopy requests (the size the server claimed); another size is not the object."""
    bucket, _ = saved
    src = _one_file(tmp_path / "big", 2 << 20)
    with HostileS3(moto_endpoint) as hostile:
        hostile.rule = Rule("huge-head", "HEAD", "/blobs/")
        run = _save(hostile, bucket, tmp_path, src, "huge-head")
        assert hostile.rule.fired
        assert run.code == 0, run.output  # sent again; not copied onto itself (moto lacks it)
        hostile.rule = None
        back = _restore(hostile, bucket, tmp_path, "--key", "huge-head")
    assert back.code == 0 and "cache-hit: true" in back.output, back.output


def test_a_pin_never_takes_a_blob_of_another_size_as_its_data(moto_endpoint, saved, tmp_path):
    """The HEAD a pin checks its data with claims the blob is there, old and 2^62 bytes: pinning
    used to make it young by copying it onto itself (in up to 10,000 UploadPartCopy requests, by
    the size claimed, where CopyObject is refused); a blob of another size is not the data."""
    bucket, _ = saved
    src = _one_file(tmp_path / "w", 2 << 20)
    with HostileS3(moto_endpoint) as hostile:
        saved_now = _save(hostile, bucket, tmp_path, src, "to-pin")
        assert saved_now.code == 0, saved_now.output
        digest = re.search(r"manifest: ([0-9a-f]{64})", saved_now.output)
        assert digest, saved_now.output
        hostile.rule = Rule("huge-head", "HEAD", "/blobs/")
        args = ["--manifest", digest.group(1), "--reason", "release v1"]
        pinned = run_s3("pin", bucket, hostile.url, _env(tmp_path), *args)
        assert hostile.rule.fired, (pinned.output, hostile.seen)
    one_error_line(pinned, 3)
    assert "missing" in pinned.output, pinned.output


def test_a_server_without_multipart_is_named_by_the_operation(moto_endpoint, saved, tmp_path):
    bucket, _ = saved
    src = _one_file(tmp_path / "big", 6 << 20)
    with HostileS3(moto_endpoint) as hostile:
        hostile.rule = Rule("no-multipart", "POST", "uploads")
        run = _save(hostile, bucket, tmp_path, src, GPUCI_MULTIPART_THRESHOLD="5MiB")
    assert hostile.rule.fired
    one_error_line(run, 3)
    assert "S3 CreateMultipartUpload of" in run.output and "400" in run.output


def test_prune_stops_aborting_open_uploads_once_the_store_fails_one(moto_endpoint, tmp_path):
    """A store that stalls every AbortMultipartUpload held prune its time limit (8 timeouts)
    for each open upload it listed, up to 10,000 a run: weeks at the default timeout. The
    first abort that fails ends the leftovers, with a warning counting the rest (a later prune
    goes on); the prune itself still succeeds."""
    bucket = new_s3_bucket(moto_endpoint, "hostile-prune-")
    client = fake_s3_client(moto_endpoint)
    for n in range(3):  # moto dates every upload 2010: all past the grace
        client.create_multipart_upload(Bucket=bucket, Key=f"c/blobs/sha256/ab/{n:064x}")
    with HostileS3(moto_endpoint) as hostile:
        hostile.rule = Rule("silent", "DELETE", "uploadId=")
        env = _env(tmp_path, GPUCI_S3_TIMEOUT="0.5")
        run = run_s3("prune", bucket, hostile.url, env, "--older-than", "0s", "--grace", "0s")
    assert hostile.rule.fired, hostile.seen
    aborted = {target for method, target in hostile.seen if "uploadId=" in target}
    assert run.code == 0, run.output
    assert len(aborted) == 1, aborted  # one upload tried (its retries included), not three
    assert "2 more were not tried" in run.output, run.output
