"""How far a plan walks: a PR writes the workflow, so a workflow or action inside itself is bad
input, and one count of jobs and steps ends a plan that would expand past it, in one line."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from dryrun.dryrun_testing import WORKFLOWS, dry_run, steps_of, write
from gpuci.commands._dry_run import DryRunInputs
from gpuci.dryrun import _jobs
from gpuci.dryrun._contexts import base_contexts
from gpuci.dryrun._expressions import Partial, Unknown
from gpuci.dryrun._matrix import label
from gpuci.errors import InputError
from gpuci.runtime import Runtime
from gpuci_testing import clean_env

SELF_CALLING = """\
on: [push, workflow_call]
jobs:
  a:
    uses: ./.github/workflows/x.yml
  b:
    uses: ./.github/workflows/x.yml
"""


def test_a_reusable_workflow_that_calls_itself_is_bad_input(tmp_path):
    """Before, each call was planned again down to MAX_DEPTH: 2 jobs were 2^8 plans, 6 jobs
    1.7 million (the job hung). The workflow planned is on the call stack from the start, so
    each job's call back to it is refused at once."""
    wf = write(tmp_path, SELF_CALLING, f"{WORKFLOWS}/x.yml")
    proc = dry_run(tmp_path, wf, "--json", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    steps = steps_of(proc)
    assert len(steps) == 2  # a and b: each one's call back to x.yml is refused
    assert {s["verdict"] for s in steps} == {"bad-input"}
    detail = steps[0]["detail"]
    chain = "./.github/workflows/x.yml -> ./.github/workflows/x.yml"
    assert f"reusable workflow ./.github/workflows/x.yml calls itself ({chain})" in detail
    assert "nest at most 10 levels" in detail


def _chain(tmp_path: Path, called: int) -> Path:
    """wf.yml calling w1.yml, each calling the next, ``called`` reusable workflows in all; the
    last one's job runs a step."""
    for level in range(1, called + 1):
        job = (
            f"    uses: ./.github/workflows/w{level + 1}.yml\n"
            if level < called
            else "    runs-on: x\n    steps:\n      - run: echo deepest\n"
        )
        write(
            tmp_path, f"on: workflow_call\njobs:\n  j{level}:\n{job}", f"{WORKFLOWS}/w{level}.yml"
        )
    top = "on: push\njobs:\n  top:\n    uses: ./.github/workflows/w1.yml\n"
    return write(tmp_path, top, f"{WORKFLOWS}/wf.yml")


def test_reusable_workflows_are_planned_as_deep_as_github_nests_them(tmp_path):
    """GitHub connects ten levels of workflows: the caller and nine called ones. The plan
    stopped at eight, listing the ninth "not inspected" (as if remote or missing); a tenth is
    refused by GitHub before the run starts, and the plan said "not inspected" too."""
    proc = dry_run(tmp_path, _chain(tmp_path, 9), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = steps_of(proc)
    assert [(s["job"], s["verdict"]) for s in steps] == [
        ("top/j1/j2/j3/j4/j5/j6/j7/j8/j9", "run")
    ], steps
    proc = dry_run(tmp_path, _chain(tmp_path, 10), "--json", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    ((job, verdict, detail),) = [(s["job"], s["verdict"], s["detail"]) for s in steps_of(proc)]
    assert (job, verdict) == ("top/j1/j2/j3/j4/j5/j6/j7/j8/j9", "bad-input")  # in w9.yml
    assert detail.startswith(
        'GitHub refuses the run: job "j9" calls workflow "./.github/workflows/w10.yml", but '
        "doing so would exceed the limit on called workflow depth of 9 (./.github/workflows/"
        "wf.yml -> ./.github/workflows/w1.yml -> "
    ), detail
    assert "10 levels of workflows at most, the caller's included" in detail
    line = f"job {job}: uses ./.github/workflows/w10.yml: BAD INPUT: {detail}"
    assert line in json.loads(proc.stdout)["report"]["plan"]


def _action(tmp_path: Path, name: str, *uses: str) -> None:
    body = "runs:\n  using: composite\n  steps:\n" + "".join(f"    - uses: {u}\n" for u in uses)
    write(tmp_path, body, f"{name}/action.yml")


def _job_using(tmp_path: Path, action: str) -> Path:
    return write(
        tmp_path,
        "on: push\njobs:\n  j:\n    runs-on: x\n    steps:\n"
        f"      - uses: actions/checkout@v4\n      - uses: {action}\n",
        f"{WORKFLOWS}/wf.yml",
    )


def test_a_composite_action_that_uses_itself_is_bad_input(tmp_path):
    """Before, 8 steps each using the action were 8^8 steps planned."""
    _action(tmp_path, "act", "./act", "./act")
    _action(tmp_path, "a", "./b")  # a cycle through another action
    _action(tmp_path, "b", "./a")
    for action, chain in (("./act", "./act -> ./act"), ("./a", "./a -> ./b -> ./a")):
        proc = dry_run(tmp_path, _job_using(tmp_path, action), "--json", cwd=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        bad = "\n".join(s["detail"] for s in steps_of(proc) if s["verdict"] == "bad-input")
        assert f"uses itself ({chain}): the runner prepares a local action" in bad, proc.stdout
        assert "the nesting never ends" in bad and "fails the job" not in bad
        assert len(steps_of(proc)) <= 5  # checkout, the action, its steps: no more


def test_local_composite_actions_are_planned_as_deep_as_the_runner_nests_any(tmp_path):
    """The runner fails a tree of downloaded composite actions whose steps lie deeper than 9
    (``Constants.CompositeActionsMaxDepth``: a job's steps are depth 0, so 9 actions nest); a
    local one it prepares only when its step runs, depth 1 again, so it sets no limit on a chain
    of local ones. The plan stopped at 8 and listed the 9th as not judged: it plans 9, and the
    10th is left to the run, never bad input; a cycle there is still bad input (it never ends),
    where the depth check came first."""
    for level in range(1, 10):
        _action(tmp_path, f"a{level}", f"./a{level + 1}")
    write(tmp_path, "runs:\n  using: composite\n  steps:\n    - run: echo\n", "a10/action.yml")
    steps = steps_of(dry_run(tmp_path, _job_using(tmp_path, "./a1"), "--json", cwd=tmp_path))
    verdicts = {str(s["index"]): (s["verdict"], s["detail"]) for s in steps}
    ninth = ".".join(["2"] + ["1"] * 8)  # the 9th action: its own step (./a10) is planned
    assert verdicts[ninth][1].startswith("local composite action ./a9: "), verdicts
    verdict, detail = verdicts[f"{ninth}.1"]  # ./a10, the 10th nested: left to the run
    assert verdict == "other-action", verdicts
    assert "./a10 is the 10th composite action nested here: not planned" in detail
    assert "its limit of 9 levels covers only the actions it downloads" in detail
    assert f"{ninth}.1.1" not in verdicts
    assert not [s for s in steps if s["verdict"] == "bad-input"]
    _action(tmp_path, "a9", "./a1")  # a cycle at that depth still never ends: bad input
    proc = dry_run(tmp_path, _job_using(tmp_path, "./a1"), "--json", cwd=tmp_path)
    bad = {str(s["index"]): s["detail"] for s in steps_of(proc) if s["verdict"] == "bad-input"}
    assert proc.returncode == 2 and "./a1 uses itself (./a1 -> " in bad[f"{ninth}.1"], bad


def _plan(wf: Path) -> None:
    from gpuci.dryrun import run

    out = io.StringIO()
    run(DryRunInputs(workflow=str(wf)), Runtime(clean_env(), stdout=out, stderr=out))


def test_a_plan_past_its_count_ends_in_one_line(tmp_path, monkeypatch):
    """No cycle, but 4 steps each using the next action, 4 levels deep: 4^4 steps. The count
    (5,000 jobs, legs and steps; lowered here) ends it with one InputError naming where."""
    monkeypatch.setattr("gpuci.dryrun._bounds.MAX_PLANNED", 50)
    for level in range(1, 5):
        _action(tmp_path, f"a{level}", *[f"./a{level + 1}"] * 4)
    _action(tmp_path, "a5", "actions/setup-python@v5")
    with pytest.raises(InputError) as caught:
        _plan(_job_using(tmp_path, "./a1"))
    line = caught.value.one_line()
    assert line.startswith("dry-run stopped at job j step 2.1.")
    assert "over 50 jobs, matrix legs, steps and KiB of local reusable workflows and" in line
    assert "composite actions a job downloads nest at most 9 levels" in line
    assert "plan one job with --job" in line


def test_a_wide_plan_within_the_count_is_planned_whole(tmp_path, monkeypatch):
    """The same tree under the count: every step planned, nothing refused."""
    monkeypatch.setattr("gpuci.dryrun._bounds.MAX_PLANNED", 400)
    for level in range(1, 4):
        _action(tmp_path, f"a{level}", *[f"./a{level + 1}"] * 4)
    _action(tmp_path, "a4", "actions/setup-python@v5")
    _plan(_job_using(tmp_path, "./a1"))  # 1 job + 2 + 4 + 16 + 64 + 64 steps


def test_a_local_action_is_read_once_and_each_use_counts_its_size(tmp_path, monkeypatch):
    """Planning a called file walks all of it again (its env, its inputs): a 1 MiB workflow
    called by a thousand jobs was parsed a thousand times, seconds each. Read once; each use
    counts the file's KiB (3 here) with its steps."""
    from gpuci.dryrun import _planner

    reads: list[str] = []

    def counting(workspace: Path, uses: str):
        reads.append(uses)
        return load_local_action(workspace, uses)

    from gpuci.dryrun._workflow import load_local_action

    monkeypatch.setattr(_planner, "load_local_action", counting)
    _action(tmp_path, "act", "actions/setup-python@v5")
    padded = tmp_path / "act/action.yml"
    padded.write_text(padded.read_text() + "#" * 3 * 1024 + "\n")
    steps = "".join("      - uses: ./act\n" for _ in range(10))
    wf = write(
        tmp_path,
        f"on: push\njobs:\n  j:\n    runs-on: x\n    steps:\n{steps}",
        f"{WORKFLOWS}/w.yml",
    )
    _plan(wf)
    assert reads == ["./act"]
    monkeypatch.setattr("gpuci.dryrun._bounds.MAX_PLANNED", 40)  # 1 job + 10 x (1 + 3 + 1)
    with pytest.raises(InputError, match=r"stopped at job j step 8\.1 in \./act: over 40 jobs"):
        _plan(wf)


# ----- the needs order -------------------------------------------------------------------------
def _needs_order_as_before(jobs):
    """The order before Kahn's sort (rescanning from the first job each time): the reference."""
    done: list = []
    pending = list(jobs)
    while pending:
        for job_id in pending:
            job = jobs[job_id]
            needs = job.get("needs") if isinstance(job, dict) else None
            needs = [needs] if isinstance(needs, str) else list(needs or [])
            if all(str(n) in done or str(n) not in jobs for n in needs):
                done.append(job_id)
                pending.remove(job_id)
                break
        else:
            done += pending
            break
    return done


def test_the_needs_order_is_the_same_as_before_for_any_graph():
    """Ready together, the first in the file goes first; an unknown need is ignored; jobs in a
    cycle (or after one) follow the rest in file order; a job that is no mapping has no needs."""
    import random

    from gpuci.dryrun._jobs import needs_order

    rng = random.Random(7)
    for _ in range(400):
        names = [f"j{i}" for i in range(rng.randint(0, 12))]
        jobs: dict = {}
        for name in names:
            pool = [*names, "nope"]
            needs = rng.sample(pool, rng.randint(0, min(3, len(pool))))
            shape = rng.choice(["list", "text", "none", "not-a-job"])
            if shape == "not-a-job":
                jobs[name] = "x"
            elif shape == "text" and needs:
                jobs[name] = {"needs": needs[0]}
            else:
                jobs[name] = {"needs": needs + needs[:1]} if shape == "list" else {}
        assert needs_order(jobs) == _needs_order_as_before(jobs), jobs


class _CountingJob(dict):
    """A job that counts how often its ``needs`` is read."""

    reads = 0

    def get(self, key, default=None):
        if key == "needs":
            _CountingJob.reads += 1
        return super().get(key, default)


def test_the_needs_order_reads_each_job_once():
    """A reverse chain (j0 needs j1 needs j2 ...): before, each placed job rescanned the rest
    from the first (300 jobs: ~45,000 reads; 8,000 jobs never finished)."""
    from gpuci.dryrun._jobs import needs_order

    jobs = {f"j{i}": _CountingJob(needs=f"j{i + 1}") for i in range(300)}
    jobs["j300"] = _CountingJob()
    _CountingJob.reads = 0
    assert needs_order(jobs) == [f"j{i}" for i in range(300, -1, -1)]
    assert _CountingJob.reads <= len(jobs)


def test_a_workflow_of_more_than_1000_jobs_is_refused_in_one_line(tmp_path):
    """GitHub documents no count of jobs; past 1,000 the plan says so instead of walking them."""
    jobs = "".join(f"  j{i}: {{needs: j{i + 1}}}\n" for i in range(1000))
    last = "  j1000: {runs-on: x, steps: [{run: echo}]}\n"
    wf = write(tmp_path, f"on: push\njobs:\n{jobs}{last}")
    proc = dry_run(tmp_path, wf, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert proc.stdout.strip() == (
        "dry-run: bad input: ./wf.yml has 1,001 jobs: dry-run plans at most 1,000 (fix: "
        "GitHub documents no count of jobs but reads a workflow file of at most 500 KB and runs "
        "at most 256 legs per matrix; split the workflow)"
    )
    wf.write_text(wf.read_text().replace("  j999: {needs: j1000}\n", "  j999: {}\n"))
    wf.write_text(wf.read_text().replace(last, ""))  # 1,000 jobs: planned, last first
    proc = dry_run(tmp_path, wf, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert proc.stdout.index("== job j999 ") < proc.stdout.index("== job j0 ")


# ----- matrices ---------------------------------------------------------------------------------
BIG_MATRIX = """\
on: push
jobs:
  big:
    runs-on: x
    strategy:
      matrix:
        a: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]
        b: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]
    steps:
      - uses: acme/gpu-ci/actions/gpu-setup@v1
        with: {min-memory-gb: 1}
  after:
    needs: big
    runs-on: x
    steps:
      - run: echo
  other:
    runs-on: x
    steps:
      - uses: acme/gpu-ci/actions/gpu-setup@v1
        with: {min-memory-gb: 1}
"""


def test_a_matrix_over_256_legs_is_its_jobs_one_bad_input_line(tmp_path):
    """As GitHub refuses the run: the job is one bad-input line (not 289 legs planned), the
    job needing it is skipped, the others are planned."""
    wf = write(tmp_path, BIG_MATRIX, f"{WORKFLOWS}/x.yml")
    proc = dry_run(tmp_path, wf, "--json", cwd=tmp_path, GPUCI_FAKE_NVML="h200")
    assert proc.returncode == 2, proc.stdout[-3000:]
    found = {(s["job"], s["index"]): s for s in steps_of(proc)}
    assert set(found) == {("big", "-"), ("after", 1), ("other", 1)}
    big = found[("big", "-")]
    assert (big["verdict"], big["name"]) == ("bad-input", "strategy.matrix")
    assert big["detail"].startswith(
        "strategy.matrix makes 289 legs (17 x 17 values): GitHub runs at most 256 legs per "
        "matrix ('Strategy expansion exceeded 256 results') (fix: cut its axes"
    )
    assert found[("after", 1)]["verdict"] == "skipped"
    assert found[("other", 1)]["verdict"] == "ok"


def test_each_leg_copies_only_the_parts_of_its_job_that_read_the_matrix(monkeypatch):
    """job_legs deep-copied the whole job (its strategy.matrix of ~961k values by aliases too)
    once per leg, 256 legs before any was planned: a 10 KB workflow, a MemoryError."""
    shared_env = {f"K{i}": "v" for i in range(100)}
    job = {
        "runs-on": "${{ matrix.os }}",
        "env": shared_env,
        "strategy": {"matrix": {"os": ["a", "b", "c"], "big": [[shared_env] * 100]}},
        "steps": [{"run": "echo ${{ matrix.os }}", "env": shared_env}, {"run": "make"}],
    }
    legs = _jobs.job_legs("j", job, base_contexts(Partial("github", {})))
    assert [leg_job["runs-on"] for _, leg_job, _ in legs] == ["a", "b", "c"]
    assert [leg_job["steps"][0]["run"] for _, leg_job, _ in legs] == [f"echo {x}" for x in "abc"]
    for _, leg_job, _ in legs:  # what reads no matrix is the job's own, not a copy
        assert leg_job["strategy"] is job["strategy"]
        assert leg_job["env"] is shared_env and leg_job["steps"][0]["env"] is shared_env
        assert leg_job["steps"][1] is job["steps"][1]
    assert job["runs-on"] == "${{ matrix.os }}"  # the job itself untouched
    monkeypatch.setattr(_jobs, "MAX_LEG_COPIES", 8, raising=False)  # 3 legs x 4 entries
    ((name, _, leg),) = _jobs.job_legs("j", job, base_contexts(Partial("github", {})))
    assert name == "j" and isinstance(leg, Unknown) and "too large" in leg.why


def test_a_legs_name_encodes_a_large_value_only_as_far_as_it_shows():
    """A leg's name cut the value's JSON to 40 characters after encoding all of it: 256 legs
    of a ~961k-value list encoded it 256 times. Past what it shows, nothing is encoded (an
    object json cannot encode, at the end, is never reached)."""
    leg = {"n": 1, "cfg": ["x" * 30, {"k": "v" * 30}, object()]}
    assert label(leg) == 'n=1, cfg=["' + "x" * 30 + '",{"k...'
