"""The network as AWS tools see it, for the S3 store: proxies, CA bundle and time limits.

botocore reads ``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY`` (either case, lower case winning)
through :func:`urllib.request.getproxies` and ``proxy_bypass``, and verifies TLS against
``AWS_CA_BUNDLE`` (or the ``ca_bundle`` of the active profile in the AWS config file), else
certifi's bundle (botocore.httpsession.get_cert_path). :class:`Network` reads the same settings
from the same places, so a store reachable for the AWS CLI is reachable here, and one that is
not fails the same way. ``urllib.request`` is imported only when a ``*_proxy`` variable is set
(a warm restore does not pay for it).

Time limits (:class:`Limits`): ``GPUCI_S3_TIMEOUT`` seconds (default 30) without progress ends a
request and the answer's headers must arrive within that time; after that grace a body must
keep ``GPUCI_S3_MIN_RATE`` bytes a second (default 256 KiB/s, counted on the bytes that came,
never on what the server claims); one S3 operation (every attempt and every byte of it) ends
within :meth:`Limits.deadline`: 8 timeouts, or for a body the grace plus its size at the minimum
rate, whichever is longer. A stalled or trickling server ends the step in under five minutes at
the defaults (a 64 MiB part: 30 + 256 s).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from gpuci import settings
from gpuci.errors import InputError
from gpuci.ranged._pace import body_due
from gpuci.settings import Setting

DEFAULT_TIMEOUT_S = 30.0
# A body slower than this (bytes per second, after the first timeout) is a stall.
MIN_BODY_RATE = 256 << 10
# One operation (a request and its retries, or one listing) may take this many timeouts.
OPERATION_TIMEOUTS = 8


@dataclass(frozen=True)
class Limits:
    """Time bounds of one exchange and of one operation (seconds), and the slowest body."""

    timeout: float = DEFAULT_TIMEOUT_S
    min_rate: float = float(MIN_BODY_RATE)

    @property
    def operation(self) -> float:
        return self.timeout * OPERATION_TIMEOUTS

    def body_time(self, size: int) -> float:
        """How long ``size`` body bytes may take after the headers (the grace, then the rate)."""
        return body_due(0.0, self.timeout, size, self.min_rate)

    def deadline(self, size: int = 0) -> float:
        """How long one operation may take, every attempt included, moving ``size`` body bytes
        (the size asked for or sent, never one a server claims)."""
        return max(self.operation, self.body_time(size))

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Limits:
        timeout = _number(environ, settings.S3_TIMEOUT, 0.1, 3600, "seconds")
        rate = _number(environ, settings.S3_MIN_RATE, 1024, 1 << 40, "bytes a second")
        return cls(timeout or DEFAULT_TIMEOUT_S, rate or float(MIN_BODY_RATE))


def _number(
    environ: Mapping[str, str], setting: Setting, low: float, high: float, unit: str
) -> float | None:
    """``setting`` as a number in [low, high]; None when unset; InputError when not one."""
    if not setting.is_set(environ):
        return None
    text, name, default = setting.value(environ), setting.name, setting.default
    try:
        value = float(text) if text.isascii() else -1.0
    except ValueError:
        value = -1.0
    if not low <= value <= high:  # NaN fails too
        raise InputError(
            f"{name}={text[:40]!r} is not a number of {unit}",
            hint=f"set {name} to {unit} between {low:g} and {high:g} (default {default})",
        )
    return value


@dataclass(frozen=True)
class Route:
    """How to reach one endpoint: directly, or through an ``http://`` proxy."""

    proxy_host: str = ""
    proxy_port: int = 0
    proxy_headers: tuple[tuple[str, str], ...] = ()

    @property
    def proxied(self) -> bool:
        return bool(self.proxy_host)


def environ_proxies(environ: Mapping[str, str]) -> dict[str, str]:
    """urllib.request.getproxies_environment, on ``environ`` (lower-case names win)."""
    found: dict[str, str] = {}
    for name, value in environ.items():
        low = name.lower()
        if value and low[-6:] == "_proxy":
            found[low[:-6]] = value
    if "REQUEST_METHOD" in environ:
        found.pop("http", None)  # CGI: HTTP_PROXY is a request header there (httpoxy)
    for name, value in environ.items():
        if name[-6:] == "_proxy":
            low = name.lower()
            if value:
                found[low[:-6]] = value
            else:
                found.pop(low[:-6], None)
    return found


