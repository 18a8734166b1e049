"""Which actions/runner release a GitHub runner pod runs: the newest, resolved when ``up`` runs.

GitHub stops giving jobs to runners that fall behind (the listener prints ``Runner version
v2.x is deprecated and cannot receive messages`` and exits), and a just-in-time runner never
updates itself, so a pinned version lasts weeks. ``up`` therefore asks GitHub's releases API
(the same origin and token as the runner registration; actions/runner's own docs and peers
such as ec2-github-runner resolve "latest" the same way) for the newest release and its
sha256: the asset's ``digest`` where GitHub lists one, and the line the release notes publish
(``<!-- BEGIN SHA linux-x64 -->HEX<!-- END SHA linux-x64 -->``); when both are there they must
agree. The pod verifies the download against that hash before unpacking.

The oldest release GitHub still accepts is estimated from the same listing: GitHub queues jobs
to a runner for ``GRACE_S`` after a newer release appears, so a runner baked into the image is
used when it is at least the newest release older than the grace.

When the API cannot be reached (GitHub Enterprise Server without actions/runner, a proxy, an
outage) the pinned ``runner_boot.RUNNER_VERSION`` is used with a warning that names it.
``runner-version`` with ``runner-sha256`` pins a release (a mirror, an audited version).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuci import settings
from gpuci.errors import GpuciError, InputError
from gpuci.forges import _github as gh
from gpuci.pods._runners import boot as runner_boot
from gpuci.units import parse_iso

RELEASES_PATH = "/repos/actions/runner/releases"
PAGE = 20  # releases per look-up: months of history, a bounded answer
GRACE_S = 30 * 86400  # GitHub: "If you do not perform a software update within 30 days ..."
ASSET = "actions-runner-linux-x64-{version}.tar.gz"
_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)$")
_HEX = re.compile(r"[0-9a-f]{64}")  # whole strings only (fullmatch: `$` passes a final "\n")
_NOTES_SHA = re.compile(
    r"<!-- BEGIN SHA linux-x64 -->\s*([0-9a-fA-F]{64})\s*<!-- END SHA linux-x64 -->"
)

ENV_VERSION = settings.ACTIONS_RUNNER_VERSION.name
ENV_SHA256 = settings.ACTIONS_RUNNER_SHA256.name
ENV_MIN_VERSION = settings.ACTIONS_RUNNER_MIN_VERSION.name


@dataclass(frozen=True)
class Release:
    """The runner the pod installs (version, sha256) and the oldest one it accepts in an image."""

    version: str
    sha256: str
    min_version: str
    source: str  # "latest", "pinned (input)", "pinned fallback"

    def env(self) -> dict[str, str]:
        return {
            ENV_VERSION: self.version,
            ENV_SHA256: self.sha256,
            ENV_MIN_VERSION: self.min_version,
        }


PINNED = Release(
    runner_boot.RUNNER_VERSION,
    runner_boot.RUNNER_SHA256,
    runner_boot.RUNNER_VERSION,
    "pinned fallback",
)


def version_key(text: str) -> tuple[int, int, int] | None:
    """``(major, minor, patch)`` of ``2.330.0`` or ``v2.330.0``; None for anything else."""
    m = _VERSION.match(text.strip())
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def _published(item: Mapping[str, Any]) -> float | None:
    text = item.get("published_at") or item.get("created_at")
    if not isinstance(text, str):
        return None
    try:
        return parse_iso(text)
    except ValueError:
        return None


def sha256_of(item: Mapping[str, Any], version: str) -> str:
    """The linux-x64 tarball's sha256 from a release; "" when it publishes none.

    Both GitHub's asset digest and the release notes' line count; a mismatch is refused."""
    found: set[str] = set()
    name = ASSET.format(version=version)
    assets = item.get("assets")  # GitHub's answer: anything but an array lists no asset
    for asset in assets if isinstance(assets, list) else []:
        if isinstance(asset, dict) and asset.get("name") == name:
            digest = str(asset.get("digest") or "")
            if digest.startswith("sha256:") and _HEX.fullmatch(digest[7:].lower()):
                found.add(digest[7:].lower())
    body = item.get("body")
    if isinstance(body, str):
        found.update(h.lower() for h in _NOTES_SHA.findall(body[:200_000]))
    if len(found) > 1:
        raise ValueError(f"release v{version} publishes two different sha256 for {name}")
    return found.pop() if found else ""


def pick(items: list[Any], now: float) -> Release:
    """The newest full release with a published sha256, and the oldest one GitHub accepts."""
    releases = []
    for item in items:
        if not isinstance(item, dict) or item.get("draft") or item.get("prerelease"):
            continue
        key = version_key(str(item.get("tag_name") or ""))
        if key is not None:
            releases.append((key, item))
    releases.sort(key=lambda kv: kv[0], reverse=True)
    if not releases:
        raise ValueError("the releases API listed no actions/runner release")
    key, newest = releases[0]
    version = ".".join(map(str, key))
    sha = sha256_of(newest, version)
    if not sha:
        raise ValueError(f"release v{version} publishes no sha256 for its linux-x64 tarball")
    oldest_ok = version
    for other_key, other in releases:
        oldest_ok = ".".join(map(str, other_key))
        born = _published(other)
        if born is None or now - born >= GRACE_S:
            break
    return Release(version, sha, oldest_ok, "latest")


class _Releases(gh.GitHubReader):
    hint_404 = "this GitHub has no actions/runner releases (GitHub Enterprise Server?)"

    def listing(self) -> list[Any]:
        response = self._send("GET", RELEASES_PATH, params={"per_page": PAGE})
        return self._json(response, "the actions/runner releases", list)


def pinned(version: str, sha256: str) -> Release:
    """``runner-version``/``runner-sha256``: checked here, exit 2 with the fix."""
    if version_key(version) is None:
        raise InputError(
            f"runner-version {version!r} is not a version like 2.330.0",
            hint="pass an actions/runner release number, or leave it empty for the newest",
        )
    version = version.strip().lstrip("v")
    sha = sha256.strip().lower()
    if not sha and version == runner_boot.RUNNER_VERSION:
        sha = runner_boot.RUNNER_SHA256
    if not _HEX.fullmatch(sha):
        raise InputError(
            "runner-sha256 is required with runner-version (64 hex digits)",
            hint=f"copy the sha256 of {ASSET.format(version=version)} from the release notes",
        )
    return Release(version, sha, version, "pinned (input)")


def resolve(
    version: str,
    sha256: str,
    api_url: str,
    token: str,
    now: float,
    warn: Callable[[str], None],
) -> Release:
    """The release for this pod: the input's pin, else the newest, else the pinned fallback."""
    if version.strip():
        return pinned(version, sha256)
    if sha256.strip():
        raise InputError(
            "runner-sha256 needs runner-version", hint="pass both, or neither for the newest"
        )
    try:
        with _Releases(api_url, token, attempts=2) as client:
            return pick(client.listing(), now)
    except (GpuciError, ValueError) as exc:
        why = exc.one_line() if isinstance(exc, GpuciError) else str(exc)
        warn(
            f"could not resolve the newest actions/runner release ({why}); using the pinned "
            f"{runner_boot.RUNNER_VERSION}, which GitHub refuses once it is too old: pass "
            "runner-version and runner-sha256, or bake a current runner into the image"
        )
        return PINNED
