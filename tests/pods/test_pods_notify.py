"""Notifications to a webhook, e-mail over STARTTLS and a Discourse topic, all on 127.0.0.1."""

from __future__ import annotations

import pytest
from notify_servers import HttpSink, SmtpServer

from gpuci_testing import self_signed_cert

UP = dict(image="img", command="serve", ttl="45m", gpu_types="NVIDIA L40S")  # $0.86/h
SMTP_PASSWORD = "s3cr3t-pa55word"
DISCOURSE_KEY = "dk_0123456789abcdef"


@pytest.fixture
def cert(tmp_path, monkeypatch) -> tuple[str, str]:
    crt, key = self_signed_cert(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(crt))  # the client trusts this server only
    return str(crt), str(key)


@pytest.fixture
def sink():
    with HttpSink() as server:
        yield server


@pytest.fixture
def smtp(cert):
    server = SmtpServer(*cert)
    yield server
    server.stop()


def _targets(sink: HttpSink, smtp: SmtpServer) -> str:
    return "\n".join(
        [
            f"{sink.url}/hooks/T000/B000/XXXXSECRETTOKEN",
            f"smtp://ci-bot:{SMTP_PASSWORD}@127.0.0.1:{smtp.port}"
            "?from=gpu-ci@example.com&to=alice@example.com,admin@example.com",
            f"discourse+http://127.0.0.1:{sink.port}/t/gpu-spend/42",
        ]
    )


def test_a_budget_refusal_reaches_every_target_and_no_secret_leaks(fake, run, sink, smtp):
    res = run(
        "up",
        **UP,
        owner="alice",
        budget_usd="0.5",
        notify=_targets(sink, smtp),
        extra_env={"DISCOURSE_API_KEY": DISCOURSE_KEY},
    )
    assert res.code == 1 and "budget" in res.json["headline"]  # notifying changes no outcome
    hook = next(p for p in sink.posts if p["path"].startswith("/hooks/"))
    assert "refused for alice" in hook["body"]["text"] and hook["body"]["content"]
    post = next(p for p in sink.posts if p["path"] == "/posts.json")
    assert post["body"]["topic_id"] == 42 and "would pass budget" in post["body"]["raw"]
    assert post["headers"]["Api-Key"] == DISCOURSE_KEY
    (mail,) = smtp.mails
    assert mail.auth == ("ci-bot", SMTP_PASSWORD) and mail.auth_over_tls and not smtp.auth_in_clear
    assert mail.recipients == ["alice@example.com", "admin@example.com"]
    assert "Subject: gpu-ci: GPU pod refused for alice (budget)" in mail.data
    received = str([p["body"] for p in sink.posts]) + mail.data  # the URL itself aside
    printed = res.stdout + res.stderr
    for secret in (fake.api_key, SMTP_PASSWORD, "XXXXSECRETTOKEN"):
        assert secret not in received, secret
    for secret in (fake.api_key, SMTP_PASSWORD, "XXXXSECRETTOKEN", DISCOURSE_KEY):
        assert secret not in printed, secret
    assert "notified 3 of 3 target(s)" in res.stderr


def test_delivery_failures_warn_and_never_fail_the_job(fake, run, clock, tmp_path):
    refused_port = SmtpServer(None, None)
    refused_port.stop()  # nothing listens there any more
    with HttpSink(status=500) as broken:
        pod = run("up", **UP, owner="bob").outputs["pod-id"]
        clock.advance(2 * 3600)
        res = run(
            "reap",
            notify=f"{broken.url}/hook\nsmtp://u:{SMTP_PASSWORD}@127.0.0.1:{refused_port.port}"
            "?to=a@example.com",
        )
    assert res.code == 0 and res.outputs["pod-ids"] == pod
    warnings = [a["message"] for a in res.json["annotations"] if a["level"] == "warning"]
    assert any("could not notify http://127.0.0.1: RuntimeError: HTTP 500" in w for w in warnings)
    assert any("could not notify smtp://127.0.0.1" in w for w in warnings)
    assert SMTP_PASSWORD not in res.stdout + res.stderr


def test_credentials_never_cross_without_tls(fake, run, clock):
    plain = SmtpServer(None, None)  # offers no STARTTLS
    try:
        run("up", **UP, owner="bob")
        clock.advance(2 * 3600)
        res = run("reap", notify=f"smtp://u:{SMTP_PASSWORD}@127.0.0.1:{plain.port}?to=a@x.org")
    finally:
        plain.stop()
    assert res.code == 0 and plain.auth_in_clear == 0 and plain.mails == []
    assert any("no STARTTLS" in a["message"] for a in res.json["annotations"])


def test_reaped_pods_and_the_cost_summary_are_sent(fake, run, clock, sink):
    pod = run("up", **UP, owner="carol").outputs["pod-id"]
    clock.advance(2 * 3600)
    assert run("reap", notify=f"{sink.url}/hook").code == 0
    reap_text = sink.posts[-1]["body"]["text"]
    assert "reaped 1 forgotten pod(s)" in reap_text and f"{pod}: carol, NVIDIA L40S" in reap_text
    assert run("cost", notify=f"{sink.url}/hook").code == 0
    cost_text = sink.posts[-1]["body"]["text"]
    assert "GPU spend since" in cost_text and "- carol: $" in cost_text and "1 reaped" in cost_text


def test_an_unknown_target_is_bad_input_before_anything_happens(fake, run):
    res = run("up", **UP, notify="ftp://example.com/x")
    assert res.code == 2 and "notify target" in res.json["headline"]
    assert fake.calls("POST", "/v2/pods") == []
