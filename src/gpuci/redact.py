"""Text fit to print: secrets and URL credentials redacted, then cut, then kept on one line.

One place for the three rules every message follows, because each broke where it was done by
hand: **redact before truncating** (a key straddling the cut would otherwise print in part),
**redact every URL** (``user:password@`` and secret-looking query parameters, wherever the URL
came from: an input, an error of a library, a server's answer), and **one value, one line**
(CR, LF and other control characters escaped, so no value can start a line of its own, which is
how ``::error`` / ``::add-mask::`` workflow commands would be injected).

Secrets registered here (by :meth:`gpuci.runtime.Runtime.mask`, the moment they are read) are
redacted by :func:`excerpt` too, so code that cuts a server's answer short needs no runtime.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit, urlunsplit

REDACTED = "***"
ELLIPSIS = "…"

# Query parameters whose value is a credential: presigned S3 URLs (X-Amz-Signature,
# X-Amz-Credential, X-Amz-Security-Token), SAS tokens (sig), OAuth (access_token, code), keys.
# Patterns a command may never use are kept as text: ``re`` compiles one on its first use (and
# keeps it), where compiling every pattern at import cost each start-up its share of a ms.
_SECRET_PARAM = (
    r"(?i)(sig|signature|token|secret|passw|pwd|key|auth|credential|session|code|private)"
)
# A URL inside free text: scheme://, then up to whitespace or a quote/bracket that ends it.
_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]{1,15}://[^\s'\"<>`]+")
# ``?name=value`` / ``&name=value`` anywhere in text: a query that lost its URL.
_QUERY_PAIR = re.compile(r"([?&])([A-Za-z0-9_.%-]+)=([^&\s'\"<>`#]*)")
# Bidirectional formatting characters ("Trojan Source", CVE-2021-42574): invisible, and each
# reorders the text after it, so a metric shown as 0.1 can read 1.0: the embeddings and
# overrides (U+202A-202E), the isolates (U+2066-2069) and the marks (U+200E, U+200F, U+061C).
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_BIDI_CHAR = f"[{_BIDI}]"  # compiled on first use, as _SECRET_PARAM
# Control characters other than tab: C0, DEL and C1, each of which could end or rewrite a line,
# and the bidi ones, which rewrite how it reads.
_CONTROL = re.compile(f"[\\x00-\\x08\\x0a-\\x1f\\x7f-\\x9f{_BIDI}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\x1b": "\\e"}

_registered: set[str] = set()


def register(secret: str) -> None:
    """Remember a secret for :func:`secrets_out` (process-wide, like the runner's masker)."""
    if secret and len(secret) >= 3:
        _registered.add(secret)


def secrets_out(text: str, extra: Iterable[str] = ()) -> str:
    """Every registered secret (and each of ``extra``) replaced by ``***``, longest first."""
    secrets = {s for s in (*_registered, *extra) if s and len(s) >= 3}
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def _redact_params(text: str) -> str:
    """``a=1&token=x`` -> ``a=1&token=***``: values of secret-looking names, text otherwise kept.

    Kept verbatim (never re-encoded), so redacting twice gives the same text.
    """
    parts = []
    for part in text.split("&"):
        name, sep, _ = part.partition("=")
        parts.append(
            f"{name}={REDACTED}" if sep and re.search(_SECRET_PARAM, unquote(name)) else part
        )
    return "&".join(parts)


def redact_url(url: str) -> str:
    """A URL fit to print: user and password, and secret-looking query values, as ``***``.

    A query without ``name=value`` pairs (``?abcdef``) may well be a token: all of it goes.
    A URL that cannot be parsed is all secret as far as we know, so it prints as ``***``.
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return REDACTED
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@" + netloc.rpartition("@")[2]
    query = parts.query
    if query:
        query = _redact_params(query) if "=" in query else REDACTED
    fragment = _redact_params(parts.fragment) if "=" in parts.fragment else parts.fragment
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def url_secrets(url: str) -> list[str]:
    """What :func:`redact_url` hides in ``url``, as text for :func:`secrets_out`: its userinfo,
    its password (or token) alone, each also percent-decoded, and secret-looking query values.

    For text that quotes a URL's secret without the URL around it (another program's message),
    where no URL pattern would find it. Read without a URL parser, so no URL is too odd for it.
    """
    authority = url.partition("://")[2]
    for end in "/?#":
        authority = authority.partition(end)[0]
    who = authority.rpartition("@")[0]
    found = [who, who.partition(":")[2] if ":" in who else who]
    query = url.partition("?")[2].partition("#")[0]
    for pair in query.split("&"):
        name, sep, value = pair.partition("=")
        if sep and re.search(_SECRET_PARAM, unquote(name)):
            found.append(value)
    found += [unquote(s) for s in found]
    return sorted({s for s in found if s}, key=len, reverse=True)


def redact_urls(text: str) -> str:
    """Every URL inside ``text`` passed through :func:`redact_url`.

    Punctuation that ends a sentence or a parenthesis is not part of the URL.
    """

    def one(match: re.Match[str]) -> str:
        found = match.group(0)
        url = found.rstrip(").,;:!?]")
        return redact_url(url) + found[len(url) :]

    text = _URL_IN_TEXT.sub(one, text)
    # a query without its scheme and host (a request line a server echoed back)
    return _QUERY_PAIR.sub(lambda m: m.group(0) if m.group(3) == REDACTED else _pair(m), text)


def _pair(match: re.Match[str]) -> str:
    name = match.group(2)
    secret = re.search(_SECRET_PARAM, name)
    return f"{match.group(1)}{name}={REDACTED}" if secret else match.group(0)


def _escaped(match: re.Match[str]) -> str:
    """One control character as its visible escape: ``\\n``, ``\\e``, ``\\x07``, ``\\u202e``."""
    char = match.group(0)
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")


def single_line(text: str) -> str:
    """CR, LF, other control and bidi characters as visible escapes (``\\n``, ``\\r``,
    ``\\x07``, ``\\u202e``).

    Tabs become spaces. What is left cannot start a new line, move the cursor or reorder the
    text after it, so a value printed inside a line stays inside it and reads as written.
    """
    return _CONTROL.sub(_escaped, text.replace("\t", " "))


def escape_bidi(text: str) -> str:
    """Only the bidi characters as visible escapes (``\\u202e``), for text that handles the
    other control characters its own way (a chart label makes them spaces)."""
    return re.sub(_BIDI_CHAR, _escaped, text)


def clip(text: str, limit: int) -> str:
    """At most ``limit`` characters, with an ellipsis when cut. Only for redacted text."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + ELLIPSIS


def excerpt(text: str, limit: int = 200, secrets: Iterable[str] = ()) -> str:
    """A server's or library's text as one printable line: redact, THEN cut, then escape.

    The order is the point: cutting first could leave half a key that no redaction matches.
    """
    clean = redact_urls(secrets_out(text, secrets))
    clean = " ".join(clean.split())  # newlines and runs of spaces: one space
    return single_line(clip(clean, limit))


def json_kind(value: object) -> str:
    """How JSON names a decoded value's type, for "answered a JSON array where..." lines."""
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")
