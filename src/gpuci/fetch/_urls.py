"""URLs as inputs: checked once, up front, so a malformed one is a clear line and not a crash.

Python's ``urlsplit``, httpx and the resolver each reject different malformed URLs, each with
its own exception (``ValueError: Invalid IPv6 URL``, ``InvalidURL``, ``UnicodeError`` from the
IDNA codec for a 64-character label). :func:`check_url` runs all three checks and answers with
one :class:`InputError`. Whether credentials may follow a redirect is
:func:`gpuci.httpclients.origin`'s rule.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from gpuci.errors import InputError

SCHEMES = ("http", "https")
_MAX_HOST = 253  # RFC 1035: a DNS name, dots included, without the trailing dot
_MAX_LABEL = 63
_USERINFO = re.compile(r"//[^/?#]*@")


class BadURL(InputError):
    """A URL we cannot send a request to; the message says which part is wrong."""


def check_url(url: str, where: str) -> str:
    """Return ``url`` when httpx can send it and a resolver can look its host up."""
    import httpx  # lazy: the command spec imports this module's package without httpx

    shown = shown_url(url)
    fix = "write a full http(s) URL such as https://host/path/file"
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError for 'abc' or 99999
        parsed = httpx.URL(url)
    except (ValueError, httpx.InvalidURL) as exc:
        what = "has an invalid port" if "port" in str(exc).lower() else "is not a valid URL"
        raise BadURL(f"{where}: '{shown}' {what} ({exc})", hint=fix) from None
    if parts.scheme.lower() not in SCHEMES:
        raise BadURL(f"{where}: '{shown}' is not an http(s) URL", hint=fix)
    if not parts.hostname or not parsed.host:
        raise BadURL(f"{where}: '{shown}' has no host", hint=fix)
    if port == 0:
        raise BadURL(f"{where}: '{shown}' has port 0", hint="give a port from 1 to 65535")
    problem = _host_problem(parsed.raw_host.decode("ascii", "replace"))
    if problem:
        raise BadURL(
            f"{where}: the host name in '{shown}' {problem}",
            hint="check the host name (at most 253 characters, 63 between dots)",
        )
    return url


def url_secrets(url: str) -> list[str]:
    """Parts of a URL that may be credentials: a presigned query string, a password."""
    try:
        parts = urlsplit(url)
        return [s for s in (parts.query, parts.password) if s]
    except ValueError:  # not a URL we will send; shown_url hides the same parts anyway
        return []


def public_url(url: str) -> str:
    """The URL without query string or credentials: safe to keep in journals and reports."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}"


def shown_url(url: str, limit: int = 120) -> str:
    """``url`` fit to print even when it does not parse: no userinfo, no query, bounded."""
    text = _USERINFO.sub("//***@", url, count=1)
    base, sep, _query = text.partition("?")
    text = base + ("?***" if sep else "")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _host_problem(host: str) -> str | None:
    try:
        ipaddress.ip_address(host.strip("[]"))
        return None
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    if len(name) > _MAX_HOST:
        return f"is {len(name)} characters long (the limit is {_MAX_HOST})"
    labels = name.split(".")
    if any(not label for label in labels):
        return "has an empty part between dots"
    longest = max(labels, key=len)
    if len(longest) > _MAX_LABEL:
        return f"has a part of {len(longest)} characters between dots (the limit is {_MAX_LABEL})"
    return None
