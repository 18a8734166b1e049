"""A workflow file that is a symbolic link: the checkout is where it is named, and one whose
target leaves that checkout is refused (review E, finding 8)."""

from __future__ import annotations

import os

from dryrun.dryrun_testing import WORKFLOWS, dry_run, write


def test_a_symlinked_workflow_leaving_the_checkout_is_refused(tmp_path):
    outside = write(tmp_path / "other", "on: push\njobs: {j: {runs-on: x, steps: [{run: a}]}}\n")
    checkout = tmp_path / "pr"
    (checkout / WORKFLOWS).mkdir(parents=True)
    os.symlink(outside, checkout / WORKFLOWS / "wf.yml")
    proc = dry_run(tmp_path, checkout / WORKFLOWS / "wf.yml", "--json")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "symbolic link that leaves the" in proc.stdout + proc.stderr
    assert str(tmp_path / "other") not in proc.stdout + proc.stderr


def test_a_symlinked_workflow_inside_the_checkout_keeps_the_links_checkout(tmp_path):
    checkout = tmp_path / "pr"
    real = write(checkout, "on: push\njobs: {j: {runs-on: x, steps: [{run: a}]}}\n", "real.yml")
    (checkout / WORKFLOWS).mkdir(parents=True)
    os.symlink(real, checkout / WORKFLOWS / "wf.yml")
    proc = dry_run(tmp_path, checkout / WORKFLOWS / "wf.yml", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"in {checkout};" in proc.stderr


def _readable(link: str) -> bool:
    try:
        os.readlink(link)
    except OSError:
        return False
    return True


def test_a_local_uses_that_cannot_be_resolved_is_planned_not_an_internal_error(tmp_path):
    """``uses: ./<a name of 300 characters>`` (ENAMETOOLONG from is_file) and, where this user
    may not read it, ``uses: ./pid1/act`` with ``pid1 -> /proc/1/cwd`` (EACCES from resolve:
    so on any runner that is not root) ended the plan in an internal error. The PR writes both:
    each is a step whose action the plan cannot read, or a reusable workflow not inspected."""
    long = "y" * 300
    uses = [f"./{long}", f"./.github/workflows/{long}.yml"]
    if not _readable("/proc/1/cwd"):
        os.symlink("/proc/1/cwd", tmp_path / "pid1")
        uses += ["./pid1/act", "./pid1/w.yml"]
    steps = "".join(
        f"  s{i}: {{runs-on: x, steps: [{{uses: '{u}'}}]}}\n" for i, u in enumerate(uses)
    )
    calls = "".join(f"  c{i}: {{uses: '{u}'}}\n" for i, u in enumerate(uses))
    wf = write(tmp_path, "on: push\njobs:\n" + steps + calls, f"{WORKFLOWS}/wf.yml")
    proc = dry_run(tmp_path, wf, cwd=tmp_path)
    text = proc.stdout + proc.stderr
    assert "internal error" not in text and "Traceback" not in text, text
    assert proc.returncode == 0, text
    assert text.count("not inspected: local reusable workflow not found") == len(uses), text


def test_a_workflow_the_system_will_not_stat_is_one_bad_input_line(tmp_path):
    """The workflow named is the PR's file: a link to a name too long (ENAMETOOLONG) or, where
    this user may not read it, into /proc/1/cwd (EACCES) was an internal error from is_file."""
    (tmp_path / WORKFLOWS).mkdir(parents=True)
    links = {"long.yml": "y" * 300}
    if not _readable("/proc/1/cwd"):
        links["pid1.yml"] = "/proc/1/cwd/w.yml"
    for name, target in links.items():
        os.symlink(target, tmp_path / WORKFLOWS / name)
        proc = dry_run(tmp_path, tmp_path / WORKFLOWS / name, cwd=tmp_path)
        text = proc.stdout + proc.stderr
        assert "internal error" not in text and proc.returncode == 2, text
        assert f"cannot read workflow {tmp_path / WORKFLOWS / name}" in text, text


def test_a_save_path_the_system_will_not_stat_is_judged_missing_not_an_error(tmp_path):
    """A save's ``path`` is the PR's text: ``Path.exists`` raised ENAMETOOLONG for a name of
    300 characters (an internal error of the plan); such a path is one no step makes."""
    from gpuci.dryrun._path_origins import missing_paths

    long = "m" * 300
    steps = [{"run": "echo"}, {"uses": "./actions/cache-weights/save", "with": {"path": long}}]
    (found,) = missing_paths(steps, 1, [long], tmp_path)
    assert found.path == long and found.reason == "no step before this one makes it"
