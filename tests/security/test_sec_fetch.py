"""retry-fetch against a hostile server and a hostile shared folder (issue 11, items 4 6 7 8 9).

Each test is an attack as a hostile server or a job sharing the runner would run it, and
asserts on what reached the attacker or the disk. The CLI runs in a subprocess where the
user's view matters (exit code, one line, no traceback); the shared-folder cases run in
process, where the owner check can be pointed at another uid (the tests run as root).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hostile_http import (
    HostileServer,
    gzip_bomb,
    serve_bytes,
    serve_endless,
    serve_gzip,
    serve_redirect,
)

from gpuci.cli import main, run_command
from gpuci.commands import _retry_fetch as retry_fetch
from gpuci.errors import InputError
from gpuci.fetch import FetchPolicy, fetch_file
from gpuci.runtime import Result, Runtime

DATA = os.urandom(200_000)
SHA = hashlib.sha256(DATA).hexdigest()
FAST = ["--attempts", "2", "--timeout", "2s", "--max-wait", "10ms", "--deadline", "30s"]
POLICY = FetchPolicy(attempts=2, timeout=2, deadline=30, max_wait=0.01, initial_wait=0.01)
MiB = 1 << 20

SECRETS = {
    "Authorization": "Bearer auth-secret-1",
    "X-Api-Key": "api-key-secret-2",
    "PRIVATE-TOKEN": "gitlab-secret-3",
    "Cookie": "session=cookie-secret-4",
    "X-Custom-Thing": "custom-secret-5",
}


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run as a user's shell would: in the job's folder, with no runner variables set."""
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith(("INPUT_", "GITHUB_", "GITLAB_", "GPUCI_", "RUNNER_")):
            monkeypatch.delenv(name)


