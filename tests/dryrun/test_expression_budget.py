"""One budget for what a plan's expressions scan: past it each expression is left to the run,
and the plan says so in one line (review E, finding 4: 20,000 env keys each searching a
5 Mi-character value kept a dry run busy for minutes)."""

from __future__ import annotations

import io
from pathlib import Path

from dryrun.dryrun_testing import WORKFLOWS, write
from gpuci.commands._dry_run import DryRunInputs
from gpuci.dryrun._bounds import Budget
from gpuci.dryrun._contexts import layer_env
from gpuci.dryrun._expressions import Unknown, evaluate
from gpuci.dryrun._jobs import nothing_failed as ok
from gpuci.runtime import Runtime
from gpuci_testing import clean_env

BIG = 100_000


def _planned_text(wf: Path) -> str:
    """What the dry run of ``wf`` prints, and its summary, in this process."""
    from gpuci.dryrun import run

    out = io.StringIO()
    result = run(DryRunInputs(workflow=str(wf)), Runtime(clean_env(), stdout=out, stderr=out))
    return out.getvalue() + "\n".join(result.summary)


def _searching_env(keys: int) -> dict[str, str]:
    return {f"K{i}": "${{ contains(env.BIG, 'needle') }}" for i in range(keys)}


def test_past_the_budget_each_value_is_left_to_the_run(monkeypatch):
    """A budget of ten searches of BIG: about ten keys are evaluated, the other 990 are
    Unknown at once (before, each of the 1,000 scanned BIG again)."""
    monkeypatch.setattr("gpuci.dryrun._bounds.MAX_EVALUATED", 10 * BIG)
    budget = Budget()
    with budget.active():
        env = layer_env({"BIG": "x" * BIG}, _searching_env(1_000), {"env": {}}, ok)
    known = [k for k, v in env.items() if k != "BIG" and v == "false"]
    unknown = [v for v in env.values() if isinstance(v, Unknown)]
    assert 5 <= len(known) <= 10
    assert len(known) + len(unknown) == 1_000
    assert "scanned over 1,000,000 characters" in unknown[-1].why
    assert budget.spent and budget.left < 0
    assert budget.left > -2 * BIG  # it stopped at the search that ran it out


def test_what_an_expression_reads_is_what_it_spends():
    budget = Budget()
    with budget.active():
        evaluate("contains(env.BIG, 'needle')", {"env": {"BIG": "x" * BIG}}, ok)
    spent = budget.limit - budget.left
    assert BIG <= spent <= BIG + 1_000


def test_without_a_plan_nothing_is_counted(monkeypatch):
    monkeypatch.setattr("gpuci.dryrun._bounds.MAX_EVALUATED", 1)
    assert evaluate("contains('abc', 'b')", {}, ok) is True


def test_a_plan_past_its_budget_says_so_once(tmp_path, monkeypatch):
    monkeypatch.setattr("gpuci.dryrun._bounds.MAX_EVALUATED", 10 * BIG)
    keys = "\n".join(f'      {k}: "{v}"' for k, v in _searching_env(200).items())
    wf = write(
        tmp_path,
        f"""\
on: push
env:
  BIG: ${{{{ format('{{0}}{{0}}{{0}}{{0}}{{0}}', '{"x" * (BIG // 5)}') }}}}
jobs:
  j:
    runs-on: x
    env:
{keys}
    steps:
      - uses: ./actions/gpu-setup
        with: {{require-gpu: '${{{{ env.K199 }}}}'}}
""",
        f"{WORKFLOWS}/wf.yml",
    )
    text = _planned_text(wf)
    assert text.count("this plan's expressions scanned over 1,000,000 characters;") == 1
    over = "this plan's expressions scanned over 1,000,000 characters"
    assert (
        f"set at run time): require-gpu (an expression this plan cannot evaluate ({over}))" in text
    )


def test_a_matrix_entry_scanning_a_large_leg_spends_the_plans_budget(tmp_path, monkeypatch):
    """200 exclude entries each looking into a 5,000-key mapping (case-blind, key by key): the
    budget runs out, the matrix is left to the run and the plan says so in its one line."""
    monkeypatch.setattr("gpuci.dryrun._bounds.MAX_EVALUATED", 10 * BIG)
    mapping = ", ".join(f"k{i}: {i}" for i in range(5_000))
    exclude = "\n".join(f"          - big: {{zzz: z{i}}}" for i in range(200))
    wf = write(
        tmp_path,
        f"""\
on: push
jobs:
  j:
    runs-on: x
    strategy:
      matrix:
        big: [{{{mapping}}}]
        exclude:
{exclude}
    steps:
      - uses: ./actions/gpu-setup
        with: {{require-gpu: '${{{{ matrix.big.k1 }}}}'}}
""",
        f"{WORKFLOWS}/wf.yml",
    )
    text = _planned_text(wf)
    assert text.count("this plan's expressions scanned over 1,000,000 characters;") == 1
    assert "its matrix is built at run time" in text
