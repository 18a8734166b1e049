"""requirements.lock: every runtime dependency pinned, within pyproject's range, hash-locked."""

from __future__ import annotations

import re

import tomllib
from action_env import REPO
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

LOCK = REPO / "requirements.lock"


def locked() -> dict[str, tuple[Version, list[str]]]:
    """name -> (pinned version, hashes), parsed from the pip-compile style file."""
    text = LOCK.read_text().replace("\\\n", " ")
    pins: dict[str, tuple[Version, list[str]]] = {}
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        head = line.split(" --hash", 1)[0].split(";", 1)[0].strip()
        name, _, version = head.partition("==")
        assert version, f"not pinned with ==: {line!r}"
        pins[canonicalize_name(name)] = (Version(version), re.findall(r"--hash=sha256:(\w+)", line))
    return pins


def test_every_runtime_dependency_is_pinned_in_range() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = locked()
    missing = []
    for dep in project["dependencies"]:
        req = Requirement(dep)
        name = canonicalize_name(req.name)
        if name not in pins:
            missing.append(req.name)
            continue
        assert req.specifier.contains(pins[name][0], prereleases=True), (dep, pins[name][0])
    assert not missing, (
        f"{missing} missing from requirements.lock (fix: regenerate it, see docs/actions.md)"
    )


def test_every_pin_carries_sha256_hashes() -> None:
    pins = locked()
    assert len(pins) >= 10  # the runtime deps and their own dependencies
    for name, (_version, hashes) in pins.items():
        assert hashes, f"{name} has no --hash"
        assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), name


def test_the_lock_says_how_to_regenerate_it() -> None:
    header = LOCK.read_text().splitlines()[:3]
    assert any(
        "uv pip compile pyproject.toml" in line and "--generate-hashes" in line for line in header
    )
