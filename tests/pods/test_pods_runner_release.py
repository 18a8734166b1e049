"""Which actions/runner a GitHub runner pod installs: the newest release, resolved by ``up``
from the fake GitHub's releases API, with the pinned one only as a fallback that says so."""

from __future__ import annotations

import pytest
from pods_testing import RUN_ENV, up_runner

from forges.fake_github import NEWEST_KNOWN, release
from gpuci.errors import InputError
from gpuci.pods._runners import boot as runner_boot
from gpuci.pods._runners import release as runner_release

NEWER = ("2.399.1", "ab" * 32)
DAY = 86400.0
NOW = 1_800_000_000.0  # 2027-01-15


def test_the_pinned_fallback_is_not_older_than_the_newest_release_we_know(api):
    known = [runner_release.version_key(r["tag_name"]) for r in api.state.releases]
    pinned = runner_release.version_key(runner_boot.RUNNER_VERSION)
    assert pinned is not None and all(k is not None and pinned >= k for k in known)
    assert runner_release.version_key(NEWEST_KNOWN[0]) <= pinned
    if NEWEST_KNOWN[0] == runner_boot.RUNNER_VERSION:
        assert NEWEST_KNOWN[1] == runner_boot.RUNNER_SHA256


def test_up_hands_the_pod_the_newest_release_and_its_published_sha256(run, fake, api):
    api.state.releases.insert(0, release(*NEWER, "2026-11-30T00:00:00Z"))
    r = up_runner(run, api.github_env(**RUN_ENV))
    assert r.code == 0, r.stdout + r.stderr
    (create,) = fake.calls("POST", "/v2/pods")
    env = create.body["env"]
    assert env["GPUCI_ACTIONS_RUNNER_VERSION"] == NEWER[0]
    assert env["GPUCI_ACTIONS_RUNNER_SHA256"] == NEWER[1]
    assert "pinned" not in r.stdout + r.stderr


def test_without_the_releases_api_the_pin_is_used_with_a_warning_that_names_it(run, fake, api):
    api.state.releases = []
    r = up_runner(run, api.github_env(**RUN_ENV))
    assert r.code == 0, r.stdout + r.stderr
    env = fake.calls("POST", "/v2/pods")[0].body["env"]
    assert env["GPUCI_ACTIONS_RUNNER_VERSION"] == runner_boot.RUNNER_VERSION
    assert env["GPUCI_ACTIONS_RUNNER_SHA256"] == runner_boot.RUNNER_SHA256
    out = r.stdout + r.stderr
    assert f"using the pinned {runner_boot.RUNNER_VERSION}" in out


def test_runner_version_without_its_sha256_is_refused_before_anything_is_made(run, fake, api):
    r = up_runner(run, api.github_env(**RUN_ENV), runner_version="2.399.1")
    assert r.code == 2, r.stdout + r.stderr
    assert "runner-sha256 is required with runner-version" in r.stdout + r.stderr
    assert not fake.calls("POST", "/v2/pods")


def test_a_release_whose_digest_and_notes_disagree_is_not_used():
    item = release(*NEWER, "2026-11-30T00:00:00Z")
    item["assets"][0]["digest"] = "sha256:" + "cd" * 32
    with pytest.raises(ValueError, match="two different sha256"):
        runner_release.pick([item], NOW)


def test_a_release_without_a_published_sha256_is_not_used():
    item = release(*NEWER, "2026-11-30T00:00:00Z", digest=False, notes=False)
    with pytest.raises(ValueError, match="publishes no sha256"):
        runner_release.pick([item], NOW)


def test_a_digest_with_a_trailing_newline_is_not_a_sha256():
    """`$` matches before a final newline: the pod's exact comparison would then always fail
    and the runner never start. Only exactly 64 hex digits are a sha256."""
    item = release(*NEWER, "2026-11-30T00:00:00Z", notes=False)
    item["assets"][0]["digest"] = "sha256:" + "ab" * 32 + "\n"
    with pytest.raises(ValueError, match="publishes no sha256"):
        runner_release.pick([item], NOW)


@pytest.mark.parametrize("assets", [7, True, "actions-runner.tar.gz", {"name": "x"}])
def test_assets_that_are_no_array_list_none(assets):
    """``"assets": 7`` was a TypeError that resolve() did not catch: `pods up --runner github`
    ended in an internal error. Such a release lists no asset: the notes' sha256 still counts,
    and with no notes either it is not used (the pinned fallback, with its warning)."""
    item = {**release(*NEWER, "2026-11-30T00:00:00Z"), "assets": assets}
    assert runner_release.pick([item], NOW).sha256 == NEWER[1]
    bare = {**release(*NEWER, "2026-11-30T00:00:00Z", notes=False), "assets": assets}
    with pytest.raises(ValueError, match="publishes no sha256"):
        runner_release.pick([bare], NOW)


def test_up_falls_back_to_the_pin_when_the_releases_answer_has_no_asset_list(run, fake, api):
    api.state.releases.insert(0, release(*NEWER, "2026-11-30T00:00:00Z", notes=False))
    api.state.releases[0]["assets"] = 7
    r = up_runner(run, api.github_env(**RUN_ENV))
    assert r.code == 0, r.stdout + r.stderr
    env = fake.calls("POST", "/v2/pods")[0].body["env"]
    assert env["GPUCI_ACTIONS_RUNNER_VERSION"] == runner_boot.RUNNER_VERSION
    assert f"using the pinned {runner_boot.RUNNER_VERSION}" in r.stdout + r.stderr


def test_drafts_and_prereleases_are_skipped_and_the_oldest_accepted_follows_the_grace():
    items = [
        {**release("2.400.0", "ef" * 32, "2027-01-14T00:00:00Z"), "prerelease": True},
        release("2.399.1", "ab" * 32, "2027-01-10T00:00:00Z"),  # 5 days old
        release("2.399.0", "aa" * 32, "2026-12-20T00:00:00Z"),  # 26 days: still in its grace
        release("2.398.0", "99" * 32, "2026-11-01T00:00:00Z"),  # older than the grace
        release("2.397.0", "98" * 32, "2026-10-01T00:00:00Z"),
    ]
    got = runner_release.pick(items, NOW)
    assert (got.version, got.sha256) == ("2.399.1", "ab" * 32)
    assert got.min_version == "2.398.0"


def test_a_pinned_version_needs_a_real_hash():
    with pytest.raises(InputError):
        runner_release.pinned("latest", "")
    with pytest.raises(InputError):
        runner_release.pinned("2.399.1", "nothex")
    assert runner_release.pinned(runner_boot.RUNNER_VERSION, "").sha256 == (
        runner_boot.RUNNER_SHA256
    )