def route_for(url: str, environ: Mapping[str, str]) -> Route:
    """The proxy botocore would use for ``url`` (get_environ_proxies, ProxyConfiguration)."""
    proxies = environ_proxies(environ)
    parts = urlsplit(url)
    proxy = proxies.get(parts.scheme)
    if not proxy:
        return Route()
    import urllib.request  # only when a proxy is configured

    try:
        # undocumented but long-standing; absent from typeshed. It judges no_proxy against the
        # proxies given here (proxy_bypass would read the environment, or macOS/Windows settings).
        bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
        if bypass(parts.netloc, proxies):
            return Route()
    except (TypeError, OSError):
        pass
    if not proxy.startswith(("http:", "https:")):
        proxy = "http:" + proxy if proxy.startswith("//") else "http://" + proxy
    where = urlsplit(proxy)
    if where.scheme != "http":
        raise InputError(
            f"{parts.scheme}_proxy is an {where.scheme}:// proxy, which gpu-ci's S3 client "
            "cannot reach",
            hint="use an http:// proxy URL (TLS to the store still goes through it via CONNECT)",
        )
    headers: tuple[tuple[str, str], ...] = ()
    if where.username and where.password:
        import base64

        pair = f"{unquote(where.username)}:{unquote(where.password)}".encode()
        headers = (("Proxy-Authorization", "Basic " + base64.b64encode(pair).decode()),)
    try:
        port = where.port or 80
    except ValueError:
        port = -1
    if not where.hostname or port <= 0:
        raise InputError(
            f"the {parts.scheme}_proxy setting names no usable host and port",
            hint="set it as http://host:port",
        )
    return Route(where.hostname, port, headers)


def ca_bundle(environ: Mapping[str, str]) -> str:
    """The CA bundle botocore verifies against: AWS_CA_BUNDLE, the profile's ca_bundle, or
    certifi's (botocore's own cacert.pem without certifi)."""
    named = settings.AWS_CA_BUNDLE.value(environ) or _profile_setting(environ, "ca_bundle")
    if named:
        path = os.path.expanduser(named)
        if not os.path.isfile(path):
            raise InputError(
                f"the CA bundle {named!r} (AWS_CA_BUNDLE or ca_bundle) is not a file",
                hint="point AWS_CA_BUNDLE at a PEM file of the CA certificates to trust",
            )
        return path
    try:
        import certifi

        return str(certifi.where())
    except ImportError:
        import importlib.util

        spec = importlib.util.find_spec("botocore")
        origin = spec.origin if spec is not None else None
        return os.path.join(os.path.dirname(origin), "cacert.pem") if origin else ""


def _profile_setting(environ: Mapping[str, str], name: str) -> str:
    """``name`` from the active profile of the AWS config file (AWS_PROFILE, else default)."""
    path = (
        settings.AWS_CONFIG_FILE.value(environ) if settings.AWS_CONFIG_FILE.is_set(environ) else ""
    )
    if not path:
        home = environ.get("HOME", "").strip()
        path = os.path.join(home, ".aws", "config") if home else os.path.expanduser("~/.aws/config")
    path = os.path.expanduser(path)
    if not os.path.isfile(path):
        return ""
    profile = (
        settings.AWS_PROFILE.value(environ)
        or settings.AWS_DEFAULT_PROFILE.value(environ)
        or "default"
    )
    import configparser  # only for https endpoints without AWS_CA_BUNDLE

    parser = configparser.RawConfigParser()
    try:
        parser.read(path)
    except (configparser.Error, OSError, UnicodeDecodeError):
        return ""  # botocore words that error when it reads the file itself
    for section in (f"profile {profile}", profile) if profile != "default" else ("default",):
        if parser.has_option(section, name):
            return parser.get(section, name).strip()
    return ""