def cli(tmp_path: Path, *args: str) -> tuple[int, str]:
    """``python -m gpuci retry-fetch ARGS`` in process (fast): exit code and all output."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(["retry-fetch", *FAST, *args])
    return code, out.getvalue()


def one_clear_line(text: str) -> None:
    assert "Traceback" not in text and "internal error" not in text, text
    assert "gpu-ci bug" not in text, text


def cli_one_line(tmp_path: Path, code: int, *args: str) -> str:
    """:func:`cli` that must exit ``code`` with a clear line, no traceback: its output, for
    the test to check what the line names (the shape of every refusal here)."""
    rc, text = cli(tmp_path, *args)
    assert rc == code, text
    one_clear_line(text)
    return text


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def other():
    """A second origin: same host, another port."""
    with HostileServer() as srv:
        yield srv


# ----- item 4: credentials never follow a redirect to another origin ---------------------------
@pytest.mark.parametrize("where", ["other-port", "other-host"])
def test_user_headers_are_dropped_when_a_redirect_changes_origin(tmp_path, evil, other, where):
    target = other.url("/file") if where == "other-port" else evil.url("/file", host="localhost")
    evil.route("/start", serve_redirect(target))
    evil.route("/file", serve_bytes(DATA))
    other.route("/file", serve_bytes(DATA))
    headers = "\n".join(f"{k}: {v}" for k, v in SECRETS.items())
    rc, text = cli(tmp_path, "--url", evil.url("/start"), "--dest", "f.bin", "--headers", headers)
    assert rc == 0, text
    assert (tmp_path / "f.bin").read_bytes() == DATA
    first = evil.requests("/start")[0]
    assert all(first.header(k) == v for k, v in SECRETS.items())  # the trusted origin got them
    landed = other.requests("/file") if where == "other-port" else evil.requests("/file")
    assert landed, "the redirect was not followed"
    received = json.dumps([r.headers for r in landed])
    for name, value in SECRETS.items():
        assert value not in received, f"{name} leaked to {target}: {received}"


def test_same_origin_redirect_keeps_the_headers(tmp_path, evil):
    evil.route("/start", serve_redirect("/file"))
    evil.route("/file", serve_bytes(DATA))
    rc, text = cli(
        tmp_path, "--url", evil.url("/start"), "--dest", "f.bin", "--headers", "X-Api-Key: k-1"
    )
    assert rc == 0, text
    assert evil.requests("/file")[0].header("X-Api-Key") == "k-1"


def test_headers_stay_dropped_when_another_origin_redirects_back(tmp_path, evil, other):
    """A -> B -> A: B chose the way back, so nothing it could see the reply to gets them."""
    evil.route("/start", serve_redirect(other.url("/hop")))
    other.route("/hop", serve_redirect(evil.url("/file")))
    evil.route("/file", serve_bytes(DATA))
    rc, text = cli(
        tmp_path, "--url", evil.url("/start"), "--dest", "f.bin", "--headers", "X-Api-Key: k-2"
    )
    assert rc == 0, text
    assert other.requests("/hop")[0].header("X-Api-Key") is None
    assert evil.requests("/file")[0].header("X-Api-Key") is None


def test_a_mirror_on_another_origin_gets_no_user_headers(tmp_path, evil, other):
    """``headers`` are sent only to the first URL's origin: a mirror on another origin (a
    public CDN, anyone's server) was sent them all the same (review B, 5); one on the same
    origin still gets them (a private repository's second path)."""
    other.route("/file", serve_bytes(DATA))
    evil.route("/copy", serve_bytes(DATA))
    headers = "\n".join(f"{k}: {v}" for k, v in SECRETS.items())
    for mirror in (other.url("/file"), evil.url("/copy")):
        (tmp_path / "f.bin").unlink(missing_ok=True)
        args = ["--url", evil.url("/gone"), "--mirrors", mirror, "--dest", "f.bin"]
        rc, text = cli(tmp_path, *args, "--headers", headers)
        assert rc == 0, text
        assert (tmp_path / "f.bin").read_bytes() == DATA
    assert all(r.header(k) == v for r in evil.requests() for k, v in SECRETS.items())
    received = json.dumps([r.headers for r in other.requests("/file")])
    assert other.requests("/file") and not [v for v in SECRETS.values() if v in received]


def test_a_cookie_set_by_one_origin_is_not_sent_to_another(tmp_path, evil, other):
    evil.route("/start", serve_redirect(other.url("/file"), cookie="sid=planted-cookie; Path=/"))
    other.route("/file", serve_bytes(DATA))
    rc, text = cli(tmp_path, "--url", evil.url("/start"), "--dest", "f.bin")
    assert rc == 0, text
    assert other.requests("/file")[0].header("Cookie") is None


def test_url_credentials_are_not_sent_to_another_origin(tmp_path, evil, other):
    evil.route("/start", serve_redirect(other.url("/file")))
    other.route("/file", serve_bytes(DATA))
    url = evil.url("/start").replace("http://", "http://user:url-pass-6@")
    rc, text = cli(tmp_path, "--url", url, "--dest", "f.bin")
    assert rc == 0, text
    assert (
        evil.requests("/start")[0]
        .header(
            "Authorization",
        )
        .startswith("Basic ")
    )
    assert other.requests("/file")[0].header("Authorization") is None
    assert "url-pass-6" not in text


def test_redirect_to_a_non_http_scheme_is_one_line(tmp_path, evil):
    evil.route("/start", serve_redirect("file:///etc/passwd"))
    text = cli_one_line(tmp_path, 3, "--url", evil.url("/start"), "--dest", "f.bin")
    assert "redirect" in text and "file:" in text
    assert leftovers(tmp_path) == []


def test_redirect_to_a_300_character_host_is_one_line(tmp_path, evil):
    evil.route("/start", serve_redirect(f"http://{'a' * 300}.example/file"))
    text = cli_one_line(tmp_path, 3, "--url", evil.url("/start"), "--dest", "f.bin")
    assert "host name" in text


# ----- item 6: size limits and encodings ---------------------------------------------------------
def test_an_endless_body_stops_at_max_bytes_and_leaves_nothing(tmp_path, evil):
    evil.route("/endless", serve_endless())
    text = cli_one_line(
        tmp_path, 3, "--url", evil.url("/endless"), "--dest", "f.bin", "--max-bytes", "2MiB"
    )
    assert "max-bytes" in text and "2.0 MiB" in text
    assert leftovers(tmp_path) == []
    assert evil.sent("/endless") < 64 * MiB  # stopped reading, not just stopped writing


def test_a_content_length_over_max_bytes_is_refused_before_any_byte_is_written(tmp_path, evil):
    evil.route("/huge", serve_endless(announce=10 << 40))
    text = cli_one_line(
        tmp_path, 3, "--url", evil.url("/huge"), "--dest", "f.bin", "--max-bytes", "1GiB"
    )
    assert "Content-Length" in text and "max-bytes" in text
    assert leftovers(tmp_path) == []
    assert len(evil.requests("/huge")) == 1  # not retried: another try gets the same answer


def test_max_bytes_has_a_finite_documented_default():
    spec = {i.name: i for i in retry_fetch.COMMAND.inputs}["max-bytes"]
    assert spec.default == "64GiB"
    assert FetchPolicy().max_bytes == 64 << 30
    assert (
        "64GiB"
        in (Path(retry_fetch.__file__).parents[3] / "actions/retry-fetch/README.md").read_text()
    )


def test_a_body_at_max_bytes_exactly_is_fine(tmp_path, evil):
    evil.route("/file", serve_bytes(DATA))
    rc, text = cli(
        tmp_path, "--url", evil.url("/file"), "--dest", "f.bin", "--max-bytes", str(len(DATA))
    )
    assert rc == 0, text
    assert (tmp_path / "f.bin").read_bytes() == DATA


@pytest.mark.parametrize("value", ["lots", "10XB", "-1", "1.5.2GiB"])
def test_a_bad_max_bytes_is_exit_2(tmp_path, value):
    text = cli_one_line(tmp_path, 2, "--url", "http://127.0.0.1:9/x.bin", "--max-bytes", value)
    assert "max-bytes" in text


def test_a_gzip_bomb_sent_despite_identity_is_refused_never_decompressed(tmp_path, evil):
    bomb = gzip_bomb(50 * MiB)
    evil.route("/bomb", serve_gzip(bomb))
    text = cli_one_line(tmp_path, 3, "--url", evil.url("/bomb"), "--dest", "f.bin")
    assert "Content-Encoding" in text and "gzip" in text
    assert evil.requests("/bomb")[0].header("Accept-Encoding") == "identity"
    assert leftovers(tmp_path) == []


def test_a_gzip_checksum_file_is_refused_too(tmp_path, evil):
    evil.route("/file", serve_bytes(DATA))
    evil.route("/SHA256SUMS", serve_gzip(gzip_bomb(20 * MiB)))
    text = cli_one_line(
        tmp_path, 3, "--url", evil.url("/file"), "--sha256", evil.url("/SHA256SUMS"), "--dest", "f"
    )
    assert "Content-Encoding" in text
    assert evil.requests("/SHA256SUMS")[0].header("Accept-Encoding") == "identity"


def test_an_endless_checksum_file_is_cut_off(tmp_path, evil):
    evil.route("/file", serve_bytes(DATA))
    evil.route("/SHA256SUMS", serve_endless())
    text = cli_one_line(
        tmp_path, 3, "--url", evil.url("/file"), "--sha256", evil.url("/SHA256SUMS"), "--dest", "f"
    )
    assert "checksum file" in text and "larger than" in text
    assert evil.sent("/SHA256SUMS") < 256 * MiB


def test_dry_run_does_not_read_an_endless_body(tmp_path, evil):
    """HEAD refused, so the probe falls back to a ranged GET, which the server ignores."""
    evil.route("/endless", serve_endless())
    # exit 0: it answers; how large the body is cannot be known without reading
    text = cli_one_line(
        tmp_path, 0, "--url", evil.url("/endless"), "--dry-run", "--probe", "--timeout", "5s"
    )
    assert "unknown" in text
    assert evil.sent("/endless") < 64 * MiB
    assert leftovers(tmp_path) == []


# ----- item 7: a partial planted in a shared folder --------------------------------------------
def plant_sidecar(dest: Path, url: str, validator: str = '"v1"') -> None:
    """A sidecar as the code before the fix wrote it, plus what the fix needs, so only the
    defence under test can refuse it."""
    meta = {
        "validator": validator,
        "total": None,
        "url_sha256": hashlib.sha256(url.encode()).hexdigest(),
    }
    dest.with_name(dest.name + ".incomplete.json").write_text(json.dumps(meta))


def test_a_planted_partial_symlink_is_never_appended_through(tmp_path, evil):
    evil.route("/file", serve_bytes(DATA))
    victim = tmp_path / "victim" / "authorized_keys"
    victim.parent.mkdir()
    victim.write_bytes(b"ssh-ed25519 AAAA owner\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    dest = shared / "f.bin"
    (shared / "f.bin.incomplete").symlink_to(victim)
    plant_sidecar(dest, evil.url("/file"))
    res = fetch_file(evil.url("/file"), dest, SHA, policy=POLICY)
    assert victim.read_bytes() == b"ssh-ed25519 AAAA owner\n"
    assert dest.read_bytes() == DATA and not dest.is_symlink() and res.resumed_bytes == 0
    assert leftovers(shared) == ["f.bin"]


def test_a_planted_sidecar_symlink_is_never_written_through(tmp_path, evil):
    evil.route("/file", serve_bytes(DATA))
    dest = tmp_path / "shared" / "f.bin"
    dest.parent.mkdir()
    plant_sidecar(dest, evil.url("/file"))  # a JSON file the victim owns, parseable as ours
    victim = tmp_path / "victim.json"
    dest.with_name("f.bin.incomplete.json").rename(victim)
    before = victim.read_text()
    dest.with_name("f.bin.incomplete.json").symlink_to(victim)
    (dest.parent / "f.bin.incomplete").write_bytes(DATA[:1000])
    fetch_file(evil.url("/file"), dest, SHA, policy=POLICY)
    assert victim.read_text() == before
    assert dest.read_bytes() == DATA


def test_a_partial_owned_by_another_user_is_not_resumed(tmp_path, evil, monkeypatch):
    evil.route("/file", serve_bytes(DATA))
    dest = tmp_path / "f.bin"
    (tmp_path / "f.bin.incomplete").write_bytes(b"planted prefix" * 100)
    plant_sidecar(dest, evil.url("/file"))
    real_uid = os.geteuid()
    # the planted file belongs to real_uid; pretend we are someone else
    monkeypatch.setattr("gpuci.ownership.current_uid", lambda: real_uid + 4242)
    res = fetch_file(evil.url("/file"), dest, policy=POLICY)
    assert evil.requests("/file")[0].header("Range") is None
    assert dest.read_bytes() == DATA and res.resumed_bytes == 0


@pytest.mark.parametrize("mode", [0o666, 0o620])
def test_a_group_or_world_writable_partial_is_not_resumed(tmp_path, evil, mode):
    evil.route("/file", serve_bytes(DATA))
    dest = tmp_path / "f.bin"
    part = tmp_path / "f.bin.incomplete"
    part.write_bytes(DATA[:1000])
    part.chmod(mode)
    plant_sidecar(dest, evil.url("/file"))
    res = fetch_file(evil.url("/file"), dest, policy=POLICY)
    assert evil.requests("/file")[0].header("Range") is None
    assert dest.read_bytes() == DATA and res.resumed_bytes == 0


def test_a_partial_is_tied_to_its_url(tmp_path, evil):
    """Same ETag, other URL: the bytes on disk belong to another file, so start over."""
    other_data = os.urandom(len(DATA))
    evil.route("/a", serve_bytes(other_data))
    evil.route("/b", serve_bytes(DATA))
    dest = tmp_path / "f.bin"
    (tmp_path / "f.bin.incomplete").write_bytes(other_data[:50_000])
    plant_sidecar(dest, evil.url("/a"))
    res = fetch_file(evil.url("/b"), dest, policy=POLICY)
    assert evil.requests("/b")[0].header("Range") is None
    assert dest.read_bytes() == DATA and res.resumed_bytes == 0
    assert leftovers(tmp_path) == ["f.bin"]


def test_an_own_partial_for_the_same_url_still_resumes(tmp_path, evil):
    evil.route("/file", serve_bytes(DATA))
    dest = tmp_path / "f.bin"
    (tmp_path / "f.bin.incomplete").write_bytes(DATA[:50_000])
    plant_sidecar(dest, evil.url("/file"))
    res = fetch_file(evil.url("/file"), dest, SHA, policy=POLICY)
    assert evil.requests("/file")[0].header("Range") == "bytes=50000-"
    assert res.resumed_bytes == 50_000 and dest.read_bytes() == DATA


def test_a_planted_directory_as_partial_is_one_line(tmp_path, evil):
    evil.route("/file", serve_bytes(DATA))
    dest = tmp_path / "f.bin"
    (tmp_path / "f.bin.incomplete").mkdir()
    (tmp_path / "f.bin.incomplete" / "x").write_text("x")
    text = cli_one_line(tmp_path, 3, "--url", evil.url("/file"), "--dest", "f.bin")
    assert "f.bin.incomplete" in text and not dest.exists()


# ----- item 9: a full disk ------------------------------------------------------------------------
def run_in_process(flags: dict[str, str], tmp_path: Path) -> tuple[Result, str]:
    out = io.StringIO()
    rt = Runtime({"GPUCI_JOURNAL": str(tmp_path / "journal.jsonl")}, stdout=out, stderr=out)
    values = {"attempts": "2", "timeout": "2s", "max-wait": "10ms", **flags}
    result = run_command(retry_fetch.COMMAND, "retry-fetch", values, rt)
    rt.render(result)
    return result, out.getvalue()


def test_a_full_disk_deletes_the_partial_and_says_so(tmp_path, evil, monkeypatch):
    evil.route("/file", serve_bytes(DATA))
    real_pwritev = os.pwritev
    written = {"n": 0}

    def pwritev_until_full(fd: int, buffers, offset: int) -> int:
        # 100 KB free: a write that does not fit fails (reads may hand over the whole body)
        if written["n"] + sum(len(b) for b in buffers) > 100_000:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        done = real_pwritev(fd, buffers, offset)
        written["n"] += done
        return done

    monkeypatch.setattr("gpuci.fetch._partial._WRITE_BLOCK", 1 << 14)  # small batches
    monkeypatch.setattr("gpuci.fetch._partial.os.pwritev", pwritev_until_full)
    out = tmp_path / "out"
    out.mkdir()
    result, text = run_in_process({"url": evil.url("/file"), "dest": str(out / "f.bin")}, tmp_path)
    assert result.exit_code == 3, text
    one_clear_line(text)
    assert "No space left on device" in result.headline and "deleted" in result.headline
    assert "free space" in result.headline
    assert leftovers(out) == []  # nothing left that keeps the disk full


@pytest.fixture
def tiny_disk(tmp_path: Path):
    """A real 1 MiB file system (tmpfs), where the runner allows mounting one."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)]
    if not shutil.which("mount") or subprocess.run(mount, capture_output=True).returncode:
        pytest.skip("mounting a 1 MiB tmpfs needs root; test_a_full_disk_deletes_... injects it")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_a_real_full_disk_leaves_nothing(tmp_path, evil, tiny_disk):
    evil.route("/endless", serve_endless())  # no Content-Length: only the write can tell
    text = cli_one_line(
        tmp_path, 3, "--url", evil.url("/endless"), "--dest", str(tiny_disk / "f.bin")
    )
    assert "No space left on device" in text and "deleted the partial" in text
    assert leftovers(tiny_disk) == []


def test_a_content_length_larger_than_the_free_space_is_refused_up_front(tmp_path, evil):
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    evil.route("/huge", serve_endless(announce=free + (1 << 30)))
    text = cli_one_line(
        tmp_path, 3, "--url", evil.url("/huge"), "--dest", "f.bin", "--max-bytes", "none"
    )
    assert "free" in text
    assert leftovers(tmp_path) == []


# ----- item 8: malformed input is one line, exit 2 ------------------------------------------------
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--url", "http://[::1"], "not a valid URL"),
        (["--url", "http://[::1/x.bin"], "not a valid URL"),
        (["--url", "http://[zz]/x.bin"], "not a valid URL"),
        (["--url", f"http://{'a' * 300}.com/x.bin"], "host name"),
        (["--url", f"http://{'a' * 70}.com/x.bin"], "host name"),
        (["--url", "http://127.0.0.1:99999/x.bin"], "port"),
        (["--url", "http://127.0.0.1:abc/x.bin"], "port"),
        (["--url", "http:///x.bin"], "no host"),
        (["--url", "http://u:p[w@127.0.0.1/x.bin"], "not a valid URL"),
        (["--url", "http://h/x.bin", "--mirrors", "http://[::1"], "not a valid URL"),
        (["--url", "http://h/x.bin", "--sha256", "http://[::1"], "not a valid URL"),
        (["--url", "http://h/x.bin", "--headers", "X-Api-Key: héllo"], "non-ASCII"),
        (["--url", "http://h/x.bin", "--headers", "X-Api-Key: a\x01b"], "control character"),
        (["--url", "http://h/x.bin", "--headers", "Range: bytes=0-"], "set by retry-fetch"),
        (["--url", "http://h/x.bin", "--dest", "~no-such-user-here/x.bin"], "home folder"),
        (["--url", "http://h/x.bin", "--dest", "d/" + "n" * 245], "too long"),
        (["--url", "http://h/x.bin", "--timeout", "99999999999999w"], "timeout"),
    ],
)
def test_malformed_input_is_one_line_exit_2(tmp_path, args, needle):
    text = cli_one_line(tmp_path, 2, *args)
    assert needle in text, text
    assert "héllo" not in text  # a header value is a secret even when it is malformed
    assert len([ln for ln in text.splitlines() if "(fix: " in ln]) == 1, text


def test_a_url_list_that_is_not_utf8_is_one_line(tmp_path):
    (tmp_path / "urls.txt").write_bytes(b"http://h/\xff\xfe.bin\n")
    text = cli_one_line(tmp_path, 2, "--url", "@urls.txt")
    assert "UTF-8" in text


def test_a_url_list_with_a_nul_in_a_destination_is_one_line(tmp_path):
    (tmp_path / "urls.txt").write_bytes(b"http://h/x.bin - a\x00b\n")
    cli_one_line(tmp_path, 2, "--url", "@urls.txt")


def test_a_huge_url_list_is_refused(tmp_path):
    (tmp_path / "urls.txt").write_bytes(b"#" * (17 << 20))
    text = cli_one_line(tmp_path, 2, "--url", "@urls.txt")
    assert "the url list" in text and "is over 16 MiB" in text


def test_redirect_error_never_prints_a_header_value(tmp_path, evil):
    evil.route("/start", serve_redirect("http://[::1"))
    text = cli_one_line(
        tmp_path, 3, "--url", evil.url("/start"), "--headers", "X-Api-Key: never-print-7"
    )
    assert "never-print-7" not in text


def test_fetch_file_api_rejects_a_bad_url_as_bad_input(tmp_path):
    with pytest.raises(InputError, match="not a valid URL"):
        fetch_file("http://[::1", tmp_path / "x", policy=POLICY)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("http://h/x", "http://h:80/y", True),  # default port spelled out
        ("https://h/x", "https://H:443/y", True),  # host names are case-insensitive
        ("https://h/x", "http://h/x", False),  # a downgrade is another origin: no credentials
        ("http://h/x", "https://h/x", False),  # so is an upgrade (give the https URL instead)
        ("http://h/x", "http://h:8080/x", False),
        ("http://127.0.0.1/x", "http://localhost/x", False),
        ("HTTPS://h/x", "https://h:443/y", True),  # so are schemes
        ("http://[::1]/x", "http://[::1]:80/y", True),  # an IPv6 host, its port defaulted
        ("http://[::1]:8080/x", "http://[::1]/x", False),
        ("http://[::1]/x", "http://[::2]/x", False),
    ],
)
def test_what_counts_as_the_same_origin(a, b, same):
    from gpuci.httpclients import origin

    assert (origin(a) == origin(b)) is same
