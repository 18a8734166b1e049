"""From inputs to a list of downloads: URL lines, ``url sha256 dest`` files, checksums, mirrors.

Each ``url`` line is ``URL [SHA256|-] [DEST]``; a line ``@FILE`` reads such lines from FILE.
``sha256`` is a hex digest (one URL) or the URL of a ``.sha256`` / ``SHA256SUMS`` file, matched
by file name. A mirror ending in ``/`` is a base that the file name is appended to; any other
mirror is a full URL and only makes sense for a single file.

Everything here is checked before the first request, so a malformed URL, header or
destination is one line and exit 2 (never a crash halfway through a batch).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from gpuci import untrusted_json
from gpuci.errors import FetchError, InputError
from gpuci.fetch._partial import META, meta_path
from gpuci.fetch._urls import SCHEMES, check_url, public_url, url_secrets
from gpuci.files import INCOMPLETE, incomplete_path
from gpuci.httpclients import origin
from gpuci.redact import excerpt

if TYPE_CHECKING:
    import httpx

    from gpuci.fetch._policy import FetchPolicy

__all__ = [
    "Job",
    "build_jobs",
    "fetch_checksum",
    "file_name",
    "parse_headers",
    "public_url",  # re-exported from urls.py, where it moved
    "url_secrets",
]

_HEX = re.compile(r"^[0-9a-fA-F]{64}$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_HEADER_VALUE = re.compile(r"^[\t\x20-\x7e]*$")  # what HTTP/1.1 lets a value hold, as ASCII
# Headers retry-fetch sets itself: a second copy would defeat resume, identity or framing.
_OURS = frozenset({"accept-encoding", "range", "if-range", "content-length", "transfer-encoding"})
_LIST_MAX = 16 << 20  # an @FILE url list: far more than any real list, far less than RAM
_CHECKSUMS_MAX = 16 << 20
_NAME_MAX = 255  # bytes in one file name (ext4, xfs, btrfs)


@dataclass(frozen=True)
class Job:
    url: str
    dest: Path
    sha256: str | None = None
    sha256_url: str | None = None
    mirrors: tuple[str, ...] = field(default_factory=tuple)


def is_url(text: str) -> bool:
    """Says http(s) by its scheme; whether the rest parses is :func:`check_url`'s job."""
    scheme, sep, _rest = text.partition("://")
    return bool(sep) and scheme.lower() in SCHEMES


def file_name(url: str) -> str:
    return PurePosixPath(unquote(urlsplit(url).path)).name


def parse_headers(lines: Sequence[str] | None, mask: Callable[[str], None]) -> dict[str, str]:
    """``Name: value`` lines; each value is masked before anything can print it."""
    headers: dict[str, str] = {}
    for line in lines or ():
        name, sep, value = line.partition(":")
        name, value = name.strip(), value.strip()
        mask(value)
        scheme, _, credential = value.partition(" ")
        if credential.strip() and scheme.isalpha():  # "Bearer TOKEN": the token alone leaks too
            mask(credential.strip())
        if not sep or not _HEADER_NAME.match(name):
            raise InputError(
                "input 'headers' has a line that is not 'Name: value'",
                hint="write one header per line, e.g. 'Authorization: Bearer $TOKEN'",
            )
        if name.lower() in _OURS:
            raise InputError(
                f"input 'headers' sets {name}, which is set by retry-fetch itself",
                hint=f"remove the {name} line; resume and identity encoding need it to be ours",
            )
        if not _HEADER_VALUE.match(value):  # never print the value: it is a secret
            bad = next(c for c in value if not _HEADER_VALUE.match(c))
            kind = "a non-ASCII character" if ord(bad) > 0x7E else "a control character"
            raise InputError(
                f"input 'headers': the value of {name} holds {kind} at position "
                f"{value.index(bad) + 1}; HTTP header values are printable ASCII",
                hint="percent-encode or base64 the value, as the server expects",
            )
        headers[name] = value
    return headers


def _digest(text: str, where: str) -> str | None:
    if text in ("", "-"):
        return None
    if not _HEX.match(text):
        raise InputError(
            f"{where}: '{excerpt(text, 80)}' is not a sha256 (64 hex digits)",
            hint="give the 64-hex-digit digest, '-' for none, or a .sha256 URL",
        )
    return text.lower()


def _lines(raw: Sequence[str], base: Path) -> list[tuple[list[str], str]]:
    """Expand ``@FILE`` entries; returns (fields, where) pairs for messages."""
    out: list[tuple[list[str], str]] = []
    for number, line in enumerate(raw, 1):
        if line.startswith("@"):
            path = (base / line[1:].strip()).expanduser()
            text = _read_list(path)
            for inner, item in enumerate(text.splitlines(), 1):
                item = item.strip()
                if item and not item.startswith("#"):
                    out.append((item.split(), f"{path}:{inner}"))
        else:
            out.append((line.split(), f"url line {number}"))
    return out


