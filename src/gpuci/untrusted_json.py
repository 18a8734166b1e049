"""JSON that someone else wrote (metrics, baselines, reports a PR's code may have edited, and
every object read back from a cache store: refs, manifests, pins, records).

``json.loads`` on hostile text can end a command with a traceback: 100,000 nested brackets
raise ``RecursionError``, a 5,001-digit integer ``ValueError`` (Python's integer-string limit),
a file of gigabytes is read whole, and ``NaN``/``Infinity``/``1e400`` pass as floats that no
limit can compare (a reservation until Infinity never expires). Here each of those is
:class:`Unusable`, a ``ValueError`` whose message is one line fit to print; callers turn it into
their own one-line error.
"""

from __future__ import annotations

import errno
import itertools
import json
import math
import os
import re
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from gpuci import files
from gpuci.errors import InputError
from gpuci.redact import json_kind
from gpuci.units import cap_text

# Far above any metrics file or report gpu-ci writes, far below what would hurt a runner.
MAX_BYTES = 16 << 20
MAX_DEPTH = 64
# An integer longer than this is no measurement; Python refuses ones over 4,300 digits anyway.
MAX_DIGITS = 400


class Unusable(ValueError):
    """Why the text is not usable JSON, in a few words (no input echoed)."""


class DuplicateKey(Unusable):
    """An object names one key twice (``loads(..., unique_keys=True)``): Python keeps the last
    value, so the first would vanish unseen."""


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) < len(pairs):
        raise DuplicateKey("it names one key twice in an object")
    return found


def _parse_int(digits: str) -> int:
    count = len(digits.lstrip("-"))
    if count > MAX_DIGITS:
        raise Unusable(f"it holds an integer of {count} digits (at most {MAX_DIGITS})")
    return int(digits)


# Every ASCII digit as "0", every other byte as it is: a text holds an integer longer than
# MAX_DIGITS only where its UTF-8 holds a run of that many digits (in a string or not), one
# search away. Without one, the parser's own ``int`` reads every integer as :func:`_parse_int`
# would, and a manifest's thousands of integers skip a Python call each (docs/benchmarks.md,
# "Figures behind the code").
_DIGITS_AS_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
_TOO_MANY_DIGITS = b"0" * (MAX_DIGITS + 1)


# A JSON string (escapes included), and the brackets that nest: enough to measure nesting
# before parsing, in C-speed passes, without recursing as deep as a hostile text goes. The
# closing quote is optional, so a string that never closes is taken to the end in one pass:
# with it required, each escaped quote of an unclosed string started a new scan to the end
# (quadratic; docs/benchmarks.md, "Figures behind the code"). Such text is no JSON; the
# parser then refuses it.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?')
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}  # by byte
_NOT_BRACKET_OR_QUOTE = bytes(b for b in range(256) if b not in b'[]{}"')  # bytes to drop
# A UTF-16 surrogate's escape (``\\ud800``): only text that has one can parse to a string that
# holds a lone surrogate, so only then is the parsed value checked (a pair is one character).
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = "it holds a lone surrogate (\\ud800-\\udfff), which is no Unicode text"


def _nesting(text: str) -> int:
    """How deep the text's arrays and objects nest (brackets inside strings do not count).

    Without a backslash no string holds an escaped quote, so its quotes alternate: opening,
    closing. Every byte but the brackets and quotes is dropped (one C pass over the UTF-8, where
    those bytes are only ever themselves); two quotes in a row then go (an empty string, or two
    strings with nothing between them becoming one); in what is left, every other piece between
    quotes is outside the strings. What the regex strips, several times faster on a warm
    restore's manifest (docs/benchmarks.md, "Figures behind the code")."""
    if "\\" in text:
        brackets = _NOT_A_BRACKET.sub("", _STRING.sub("", text)).encode()
    else:
        kept = text.encode("utf-8", "surrogatepass").translate(None, _NOT_BRACKET_OR_QUOTE)
        kept = kept.replace(b'""', b"")
        brackets = b"".join(kept.split(b'"')[::2]) if b'"' in kept else kept
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)


