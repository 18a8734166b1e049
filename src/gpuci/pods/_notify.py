"""Notifications: tell people where they live (chat, e-mail, a forum) what gpu-ci did.

A target is one line of the ``notify`` input:

- ``https://hooks.slack.com/services/...`` (any http(s) URL): a JSON POST with ``text``
  (Slack, Mattermost, Teams workflows) and ``content`` (Discord) holding the message;
- ``smtp://user:password@host:587?from=ci@example.com&to=a@example.com,b@example.com``:
  e-mail through the standard library's smtplib, STARTTLS before any credential is sent
  (``smtps://`` for implicit TLS on 465);
- ``discourse+https://forum.example.com/t/123``: a reply in topic 123, with the API key from
  ``DISCOURSE_API_KEY`` and the user from ``DISCOURSE_API_USERNAME`` (default ``system``).

Targets carry secrets (webhook tokens in the path, SMTP passwords): the input is masked
whole when read, and only ``scheme://host`` is ever printed. Messages are redacted before they
are sent. Delivery failures are warnings: a notification never fails the job.
"""

from __future__ import annotations

import smtplib
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from urllib.parse import parse_qs, unquote, urlsplit

from gpuci import settings
from gpuci.errors import InputError
from gpuci.redact import excerpt
from gpuci.runtime import Result, Runtime

TIMEOUT_S = 15.0
_LOOPBACK = ("127.0.0.1", "localhost", "::1")  # plain http only for a forum on this machine


@dataclass(frozen=True)
class Target:
    kind: str  # webhook | smtp | discourse
    url: str
    shown: str  # scheme://host, fit to print


def _shown(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or '?'}"


def parse_targets(lines: Sequence[str] | None, mask: Callable[[str], None]) -> list[Target]:
    """One target per line (or whitespace-separated); unknown schemes are bad input."""
    out = []
    for line in lines or []:
        for url in line.split():
            mask(url)
            parts = urlsplit(url)
            for secret in (parts.password, parts.username, parts.path, parts.query):
                if secret and len(secret) > 3:
                    mask(secret)
                    mask(unquote(secret))
            scheme = parts.scheme.lower()
            if scheme in ("http", "https") and parts.hostname:
                out.append(Target("webhook", url, _shown(url)))
            elif scheme in ("smtp", "smtps") and parts.hostname:
                query = parse_qs(parts.query)
                if not query.get("to"):
                    raise InputError(
                        f"notify target {_shown(url)} names no recipient",
                        hint="add ?to=someone@example.com (comma-separated for several)",
                    )
                out.append(Target("smtp", url, _shown(url)))
            elif scheme == "discourse+https" or (
                scheme == "discourse+http" and parts.hostname in _LOOPBACK
            ):
                out.append(Target("discourse", url, _shown(url)))
            else:
                raise InputError(
                    f"notify target '{_shown(url)}' is not an http(s) webhook, smtp(s):// or "
                    "discourse+https://",
                    hint="see docs/pods.md (Notifications) for the target forms",
                )
    return out


def send_all(
    targets: Sequence[Target],
    subject: str,
    text: str,
    environ: Mapping[str, str],
    redact: Callable[[str], str],
    warn: Callable[[str], None],
) -> int:
    """Deliver to every target; returns how many succeeded. Failures only warn."""
    subject, text = redact(subject), redact(text)
    sent = 0
    for target in targets:
        try:
            if target.kind == "webhook":
                _webhook(target, subject, text)
            elif target.kind == "smtp":
                _smtp(target, subject, text)
            else:
                _discourse(target, subject, text, environ)
            sent += 1
        except Exception as exc:
            reason = excerpt(redact(f"{type(exc).__name__}: {exc}"))
            warn(f"could not notify {target.shown}: {reason}")
    return sent


def _post_json(url: str, body: dict, headers: Mapping[str, str] | None = None) -> None:
    from gpuci import httpclients  # httpx loads only when a notification is sent

    # The client follows no redirect (one would carry the body, and for Discourse the key,
    # elsewhere); only the status is read, so the size of the answer's body never matters.
    with (
        httpclients.new_client(timeout=TIMEOUT_S, agent="notify") as client,
        client.stream("POST", url, json=body, headers=dict(headers or {})) as response,
    ):
        status = response.status_code
    if not 200 <= status < 300:
        raise RuntimeError(f"HTTP {status}")


def _webhook(target: Target, subject: str, text: str) -> None:
    message = f"{subject}\n{text}"
    _post_json(target.url, {"text": message, "content": message[:2000]})


def _smtp(target: Target, subject: str, text: str) -> None:
    parts = urlsplit(target.url)
    query = parse_qs(parts.query)
    recipients = [a.strip() for v in query.get("to", []) for a in v.split(",") if a.strip()]
    sender = (query.get("from") or [f"gpu-ci@{parts.hostname}"])[0]
    msg = EmailMessage()
    msg["Subject"] = subject
    msg["From"] = sender
    msg["To"] = ", ".join(recipients)
    msg.set_content(text)
    context = ssl.create_default_context()
    host = parts.hostname or ""
    if parts.scheme.lower() == "smtps":
        client: smtplib.SMTP = smtplib.SMTP_SSL(
            host, parts.port or 465, timeout=TIMEOUT_S, context=context
        )
    else:
        client = smtplib.SMTP(host, parts.port or 587, timeout=TIMEOUT_S)
    with client:
        client.ehlo()
        if parts.scheme.lower() == "smtp":
            if not client.has_extn("starttls"):
                # Without TLS a password would cross the network in clear: refuse to send one.
                if parts.username:
                    raise RuntimeError("the server offers no STARTTLS; credentials not sent")
            else:
                client.starttls(context=context)
                client.ehlo()
        if parts.username:
            client.login(unquote(parts.username), unquote(parts.password or ""))
        client.send_message(msg, from_addr=sender, to_addrs=recipients)


def _discourse(target: Target, subject: str, text: str, environ: Mapping[str, str]) -> None:
    parts = urlsplit(target.url)
    segments = [s for s in parts.path.split("/") if s]
    topic = next((s for s in reversed(segments) if s.isdigit()), "")
    key = settings.DISCOURSE_API_KEY.value(environ)
    if not topic or not key:
        raise RuntimeError(
            f"needs a topic URL (/t/<id>) and {settings.DISCOURSE_API_KEY.name} in the environment"
        )
    scheme = "http" if parts.scheme.lower() == "discourse+http" else "https"
    base = f"{scheme}://{parts.netloc.rpartition('@')[2]}"
    _post_json(
        f"{base}/posts.json",
        {"topic_id": int(topic), "raw": f"**{subject}**\n\n{text}"},
        {"Api-Key": key, "Api-Username": settings.DISCOURSE_API_USERNAME.value(environ)},
    )


def deliver(
    targets: Sequence[Target], rt: Runtime, result: Result, subject: str, text: str
) -> None:
    """Send one event to the ``notify`` targets; problems become warnings on ``result``."""
    if not targets:
        return
    sent = send_all(targets, subject, text, rt.environ, rt.redact, result.warning)
    rt.log(f"notified {sent} of {len(targets)} target(s): " + ", ".join(t.shown for t in targets))