def _read_list(path: Path) -> str:
    """The ``@FILE`` list, read as a regular file only (it may sit in a checkout a PR wrote: a
    FIFO there would hold ``open`` for ever), at most :data:`_LIST_MAX` bytes of UTF-8."""
    return untrusted_json.read_input(
        path,
        "the url list",
        "point '@' at a UTF-8 list of URLs, one 'URL [SHA256|-] [DEST]' per line (relative to "
        "the working directory)",
        _LIST_MAX,
    )


def _path(text: str, where: str) -> Path:
    """A destination as typed: ``~`` expanded; a NUL or unknown ``~user`` is bad input."""
    if "\x00" in text:
        raise InputError(f"{where}: the destination holds a NUL byte", hint="fix the path")
    try:
        return Path(text).expanduser()
    except RuntimeError:
        raise InputError(
            f"{where}: cannot find the home folder in '{text[:120]}'",
            hint="write the path without ~user, or with a user that exists here",
        ) from None


def _check_name(target: Path, where: str) -> None:
    """Room for ``<name>.incomplete.json`` beside the file, or the download fails at the end."""
    size = len(os.fsencode(target.name)) + len(META)
    if size > _NAME_MAX:
        raise InputError(
            f"{where}: the file name '{target.name[:60]}...' is too long: with '{META}' it "
            f"is {size} bytes, over the {_NAME_MAX} a file system allows",
            hint=f"use a file name of at most {_NAME_MAX - len(META)} bytes",
        )


def build_jobs(
    urls: Sequence[str],
    dest: str | None,
    sha256: str | None,
    mirrors: Sequence[str] | None,
    cwd: Path,
) -> list[Job]:
    """Validate every input up front, so a typo fails before any byte moves."""
    entries = _lines(urls, cwd)
    if not entries:
        raise InputError("input 'url' names no URL", hint="pass --url URL (one per line)")
    single = len(entries) == 1
    dest_path = _path(dest, "input 'dest'") if dest else None
    if dest_path is not None and not dest_path.is_absolute():
        dest_path = cwd / dest_path
    as_folder = not single or bool(
        dest and dest_path is not None and (dest.endswith("/") or _is_real_folder(dest_path))
    )
    folder = dest_path if as_folder else None
    sha_url = check_url(sha256.strip(), "input 'sha256'") if sha256 and is_url(sha256) else None
    sha_hex = _digest(sha256.strip(), "input 'sha256'") if sha256 and not sha_url else None
    if sha_hex and not single:
        raise InputError(
            "input 'sha256' is one digest but 'url' names several files",
            hint="put 'url sha256 dest' on each url line, or pass a SHA256SUMS URL",
        )
    _check_mirrors(mirrors or (), single)
    jobs = [
        _job(fields, where, sha_hex, sha_url, dest_path, folder, single, cwd, mirrors or ())
        for fields, where in entries
    ]
    _check_distinct(jobs)
    return jobs


def _is_real_folder(path: Path) -> bool:
    """A folder itself, not a link to one: a link planted at dest is replaced by the file
    (as a link to a file is), never followed into where it points; ``dest/`` still names a
    folder through a link explicitly."""
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def _check_mirrors(mirrors: Sequence[str], single: bool) -> None:
    """Mirrors are http(s) URLs; a full URL (not a base ending in '/') fits one file only."""
    full_mirrors = [m for m in mirrors if not m.endswith("/")]
    if full_mirrors and not single:
        raise InputError(
            f"mirror '{full_mirrors[0]}' is a full URL but 'url' names several files",
            hint="give mirrors as base URLs ending in '/', the file name is appended",
        )
    for mirror in mirrors:
        if not is_url(mirror):
            raise InputError(f"mirror '{mirror}' is not an http(s) URL", hint="fix the mirrors")
        check_url(mirror, "input 'mirrors'")


def _job(
    fields: list[str],
    where: str,
    sha_hex: str | None,
    sha_url: str | None,
    dest_path: Path | None,
    folder: Path | None,
    single: bool,
    cwd: Path,
    mirrors: Sequence[str],
) -> Job:
    """One ``URL [SHA256|-] [DEST]`` line as a job: its checksum, destination and mirrors."""
    if len(fields) > 3 or not is_url(fields[0]):
        raise InputError(
            f"{where}: expected 'URL [SHA256|-] [DEST]' with an http(s) URL, got "
            f"'{excerpt(' '.join(fields), 120)}'",
            hint="one download per line: the URL, optionally its sha256 and destination",
        )
    url = check_url(fields[0], where)
    digest = _digest(fields[1], where) if len(fields) > 1 else sha_hex
    name = file_name(url)
    if len(fields) > 2:
        target = _path(fields[2], where)
        target = target if target.is_absolute() else (folder or cwd) / target
    elif single and dest_path is not None and folder is None:
        target = dest_path
    elif name:
        target = (folder or cwd) / name
    else:
        raise InputError(
            f"{where}: cannot name a file after '{url}' (no file name in its path)",
            hint="give a destination: the dest input, or a third field on the url line",
        )
    _check_name(target, where)
    job_mirrors = tuple(m + name if m.endswith("/") else m for m in mirrors)
    for mirror in job_mirrors:
        check_url(mirror, "input 'mirrors'")
    return Job(url, target, digest, None if digest else sha_url, job_mirrors)


