"""The metrics history in a store: appended on the default branch, read back bounded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from training_cli import run_gate

from gpuci.cache._stores.file import LocalStore
from gpuci.files import json_bytes
from gpuci.training import _history as history
from gpuci.training._ci import RunContext
from gpuci_testing import clean_env


class CountingStore(LocalStore):
    """A file store that counts what a reader pulls from it: listed keys and GETs."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gets = 0
        self.listed = 0

    def get(self, key, limit=None):
        self.gets += 1
        return super().get(key, limit)

    def list(self, prefix):
        for info in super().list(prefix):
            self.listed += 1
            yield info


def _gate(value: float) -> dict:
    return {"passed": True, "rows": [{"metric": "eval.accuracy", "value": value}]}


def test_keys_sort_newest_first_and_last_n_reads_only_n_of_10000(tmp_path):
    store = CountingStore(tmp_path / "s")
    ctx = RunContext(platform="github", commit="ab" * 20)
    # 10,000 runs, one a minute: files written straight into the file store's folder (the
    # same keys and bytes append() writes, without its create-only dance per object).
    base = 1_700_000_000.0
    for i in range(10_000):
        item = history.entry(_gate(i / 10_000), None, ctx, now=base + 60 * i)
        path = store.root / history.object_key("training", item["epoch"], ctx.commit)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(json_bytes(item))
    store.gets = store.listed = 0
    runs, skipped = history.last(store, "training", 5)
    assert skipped == 0
    newest = [r["metrics"]["eval.accuracy"] for r in runs]
    assert newest == [0.9995, 0.9996, 0.9997, 0.9998, 0.9999]  # the newest five, oldest first
    assert store.gets == 5
    assert store.listed == 5  # the listing is stopped after five keys


def test_unusable_objects_are_skipped_never_raised(tmp_path):
    store = LocalStore(tmp_path / "s")
    ctx = RunContext(platform="gitlab", commit="c0ffee")
    history.append(store, "m", history.entry(_gate(0.5), None, ctx, now=1_700_000_000))
    pre = history.prefix("m")
    store.put(f"{pre}0000000000001-bad-00000000.json", b"[" * 100_000)  # deep nesting
    store.put(f"{pre}0000000000002-big-00000000.json", b" " * (history.MAX_OBJECT + 10))
    store.put(f"{pre}0000000000003-str-00000000.json", json.dumps({"format": 1}).encode())
    hostile = {"format": 1, "epoch": 1.0, "metrics": {"x": "1", "y": float("inf"), "z": True}}
    store.put(f"{pre}0000000000004-odd-00000000.json", json.dumps(hostile).encode())
    store.put(f"{pre}not-ours.json", b"{}")
    runs, skipped = history.last(store, "m", 10)
    assert skipped == 3
    assert [r["metrics"] for r in runs] == [{}, {"eval.accuracy": 0.5}]


_GL_MAIN = {"GITLAB_CI": "true", "CI_COMMIT_BRANCH": "main", "CI_DEFAULT_BRANCH": "main"}


