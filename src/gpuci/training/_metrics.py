"""Read the metrics a training run wrote: flat or nested JSON, or the last line of a JSONL log.

Nested objects flatten to dotted names (``{"eval": {"accuracy": 0.9}}`` -> ``eval.accuracy``), so
rules name metrics the same way whatever shape the file has. Values are kept as parsed: judging
them (NaN, strings, booleans) is the gate's job, because a bad value must fail, never vanish.
For the same reason a value may not hide another: a key named twice in an object
(``{"acc": 0.1, "acc": 0.99}``) or two leaves with one dotted name (``{"a.cc": 1, "a": {"cc":
0.1}}``) make the file unusable, in one line, instead of the last one silently winning.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
from collections import deque
from pathlib import Path
from typing import Any

from gpuci import untrusted_json
from gpuci.errors import CheckFailed, InputError
from gpuci.redact import clip
from gpuci.training._artifacts import in_workspace, open_resolved
from gpuci.units import cap_text

Metrics = dict[str, Any]
_JSONL_SUFFIXES = (".jsonl", ".ndjson")


class NameCollision(ValueError):
    """Two leaves flatten to one dotted name (``{"a.cc": 1, "a": {"cc": 0.1}}``)."""


def flatten(data: Any, prefix: str = "") -> Metrics:
    """Dotted names for every leaf; list items get their index (``losses.0``).

    Raises:
        NameCollision: two leaves would get the same name; keeping either would hide the other.
    """
    if not isinstance(data, dict | list):
        return {prefix: data}
    flat: Metrics = {}
    _flatten_into(flat, data, prefix)
    return flat


def _flatten_into(flat: Metrics, data: dict[Any, Any] | list[Any], prefix: str) -> None:
    """Each leaf of ``data`` into ``flat`` under its dotted name: one dict for the whole tree,
    so a name seen at any depth before is a collision."""
    if isinstance(data, dict):
        items = ((str(k), v) for k, v in data.items())
    else:
        items = ((str(i), v) for i, v in enumerate(data))
    for key, value in items:
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict | list) and value:
            _flatten_into(flat, value, name)
        elif name in flat:
            raise NameCollision(name)
        else:
            flat[name] = value


# Lines of a log looked at, from its end: its last record is among them (after a torn line,
# or a few lines of text). Every line was tried: 16 MiB of lines that are no JSON took 90 s and
# 500 MB to refuse one by one.
MAX_LOG_LINES = 1000


def _last_jsonl_object(path: Path, text: str) -> Any:
    """The last non-blank line of the last MAX_LOG_LINES that parses: a log may end in a line
    torn by a killed job."""
    for line in reversed(text.rsplit("\n", MAX_LOG_LINES)[-MAX_LOG_LINES:]):
        if not line.strip():
            continue
        try:
            return untrusted_json.loads(line, unique_keys=True)
        except untrusted_json.DuplicateKey as exc:  # a whole line, not a torn one: it fails
            raise _unusable("metrics log", path, str(exc)) from None
        except untrusted_json.Unusable:
            continue
    looked = f" in its last {MAX_LOG_LINES:,} lines" if text.count("\n") >= MAX_LOG_LINES else ""
    raise CheckFailed(
        f"metrics log {path} has no JSON line{looked}",
        hint="make the training script append one JSON object per line",
    )


def _unusable(what: str, path: Path, why: str) -> CheckFailed:
    return CheckFailed(
        f"{what} file {path} is not usable metrics: {why}",
        hint='write one JSON object of numbers with json.dump, e.g. {"eval": {"accuracy": 0.93}}',
    )


def _read(path: Path, is_log: bool) -> tuple[str, str]:
    """The text to judge and the sha256 of the very bytes it is: one open, one read. The PR's
    training may leave a process that swaps the file once it is read; a second open to hash
    it would put another file's digest beside the verdict on this one.

    A log is hashed whole, up to the size it states (one still being appended to: its bytes
    then), and only its last :data:`untrusted_json.MAX_BYTES` kept, from its first whole line.
    """
    limit = untrusted_json.MAX_BYTES
    with open_resolved(path) as handle:
        if not is_log:
            data = handle.read(limit + 1)
            if len(data) > limit:
                raise untrusted_json.Unusable(f"it is over {cap_text(limit)}")
            try:
                return data.decode("utf-8"), hashlib.sha256(data).hexdigest()
            except UnicodeDecodeError:
                raise untrusted_json.Unusable("it is not UTF-8 text") from None
        fd, hasher = handle.fileno(), hashlib.sha256()
        size, offset, kept, tail = os.fstat(fd).st_size, 0, 0, deque[bytes]()
        while offset < size and (block := os.pread(fd, min(1 << 20, size - offset), offset)):
            hasher.update(block)
            offset, kept = offset + len(block), kept + len(block)
            tail.append(block)
            while kept - len(tail[0]) >= limit:  # what is left still holds the last `limit`
                kept -= len(tail.popleft())
    data = b"".join(tail)[-limit:]
    if offset > len(data):  # a cut: the first line kept is a part of one
        cut = data.find(b"\n")
        data = data[cut + 1 :] if cut >= 0 else b""
    return data.decode("utf-8", errors="replace"), hasher.hexdigest()


def _found(path: Path, what: str, missing_ok: bool) -> Path | None:
    """Where to read ``path``: itself resolved, inside its workspace; None when it is absent
    and ``missing_ok``. The training wrote it, and may have made it a link to a secret of the
    runner's (a JSON of credentials, whose values provenance would record and attest)."""
    try:
        present = path.is_file()
    except OSError as exc:  # a name too long, a link into /proc/1/cwd (EACCES): no missing file
        raise _unusable(what, path, f"it cannot be read ({exc.strerror or exc})") from None
    if not present:
        if missing_ok:
            return None
        raise CheckFailed(
            f"{what} file {path} not found",
            hint="make the training/evaluation step write it, or fix the path",
        )
    target, why = in_workspace(path)
    if target is None:
        # Where it leads: a folder of it may be the link (``outputs/`` on a scratch disk), and
        # "its real path" was left for the reader to find.
        try:
            real = os.path.realpath(path)
        except OSError:  # cannot be resolved: ``why`` says so
            real = ""
        raise CheckFailed(
            f"{what} file {path} is not usable metrics: it {why}"
            + (f", to {real}" if real else ""),
            hint=f"name its real path{f', {real},' if real else ''} or write the file itself there",
        )
    return Path(target)