def _check_distinct(jobs: list[Job]) -> None:
    """No two downloads may write the same file, nor one the other's partial or sidecar
    (``f`` and ``f.incomplete`` as two dests: one would replace the other's bytes)."""
    seen: dict[Path, str] = {}
    for job in jobs:
        if job.dest in seen:
            raise InputError(
                f"'{seen[job.dest]}' and '{job.url}' would both be written to {job.dest}",
                hint="give each URL its own destination",
            )
        seen[job.dest] = job.url
    working = {side: job.url for job in jobs for side in _working_files(job.dest)}
    for job in jobs:
        if job.dest in working:
            raise InputError(
                f"'{job.url}' would be written to {job.dest}, where '{working[job.dest]}' "
                "keeps its partial download",
                hint=f"give each URL its own destination, not another's plus '{INCOMPLETE}'",
            )


def _working_files(dest: Path) -> tuple[Path, Path]:
    """The files a download of ``dest`` writes beside it until it is whole."""
    return incomplete_path(dest), meta_path(dest)


def parse_checksums(text: str, name: str, where: str) -> str:
    """``HEX``, ``HEX  name`` or ``HEX *name`` lines (sha256sum output): the digest for name."""
    entries: list[tuple[str, str]] = []
    for line in text.splitlines():
        parts = line.strip().split(None, 1)
        if parts and _HEX.match(parts[0]):
            entries.append(
                (parts[0].lower(), parts[1].lstrip("*").strip() if len(parts) > 1 else "")
            )
    if len(entries) == 1 and entries[0][1] in ("", name):
        return entries[0][0]
    for digest, entry_name in entries:
        if entry_name == name or PurePosixPath(entry_name).name == name:
            return digest
    raise InputError(
        f"{where} has no sha256 for '{name}'",
        hint="point sha256 at a checksum file that lists this file, or give the digest",
    )


def home_credentials(target: str, url: str, headers: Mapping[str, str] | None) -> dict[str, str]:
    """The user's headers for a request to ``target`` (a mirror, a checksum file) when it is on
    the origin of ``url``, the download's first URL (a private repo's mirror or SHA256SUMS
    needs them); a target on another origin never sees them. The one rule for both."""
    return dict(headers or {}) if origin(target) == origin(url) else {}


def fetch_checksum(
    client: httpx.Client,
    url: str,
    name: str,
    policy: FetchPolicy,
    credentials: Mapping[str, str] | None = None,
    started: float | None = None,
) -> str:
    """Fetch a small checksum file with the same retry policy as the downloads.

    Read as sent (identity only, at most 16 MiB), so a hostile checksum URL can neither
    inflate a gzip bomb nor stream an endless body into memory; and within the policy's
    deadline counted from ``started`` (the job's start; now when None), waits, headers and
    body included, so one trickling its body cannot hold the job past it; and at ``min_rate``
    after its first ``timeout``, as a download's body (:class:`gpuci.fetch._job.BodyWatch`).
    """
    import time

    import httpx

    from gpuci.fetch._client import IDENTITY, check_identity, open_response, read_capped
    from gpuci.fetch._job import BodyWatch
    from gpuci.fetch._policy import RetryableError, check_retryable
    from gpuci.httpclients import Deadline, stopped

    fix = "check the sha256 URL, or give the digest itself"
    started = time.monotonic() if started is None else started
    deadline = Deadline.after(policy.deadline, started)
    try:
        for attempt in policy.retrying(started, cancel=stopped(client)):
            with (
                attempt,
                open_response(
                    client,
                    "GET",
                    url,
                    headers=IDENTITY,
                    credentials=credentials,  # home_credentials: same origin only
                    timeout=policy.timeout,
                    deadline=deadline,
                ) as resp,
            ):
                check_retryable(resp, url)
                if resp.status_code != 200:
                    raise FetchError(f"HTTP {resp.status_code} for the checksum file {url}", fix)
                check_identity(resp)
                what = f"the checksum file {url}"
                body = read_capped(resp, _CHECKSUMS_MAX, what, BodyWatch(policy))
    except (httpx.HTTPError, RetryableError) as exc:
        hint = getattr(exc, "hint", None) or fix  # a body under min-rate says what sets it
        raise FetchError(f"cannot fetch the checksum file {url}: {exc}", hint=hint) from exc
    except FetchError as exc:
        raise FetchError(exc.message, exc.hint or fix) from exc
    return parse_checksums(body.decode("utf-8", "replace"), name, url)
