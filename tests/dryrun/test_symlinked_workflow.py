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