@pytest.mark.parametrize(
    ("env", "wanted"),
    [
        ({"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "schedule"}, True),
        ({"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request"}, False),
        ({**_GL_MAIN, "CI_PIPELINE_SOURCE": "push"}, True),
        ({**_GL_MAIN, "CI_PIPELINE_SOURCE": "web"}, True),
        ({**_GL_MAIN, "CI_PIPELINE_SOURCE": "push", "CI_COMMIT_BRANCH": "feat"}, False),
        ({"GITLAB_CI": "true", "CI_PIPELINE_SOURCE": "schedule"}, True),
        # a pipeline run for a merge request or by another project is not the branch's own
        ({**_GL_MAIN, "CI_PIPELINE_SOURCE": "push", "CI_MERGE_REQUEST_IID": "3"}, False),
        ({**_GL_MAIN, "CI_PIPELINE_SOURCE": "merge_request_event"}, False),
        ({**_GL_MAIN, "CI_PIPELINE_SOURCE": "pipeline"}, False),
        ({**_GL_MAIN, "CI_PIPELINE_SOURCE": "parent_pipeline"}, False),
        ({**_GL_MAIN}, False),
        ({}, False),
    ],
)
def test_only_default_branch_and_schedules_append(env, wanted):
    assert history.should_append("auto", env)[0] is wanted
    assert history.should_append("always", env)[0] is True
    assert history.should_append("never", env)[0] is False


@pytest.mark.parametrize("source", ["parent_pipeline", "pipeline"])
def test_a_downstream_gitlab_pipeline_says_why_it_does_not_append(source):
    """A child pipeline's parent may be a merge request's (CI_PIPELINE_SOURCE says only
    parent_pipeline): never the branch's history unless the workflow says so."""
    env = {**_GL_MAIN, "CI_PIPELINE_SOURCE": source}
    assert history.should_append("auto", env) == (
        False,
        f"a downstream pipeline ({source}): what started its parent is not known "
        "(set history-append: always on the jobs that should record it)",
    )


def test_github_push_to_default_branch_appends(tmp_path):
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"repository": {"default_branch": "trunk"}}))
    env = {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_PATH": str(event)}
    for name in ("push", "workflow_dispatch"):
        on = {**env, "GITHUB_EVENT_NAME": name}
        assert history.should_append("auto", {**on, "GITHUB_REF": "refs/heads/trunk"})[0]
        assert not history.should_append("auto", {**on, "GITHUB_REF": "refs/heads/main"})[0]
        assert not history.should_append("auto", {**on, "GITHUB_REF": "refs/tags/trunk"})[0]


@pytest.mark.parametrize(
    "event", ["pull_request_target", "issue_comment", "pull_request", "workflow_run", ""]
)
def test_a_pull_request_event_on_the_default_branch_does_not_append(tmp_path, event):
    """pull_request_target and issue_comment run on the default branch (GITHUB_REF names
    it) for a pull request, often a fork's: its values are not the branch's history."""
    path = tmp_path / "event.json"
    path.write_text(json.dumps({"repository": {"default_branch": "main"}, "number": 7}))
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_EVENT_PATH": str(path),
        "GITHUB_EVENT_NAME": event,
        "GITHUB_REF": "refs/heads/main",
    }
    wanted, why = history.should_append("auto", env)
    assert not wanted
    assert why == f"the event {event or 'unknown'} is not a push, schedule or manual run"


def _gate_cli(tmp_path: Path, value: float, env: dict[str, str]):
    flags = ("--min", "eval.accuracy=0.9", "--history", (tmp_path / "hist").as_uri(), "--json")
    return run_gate(tmp_path, {"eval": {"accuracy": value}}, *flags, env=env)


def test_gate_appends_on_schedule_and_reports_history_before_this_run(tmp_path):
    for i, value in enumerate((0.91, 0.93, 0.95)):
        env = clean_env(
            GITHUB_ACTIONS="true",
            GITHUB_EVENT_NAME="schedule",
            GITHUB_SHA=f"{i:040d}",
            GPUCI_JOURNAL=str(tmp_path / f"j{i}.jsonl"),
        )
        proc = _gate_cli(tmp_path, value, env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)["report"]
    past = report["history"]["runs"]
    assert [r["metrics"]["eval.accuracy"] for r in past] == [0.91, 0.93]  # not this run
    assert report["history"]["appended"]["key"].startswith("metrics-history/training-")
    # A pull request reads the history and adds nothing to it.
    env = clean_env(
        GITHUB_ACTIONS="true",
        GITHUB_EVENT_NAME="pull_request",
        GPUCI_JOURNAL=str(tmp_path / "pr.jsonl"),
    )
    proc = _gate_cli(tmp_path, 0.97, env)
    report = json.loads(proc.stdout)["report"]
    read = [r["metrics"]["eval.accuracy"] for r in report["history"]["runs"]]
    assert read == [0.91, 0.93, 0.95]
    assert report["history"]["appended"]["key"] == ""
    assert len(list((tmp_path / "hist" / "metrics-history").rglob("*.json"))) == 3


@pytest.mark.parametrize("said", ["false", 1, [0]])
def test_a_report_that_does_not_say_true_is_recorded_as_failed(said):
    """The gate report is a file (input): a "passed" that is not ``true`` never enters the
    history as a passing run, nor does one with a failed row."""
    ctx = RunContext("local")
    rows = [{"metric": "acc", "passed": True, "value": 0.9}]
    assert history.entry({"passed": said, "rows": rows}, None, ctx, 0.0)["passed"] is False
    failed_row = [{"metric": "acc", "passed": False, "value": 0.1}]
    assert history.entry({"passed": True, "rows": failed_row}, None, ctx, 0.0)["passed"] is False
    assert history.entry({"passed": True, "rows": rows}, None, ctx, 0.0)["passed"] is True
