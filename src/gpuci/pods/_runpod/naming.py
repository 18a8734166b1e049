"""Who owns a pod, which CI run made it, and when it expires: in its name and in its env.

Both places on purpose: the name shows in the RunPod console and in ``pods ls`` at a glance;
the env is what the in-pod self-stop timer reads and what ``start --ttl`` updates. The reaper
trusts the env first and falls back to the name. Pods without our tag are never touched.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuci import settings
from gpuci.units import parse_iso, utc_iso

PREFIX = "gpuci"
ENV_OWNER = settings.OWNER.name
ENV_RUN_URL = settings.RUN_URL.name
ENV_EXPIRES_AT = settings.EXPIRES_AT.name
ENV_EXPIRES_EPOCH = settings.EXPIRES_EPOCH.name
_FIELD = re.compile(r"(\w+)=(\S+)")
_OWNER_SAFE = re.compile(r"[^A-Za-z0-9._@-]+")


@dataclass(frozen=True)
class PodTag:
    owner: str
    run_url: str
    expires_at: float  # Unix seconds
    nonce: str = ""

    def name(self) -> str:
        return (
            f"{PREFIX} owner={self.owner} exp={utc_iso(self.expires_at)} "
            f"run={self.run_url} n={self.nonce}"
        )

    def env(self) -> dict[str, str]:
        return {
            ENV_OWNER: self.owner,
            ENV_RUN_URL: self.run_url,
            ENV_EXPIRES_AT: utc_iso(self.expires_at),
            ENV_EXPIRES_EPOCH: str(int(self.expires_at)),
        }

    def with_expiry(self, expires_at: float) -> PodTag:
        return PodTag(self.owner, self.run_url, expires_at, self.nonce)


def new_tag(owner: str, run_url: str, expires_at: float) -> PodTag:
    return PodTag(clean_owner(owner), run_url.strip() or "local", expires_at, secrets.token_hex(3))


def clean_owner(owner: str) -> str:
    """An owner as it enters (CI identity, budgets file, ``owner`` input) and as pod names and
    tags carry it: safe characters only, folded (:func:`fold_owner`)."""
    return fold_owner(_OWNER_SAFE.sub("-", owner.strip()).strip("-") or "unknown")


def fold_owner(owner: str) -> str:
    """The one spelling of an owner that budgets, delegations, pod tags and the ledger compare:
    GitHub and GitLab usernames are case-insensitive, so ``Alice`` and ``alice`` are one account
    and one budget (names recorded by an older gpu-ci, in their case, are folded when read)."""
    return owner.lower()


def tag_of(pod: Mapping[str, Any]) -> PodTag | None:
    """The tag of one of our pods, or None for pods gpu-ci did not create."""
    name = str(pod.get("name") or "")
    env = pod.get("env") or {}
    from_name = dict(_FIELD.findall(name)) if name.startswith(PREFIX + " ") else {}
    owner = env.get(ENV_OWNER) or from_name.get("owner")
    if not owner:
        return None
    expires_at = _expiry(env.get(ENV_EXPIRES_AT) or from_name.get("exp"))
    run_url = env.get(ENV_RUN_URL) or from_name.get("run") or ""
    return PodTag(owner, run_url, expires_at, from_name.get("n", ""))


def _expiry(text: str | None) -> float:
    """A tag's expiry in Unix seconds; NaN (unreadable: reap leaves the pod alone) when it is
    missing, not a time, or a time that cannot be shown in UTC (``0001-01-01T00:00:00+14:00``
    is year 0 there): anyone with the account key writes this env, and ``pods ls`` and
    ``pods start`` print every expiry they read."""
    if not text:
        return float("nan")
    try:
        expires_at = parse_iso(text)
        utc_iso(expires_at)
    except (ValueError, OverflowError, OSError):
        return float("nan")
    return expires_at


def run_url(environ: Mapping[str, str]) -> str:
    """The URL of this CI run: a GitHub workflow run or a GitLab pipeline, else ``local``."""
    run_id = settings.GITHUB_RUN_ID.raw(environ)
    repository = settings.GITHUB_REPOSITORY.raw(environ)
    if run_id and repository:
        server = settings.GITHUB_SERVER_URL.value(environ).rstrip("/")
        return f"{server}/{repository}/actions/runs/{run_id}"
    pipeline_url = settings.CI_PIPELINE_URL.raw(environ)
    if pipeline_url:
        return pipeline_url
    return settings.RUN_URL.value(environ)
