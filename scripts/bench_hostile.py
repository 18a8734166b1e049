#!/usr/bin/env python3
"""Peak memory and wall time of each hostile S3 case (issue 33: every one under 300 MiB, and
the step ends within 5 minutes at the defaults).

Each case is a real ``python -m gpuci cache-weights restore`` (or ``ls``) in a child process,
against tests/security's hostile S3 front (moto behind it, a tree of a small file and a 3 MB
one saved first) or, for credentials, against a credential source that never answers. It
prints the exit code, the child's peak RSS (VmHWM), its wall time and the first line it
printed. Cases that end on their own run at the default settings (AWS_MAX_ATTEMPTS and
GPUCI_S3_TIMEOUT unset). Cases that end only by a deadline (trickles, silence) run with the
deadline shortened (GPUCI_S3_TIMEOUT=1, GPUCI_S3_MIN_RATE=1 MiB/s; 0.5 s for credentials),
and the bound at the defaults is computed: the measured time, less the shortened deadline,
plus the default one (:meth:`gpuci.cache._stores.s3.network.Limits.deadline`).

    PYTHONPATH=src python scripts/bench_hostile.py              # every case, a markdown table
    PYTHONPATH=src python scripts/bench_hostile.py --only deep  # the cases whose name has "deep"

Figures only (tests/security/test_sec_s3_*.py check each case's line and memory): needs the
dev install (moto, boto3, pytest).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for folder in ("tests", "tests/cache", "tests/security"):
    sys.path.insert(0, str(REPO / folder))

from hostile_s3 import HostileS3, Rule, run_measured, s3_cli_env, save_tree  # noqa: E402

from gpuci.cache._stores.s3.network import Limits  # noqa: E402

SIZE = 3_000_000  # the large file of the saved tree (one range at the defaults)
SHORT = {"GPUCI_S3_TIMEOUT": "1", "GPUCI_S3_MIN_RATE": str(1 << 20)}
CREDS_SHORT = {"GPUCI_S3_TIMEOUT": "0.5"}
DEEP = b"[" * 10_000 + b"]" * 10_000


@dataclass
class Case:
    name: str
    rule: object | None = None  # a Rule (or a Plan) for the hostile front
    command: tuple[str, ...] = ("restore",)
    short: dict[str, str] = field(default_factory=dict)  # set: ends only by a deadline
    body: int = 0  # the body size the deadline is sized for
    key: str = "k-1"
    env: Callable[[Path, dict[str, str]], AbstractContextManager[dict[str, str]]] | None = None


def _cases() -> list[Case]:
    from test_sec_s3_bounds import Plan

    redirect = Plan(
        (Rule("redirect-eu", "GET", "/refs/"), 1),
        (Rule("trickle-body", "GET", "/manifests/"), 100),
    )
    return [
        Case(
            "ranged GET: 200 claiming 10^12 bytes, trickled",
            Rule("range-200-huge", "GET", "/blobs/"),
        ),
        Case(
            "ranged GET: Content-Range total `/²`",
            Rule("range-superscript-total", "GET", "/blobs/"),
        ),
        Case(
            "ranged GET: Content-Length 1.5 GB, then close",
            Rule("huge-length-close", "GET", "Signature="),
        ),
        Case("ref: Content-Length 1.5 GB, then close", Rule("huge-length-close", "GET", "/refs/")),
        Case("ref: endless chunks", Rule("endless-chunks", "GET", "/refs/")),
        Case("ref: status in full-width digits", Rule("nonascii-status", "GET", "/refs/")),
        Case(
            "listing: 8 MiB declaring entities (~90x)",
            Rule("entity-listing", "GET", "list-type=2"),
            ("ls",),
        ),
        Case(
            "listing: 1,000 long keys a page, fresh tokens",
            Rule("long-keys", "GET", "list-type=2"),
            ("ls",),
        ),
        Case(
            "listing: the first page again, fresh tokens",
            Rule("fresh-token", "GET", "list-type=2"),
            ("ls",),
        ),
        Case("ref: 10,000-deep JSON", key="deep-ref"),
        Case("manifest: 10,000-deep JSON", key="deep-manifest"),
        Case("pin: 10,000-deep JSON", command=("ls", "--pins", "true")),
        Case("ref: headers trickled", Rule("trickle-headers", "GET", "/refs/"), short=SHORT),
        Case("ref: silent", Rule("silent", "GET", "/refs/"), short=SHORT),
        Case("manifest: body trickled", Rule("trickle-body", "GET", "/manifests/"), short=SHORT),
        Case(
            "ranged GET: body trickled",
            Rule("trickle-body", "GET", "Signature="),
            short=SHORT,
            body=SIZE,
        ),
        Case(
            "redirect to eu-west-1 (profile keys), then a trickled manifest",
            redirect,
            short=SHORT,
            env=_profile,
        ),
        Case("credential_process that hangs", short=CREDS_SHORT, env=_process_hangs),
        Case("web identity: STS trickles", short=CREDS_SHORT, env=_sts_trickles),
        Case("instance role: IMDS trickles", short=CREDS_SHORT, env=_imds_trickles),
    ]


# ----- environments ------------------------------------------------------------------------------


def _no_keys(env: dict[str, str], tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in env.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    env.update(
        AWS_CONFIG_FILE=str(tmp / "aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp / "aws-credentials"),
        AWS_REGION="us-east-1",
    )
    return env


@contextmanager
def _profile(tmp: Path, env: dict[str, str]) -> Iterator[dict[str, str]]:
    env = _no_keys(env, tmp)
    Path(env["AWS_SHARED_CREDENTIALS_FILE"]).write_text(
        "[lab]\naws_access_key_id = testing\naws_secret_access_key = testing-secret-key\n"
    )
    Path(env["AWS_CONFIG_FILE"]).write_text("[profile lab]\nregion = us-east-1\n")
    yield {**env, "AWS_PROFILE": "lab"}


@contextmanager
def _process_hangs(tmp: Path, env: dict[str, str]) -> Iterator[dict[str, str]]:
    env = _no_keys(env, tmp)
    helper = tmp / "hang.sh"
    helper.write_text("#!/bin/bash\nsleep 600 &\nwait\n")
    helper.chmod(0o755)
    Path(env["AWS_CONFIG_FILE"]).write_text(f"[profile lab]\ncredential_process = {helper}\n")
    yield {**env, "AWS_PROFILE": "lab"}


@contextmanager
def _sts_trickles(tmp: Path, env: dict[str, str]) -> Iterator[dict[str, str]]:
    from test_sec_s3_credentials import hanging_endpoint

    token = tmp / "token"
    token.write_text("token")
    with hanging_endpoint("trickle") as sts:
        yield {
            **_no_keys(env, tmp),
            "AWS_WEB_IDENTITY_TOKEN_FILE": str(token),
            "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/ci",
            "AWS_ENDPOINT_URL_STS": sts,
        }


@contextmanager
def _imds_trickles(tmp: Path, env: dict[str, str]) -> Iterator[dict[str, str]]:
    from test_sec_s3_credentials import hanging_endpoint

    with hanging_endpoint("trickle") as imds:
        env = {**_no_keys(env, tmp), "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds + "/"}
        env.pop("AWS_EC2_METADATA_DISABLED", None)
        yield env


# ----- planting and running ----------------------------------------------------------------------


def _plant(endpoint: str, bucket: str) -> None:
    """Objects gpu-ci never writes: a deep ref, a ref to a deep manifest, a deep pin."""
    import hashlib

    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing-secret-key",
    )
    digest = hashlib.sha256(DEEP).hexdigest()
    ref = {"format": 1, "key": "deep-manifest", "manifest": digest}
    s3.put_object(Bucket=bucket, Key="c/refs/default/deep-ref", Body=DEEP)
    s3.put_object(Bucket=bucket, Key=f"c/manifests/{digest}.json", Body=DEEP)
    s3.put_object(Bucket=bucket, Key="c/refs/default/deep-manifest", Body=json.dumps(ref).encode())
    s3.put_object(Bucket=bucket, Key=f"c/pins/{'0' * 64}.json", Body=DEEP)


def _run(case: Case, endpoint: str, bucket: str, tmp: Path) -> dict[str, object]:
    from test_sec_s3_bounds import Hostile

    base = s3_cli_env(tmp, **case.short)
    base.pop("AWS_MAX_ATTEMPTS", None)  # the default (8), as a user has it
    hostile: AbstractContextManager[HostileS3 | None] = (
        Hostile(endpoint) if case.rule is not None or case.env is _profile else nullcontext()
    )
    made = case.env(tmp, base) if case.env is not None else nullcontext(base)
    with hostile as front, made as env:
        if front is not None:
            front.rule = case.rule  # type: ignore[assignment]
        url = front.url if front is not None else endpoint
        args = ["cache-weights", case.command[0], "--store", f"s3://{bucket}/c"]
        args += ["--endpoint-url", url, *case.command[1:]]
        if case.command[0] == "restore":
            args += ["--key", case.key, "--path", str(tmp / "out")]
        started = time.monotonic()
        run = run_measured(args, env, REPO, timeout=600)
        wall = time.monotonic() - started
    first = next((line for line in run.output.splitlines() if line.strip()), "")
    row: dict[str, object] = {
        "case": case.name,
        "exit": run.code,
        "peak_mib": round(run.peak_kib / 1024, 1),
        "wall_s": round(wall, 1),
        "line": first[:160],
    }
    if case.short:
        short = Limits.from_environ(case.short)
        row["short"] = f"GPUCI_S3_TIMEOUT={case.short['GPUCI_S3_TIMEOUT']}"
        row["bound_default_s"] = round(
            wall - short.deadline(case.body) + Limits().deadline(case.body)
        )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run the cases whose name has this text")
    parser.add_argument("--json", default="", help="also write the rows to this file")
    args = parser.parse_args(argv)
    import logging

    from moto_s3 import moto_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's access log: one line a request
    cases = [c for c in _cases() if args.only.lower() in c.name.lower()]
    rows = []
    with moto_server() as endpoint, tempfile.TemporaryDirectory(prefix="gpuci-hostile-") as tmp:
        root = Path(tmp)
        env = s3_cli_env(root)
        bucket, _ = save_tree(endpoint, root, "hostile-", SIZE, env)
        _plant(endpoint, bucket)
        for n, case in enumerate(cases):
            work = root / f"case{n}"
            work.mkdir()
            row = _run(case, endpoint, bucket, work)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    load = os.getloadavg()
    print(f"\nload average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n")
    print("| case | exit | peak RSS | wall | at the defaults | first line |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "short" in r:
            wall = f"{r['wall_s']} s ({r['short']})"
            default = f"<= {r['bound_default_s']} s (computed)"
        else:
            wall, default = f"{r['wall_s']} s", "as measured"
        line = str(r["line"]).replace("|", "\\|")
        print(f"| {r['case']} | {r['exit']} | {r['peak_mib']} MiB | {wall} | {default} | {line} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    worst = max((float(str(r["peak_mib"])) for r in rows), default=0.0)
    print(f"\nworst peak RSS: {worst} MiB (target: under 300 MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