def load(path: str | Path, *, what: str = "metrics", missing_ok: bool = False) -> Metrics | None:
    """Load and flatten a metrics file; ``None`` only when it is absent and ``missing_ok``.

    The file is the PR's code's output, so it is read as hostile: at most
    :data:`untrusted_json.MAX_BYTES` (a log: its last that many bytes), nesting and integer
    length capped; anything else is one :class:`CheckFailed` line, never a traceback.
    """
    return load_hashed(path, what=what, missing_ok=missing_ok)[0]


def load_hashed(
    path: str | Path, *, what: str = "metrics", missing_ok: bool = False
) -> tuple[Metrics | None, str]:
    """:func:`load`, and the sha256 of the bytes judged ("" when absent): what a record says
    was judged is what was, whatever the file holds by the time the record is written."""
    path = Path(path)
    target = _found(path, what, missing_ok)
    if target is None:
        return None, ""
    is_log = path.suffix.lower() in _JSONL_SUFFIXES
    try:
        if not is_log and path.suffix.lower() != ".json":
            # A .log or .txt may be a long JSON-lines log: only its end matters.
            is_log = target.stat().st_size > untrusted_json.MAX_BYTES
        text, sha256 = _read(target, is_log)
    except OSError as exc:
        raise InputError(
            f"cannot read {what} file {path}: {exc.strerror or exc}", hint="check the file"
        ) from None
    except untrusted_json.Unusable as exc:
        raise _unusable(what, path, str(exc)) from None
    if is_log:
        data = _last_jsonl_object(path, text)
    else:
        try:
            data = untrusted_json.loads(text, unique_keys=True)
        except untrusted_json.Unusable as exc:
            # A .log or .txt holding JSON lines is still a log: try its last line.
            if "\n" in text.strip() and str(exc).startswith("it is not valid JSON"):
                data = _last_jsonl_object(path, text)
            else:
                raise _unusable(what, path, str(exc)) from None
    if not isinstance(data, dict):
        raise CheckFailed(
            f"{what} file {path} holds a JSON {type(data).__name__}, not an object",
            hint='write an object such as {"eval": {"accuracy": 0.93}}',
        )
    try:
        return flatten(data), sha256
    except NameCollision as exc:
        raise CheckFailed(
            f"{what} file {path} is not usable metrics: "
            f"two values are both named {clip(str(exc), 80)!r}",
            hint="give each value one name: a dotted key and a nested one may not meet",
        ) from None


class AmbiguousName(InputError):
    """A rule's name is the dotted suffix of several metrics (``accuracy``: ``eval.accuracy``
    and ``junk.accuracy``): the metrics file is the PR's, so its judge fails the rule's row."""

    def __init__(self, name: str, matches: list[str]) -> None:
        self.matches = matches
        shown = ", ".join(clip(m, 60) for m in matches[:_MAX_LISTED])
        more = len(matches) - _MAX_LISTED
        super().__init__(
            f"metric '{clip(name, 60)}' is ambiguous: {len(matches)} matches ({shown}"
            + (f" and {more} more)" if more > 0 else ")"),
            hint="name the metric in full, with its dotted path",
        )


_MAX_LISTED = 3  # names an ambiguity lists: the file may hold 200,000 that match


def lookup(metrics: Metrics, name: str) -> tuple[str, Any] | None:
    """Find ``name``: exactly, else as the unique dotted suffix (``accuracy`` -> ``eval.accuracy``).

    Returns ``(full name, value)`` or ``None`` when absent.

    Raises:
        AmbiguousName: the name is the suffix of several metrics; never a guess.
    """
    if name in metrics:
        return name, metrics[name]
    matches = sorted(k for k in metrics if k.endswith("." + name))
    if len(matches) > 1:
        raise AmbiguousName(name, matches)
    if matches:
        return matches[0], metrics[matches[0]]
    return None


def as_number(value: Any) -> tuple[float | None, str]:
    """``(number, "")`` for a finite int/float, else ``(None, why)``: booleans are not numbers,
    nor is an integer beyond a float's range (JSON allows 400 digits; float() would raise)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        kind = "null" if value is None else type(value).__name__
        return None, f"not a number ({kind})"
    if isinstance(value, int) and abs(value) > sys.float_info.max:  # exact: int vs float
        return None, "too large (beyond a float's range)"
    number = float(value)
    if math.isnan(number):
        return None, "NaN"
    if math.isinf(number):
        return None, "infinite"
    return number, ""