def encodes(text: str) -> bool:
    """Whether UTF-8 can hold ``text``: a lone surrogate (JSON's ``"\\ud800"``) is no Unicode
    text, and printing, sending or naming a file with it ends in UnicodeEncodeError far from
    where it was read."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _refuse_constant(name: str) -> float:
    raise Unusable(f"it holds {name}, which is no JSON number")


def _parse_float(digits: str) -> float:
    value = float(digits)
    if math.isinf(value):  # 1e400: no measurement, and Infinity compares past every limit
        raise Unusable("it holds a number too large for a float")
    return value


# What a record of gpu-ci's own (a ref, a reservation, a verdict) may hold: finite numbers only.
# Metrics keep Python's reading (a diverged run's loss is NaN, and the gate says so per metric).
_FINITE: dict[str, Any] = {"parse_float": _parse_float, "parse_constant": _refuse_constant}


def loads(text: str | bytes, *, finite: bool = False, unique_keys: bool = False) -> Any:
    """Parse ``text``; :class:`Unusable` for bad syntax, too deep a nesting, too long a number.

    ``finite``: also refuse ``NaN``, ``Infinity`` and floats beyond range (``1e400``), as
    every record gpu-ci itself writes must (:func:`parse_object` does).
    ``unique_keys``: also refuse an object that names a key twice (:class:`DuplicateKey`), as
    a metrics file must (a value may not hide another); off by default, so every other reader
    keeps JSON's usual last-one-wins.
    A string holding a lone surrogate (``"\\ud800"``: valid JSON, no UTF-8 text) is refused
    always, as bytes that are not UTF-8 are.

    The nesting is measured before parsing: a parser's RecursionError is caught too, but where
    the caller's stack is already deep it can surface outside the parser, so it is not relied on.
    """
    if isinstance(text, bytes):
        utf8 = text
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise Unusable("it is not UTF-8 text") from None
    else:
        try:
            utf8 = text.encode("utf-8")
        except UnicodeEncodeError:  # a str that holds a surrogate itself
            raise Unusable(_LONE_SURROGATE) from None
    if _nesting(text) > MAX_DEPTH:
        raise Unusable(f"it is nested more than {MAX_DEPTH} levels deep")
    try:
        hooks: dict[str, Any] = {**(_FINITE if finite else {})}
        if unique_keys:
            hooks["object_pairs_hook"] = _unique_object
        if _TOO_MANY_DIGITS in utf8.translate(_DIGITS_AS_ZERO):
            hooks["parse_int"] = _parse_int
        data = json.loads(text, **hooks)
    except Unusable:
        raise
    except RecursionError:
        raise Unusable(f"it is nested more than {MAX_DEPTH} levels deep") from None
    except json.JSONDecodeError as exc:
        raise Unusable(f"it is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except ValueError as exc:  # e.g. bytes that are not UTF-8
        raise Unusable(f"it is not valid JSON ({str(exc).splitlines()[0][:120]})") from None
    if _ESCAPED_SURROGATE.search(text) and not encodes(json.dumps(data, ensure_ascii=False)):
        raise Unusable(_LONE_SURROGATE)
    return data


def parse_object(
    data: str | bytes,
    limit: int = MAX_BYTES,
    what: str = "",
    fields: Mapping[str, tuple[type, ...]] | None = None,
) -> dict[str, Any]:
    """A JSON object from untrusted bytes: the size first (over ``limit``: refused unparsed),
    then nesting and numbers (:func:`loads`), then the type (an object, not a list or a string),
    then, when ``fields`` names them, the JSON type of each field read (absent or null is fine;
    a JSON ``true`` is no number unless ``bool`` is among its types).

    ``what`` names the kind of object in the size refusal (``over the 64 KiB cap for a ref``).
    Read the fields with :func:`text`, :func:`count` and :func:`mapping`, which check each
    value's type instead of converting whatever came (``int(1e400)`` is an OverflowError).

    Raises:
        Unusable: why, in a few words.
    """
    if len(data) > limit:
        raise Unusable(f"it is over the {cap_text(limit)} cap" + (f" for {what}" if what else ""))
    value = loads(data, finite=True)
    if not isinstance(value, dict):
        raise Unusable(f"it is a JSON {json_kind(value)}, not an object")
    for name, kinds in (fields or {}).items():
        field = value.get(name)
        if field is None:
            continue
        if not isinstance(field, kinds) or (isinstance(field, bool) and bool not in kinds):
            raise Unusable(f"its '{name}' is a JSON {json_kind(field)}")
    return value


def text(obj: dict[str, Any], name: str, default: str = "") -> str:
    """``obj[name]`` when it is a string, else ``default`` (absent or of another type)."""
    value = obj.get(name, default)
    return value if isinstance(value, str) else default


def count(obj: dict[str, Any], name: str, default: int = 0) -> int:
    """``obj[name]`` when it is a non-negative integer below 2**63 (never a bool or a float),
    else ``default``."""
    value = obj.get(name, default)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 63:
        return value
    return default


def mapping(obj: dict[str, Any], name: str) -> dict[str, str]:
    """``obj[name]`` as a str-to-str dict when it is an object of strings, else ``{}``."""
    value = obj.get(name)
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(v, str)}


def open_regular(path: Path, *, follow: bool = True, dir_fd: int | None = None) -> BinaryIO:
    """``path`` (in the folder ``dir_fd``, if given) opened for reading when it is a regular
    file (:func:`gpuci.files.open_regular`: never waiting on a FIFO a PR planted as its metrics
    file), else :class:`Unusable`; unless ``follow``, never through a link. OSError passes
    through for the caller to name."""
    try:
        return os.fdopen(files.open_regular(path, follow=follow, dir_fd=dir_fd), "rb")
    except files.NotRegular:
        raise Unusable("it is not a regular file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise Unusable("it is a symlink, which is not followed here") from None
        raise


def read_text(path: Path, limit: int = MAX_BYTES, *, follow: bool = True) -> str:
    """The whole file as UTF-8, or :class:`Unusable` when it is over ``limit`` bytes (only
    ``limit + 1`` bytes are ever read) or no regular file (:func:`open_regular`). OSError
    passes through for the caller to name."""
    with open_regular(path, follow=follow) as handle:
        return read_handle(handle, limit)


def read_handle(handle: BinaryIO, limit: int = MAX_BYTES) -> str:
    """The rest of an open file as UTF-8 (a caller that reached it by descriptors), or
    :class:`Unusable` past ``limit`` bytes (only ``limit + 1`` are read) or not UTF-8."""
    data = handle.read(limit + 1)
    if len(data) > limit:
        raise Unusable(f"it is over {cap_text(limit)}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Unusable("it is not UTF-8 text") from None


def read_tail(path: Path, limit: int = MAX_BYTES) -> str:
    """The last ``limit`` bytes as UTF-8 text, from the first whole line: the end of a log that
    may be longer than anything worth reading."""
    with open_regular(path) as handle:
        size = handle.seek(0, 2)
        start = max(0, size - limit)
        handle.seek(start)
        data = handle.read(limit)
    if start:
        cut = data.find(b"\n")
        data = data[cut + 1 :] if cut >= 0 else b""
    return data.decode("utf-8", errors="replace")


def read_chunks(
    chunks: Iterable[bytes], limit: int = MAX_BYTES, deadline: float | None = None
) -> bytes:
    """A body that arrives in ``chunks`` (a streamed HTTP answer), or :class:`Unusable` once it
    passes ``limit`` bytes: reading stops there, whatever length the server claims.

    Raises:
        Unusable: over ``limit``.
        TimeoutError: ``time.monotonic()`` passed ``deadline`` (a body trickled a byte per
            read never trips a per-read timeout).
    """
    parts: list[bytes] = []
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise Unusable(f"it is over the {cap_text(limit)} cap")
        parts.append(chunk)
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError("the answer's body came too slowly")
    return b"".join(parts)


def read_input(path: Path, what: str, hint: str, limit: int = MAX_BYTES) -> str:
    """The one reader of a file a user names or a PR may write (a workflow, an action.yml, an
    event payload, a report): :func:`read_text`, each failure one ``InputError`` line naming
    ``what`` and the file, with ``hint`` as the fix."""
    try:
        return read_text(path, limit)
    except OSError as exc:
        raise InputError(
            f"cannot read {what} {path}: {exc.strerror or type(exc).__name__}", hint=hint
        ) from None
    except Unusable as exc:
        raise InputError(f"{what} {path} is not usable: {exc}", hint=hint) from None


def object_input(
    path: Path, what: str, hint: str, limit: int = MAX_BYTES, *, finite: bool = False
) -> dict[str, Any]:
    """The JSON object in such a file (:func:`read_input`, then :func:`loads`); anything else,
    a list or bad JSON, is one ``InputError`` line."""
    try:
        value = loads(read_input(path, what, hint, limit), finite=finite)
    except Unusable as exc:
        raise InputError(f"{what} {path} is not usable: {exc}", hint=hint) from None
    if not isinstance(value, dict):
        raise InputError(f"{what} {path} is a JSON {json_kind(value)}, not an object", hint=hint)
    return value


def name_skipped(skipped: dict[str, str], shown: int = 3) -> str:
    """The objects a reader skipped, for one warning line: ``a (why); b (why) and 4 more``."""
    named = "; ".join(f"{key} ({why})" for key, why in sorted(skipped.items())[:shown])
    more = f" and {len(skipped) - shown} more" if len(skipped) > shown else ""
    return named + more


def skipped_warning(reader: str, skipped: dict[str, str], kind: str) -> str:
    """One warning naming what ``reader`` skipped as not ``kind`` (and how to clear it), or
    empty when nothing was skipped."""
    if not skipped:
        return ""
    return (
        f"{reader}: skipped {len(skipped)} object(s) that are not {kind}: "
        f"{name_skipped(skipped)}; delete them from the store"
    )


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """Every JSON object in ``path``'s last 16 MiB (none when it is absent); a line torn by a
    killed writer is skipped, the rest kept. Any step of the job (the PR's code) may write the
    file, so only its end is read: a job's own records are a few KiB, the newest last."""
    if not path.exists():
        return []
    records = []
    try:
        text = read_tail(path)
    except Unusable:  # not a regular file (a FIFO planted there): no records
        return []
    for line in text.splitlines():
        try:
            item = loads(line)
        except Unusable:  # torn, or written by someone else: not ours
            continue
        if isinstance(item, dict):
            records.append(item)
    return records
