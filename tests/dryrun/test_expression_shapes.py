"""Everyday expressions over what a plan half knows end in a value or an Unknown, never in an
internal error (review E, finding 6)."""

from __future__ import annotations

import pytest

from dryrun.dryrun_testing import dry_run, one_job, write
from gpuci.dryrun._contexts import Event, base_contexts, evaluate_text, github_context
from gpuci.dryrun._expressions import ExpressionError, Unknown, evaluate, interpolate
from gpuci.dryrun._jobs import nothing_failed as ok


@pytest.fixture
def contexts(tmp_path):
    found = base_contexts(github_context(Event(), tmp_path))
    found["steps"] = {"a": {"outputs": {"v": Unknown("steps.a.outputs.v")}, "outcome": "success"}}
    return found


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        ("toJSON(steps)", "steps.a.outputs.v"),
        ("toJSON(runner)", "runner"),
        ("toJSON(github)", "github"),
        ("format('{0}', runner)", "runner"),
        ("join(fromJSON('[1]'), runner)", "runner"),
        ("contains(toJSON(secrets), 'x')", "secrets"),
    ],
)
def test_a_value_holding_an_unknown_renders_as_unknown(contexts, expression, why):
    found = evaluate(expression, contexts, ok)
    assert isinstance(found, Unknown) and found.why == why


def test_text_with_a_whole_context_in_it_is_unknown(contexts):
    found = interpolate("x ${{ steps }}", contexts, ok)
    assert isinstance(found, Unknown) and found.why == "steps.a.outputs.v"
    # an array in text is its kind's name, as the runner's ConvertToString makes it
    assert interpolate("x ${{ fromJSON('[1]') }}", contexts, ok) == "x Array"


def test_contains_in_a_list_is_true_when_found_whatever_else_it_holds(contexts):
    assert evaluate("contains(fromJSON('[1, 2]'), 2)", contexts, ok) is True
    contexts["env"] = {"L": [Unknown("vars.X"), "a"]}
    assert evaluate("contains(env.L, 'a')", contexts, ok) is True
    assert isinstance(evaluate("contains(env.L, 'b')", contexts, ok), Unknown)


@pytest.mark.parametrize("index", ["fromJSON('NaN')", "1e999", "-1e999", "fromJSON('-Infinity')"])
def test_a_non_finite_index_names_no_item(contexts, index):
    assert evaluate(f"fromJSON('[1]')[{index}]", contexts, ok) is None


def test_an_error_no_rule_foresaw_is_an_expression_error(contexts):
    def broken(_contexts, _args):
        raise TypeError("a shape nobody foresaw")

    with pytest.raises(ExpressionError, match="TypeError"):
        evaluate("broken()", contexts, ok, {"broken": broken})
    found = evaluate_text("${{ fromJSON('[1]')[0] }}", contexts, ok)
    assert found == "1"


@pytest.mark.parametrize("needs", ["5", "{a: b}", "[[a]]", "[5]"])
def test_needs_of_any_shape_is_planned(tmp_path, needs):
    wf = write(
        tmp_path,
        f"on: push\njobs:\n  5: {{runs-on: x, steps: [{{run: a}}]}}\n"
        f"  j: {{runs-on: x, needs: {needs}, steps: [{{run: echo}}]}}\n",
        ".github/workflows/wf.yml",
    )
    proc = dry_run(tmp_path, wf)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_workflow_rendering_its_contexts_is_planned(tmp_path):
    wf = one_job(
        tmp_path,
        """
        - id: a
          run: echo
        - run: echo
          env:
            A: ${{ toJSON(steps) }}
            B: ${{ toJSON(runner) }}
            C: x ${{ steps }}
            D: ${{ fromJSON('[1]')[fromJSON('NaN')] }}
        """,
        ".github/workflows/wf.yml",
    )
    proc = dry_run(tmp_path, wf)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("NaN == NaN", False),  # a keyword, as in the runner's LexicalAnalyzer; equals nothing
        ("Infinity > 1e308", True),
        ("-Infinity < -1e308", True),
        ("format('{0} {1}', Infinity, NaN)", "Infinity NaN"),
        (".5 == 0.5", True),  # a leading dot where no property can follow
        ("(.5) < 1 && fromJSON('[7, 8]')[.5] == 7", True),
        ("0o17 == 15", True),
        ("0x1F == 31", True),
        ("+2e1 == 20", True),
        ("-infinity < -1e308", True),  # read to its boundary, then parsed as text is
        ("+INFINITY > 1e308", True),
        ("5. == 5", True),
        ("env.NaN", None),  # after a dot: a property name, not the keyword
    ],
)
def test_number_literals_the_runner_reads(contexts, expression, expected):
    """``NaN``, ``Infinity``, ``.5`` and ``0o17`` were refused ("cannot parse"): the plan
    left to the run a step the runner evaluates."""
    assert evaluate(expression, contexts, ok) == expected


@pytest.mark.parametrize(
    "expression", ["1.2.3", "-0x1", "- 1", "0x", "1e", "nan == 1", "1_0", "-nan", "+NaN == 1"]
)
def test_text_the_runner_reads_as_no_number_is_refused(contexts, expression):
    """The runner reads a number up to the next boundary and refuses what does not parse
    (``-0x1`` was NaN here, ``1.2.3`` a property access)."""
    with pytest.raises(ExpressionError):
        evaluate(expression, contexts, ok)


def test_a_matrix_reference_inside_a_quoted_string_is_that_text():
    """GitHub reads ``${{ format('${{ matrix.mem }}') }}`` as one expression whose string
    holds the text ``${{ matrix.mem }}``: a leg's value was put into the string."""
    from gpuci.dryrun import _matrix as matrix

    leg = {"mem": 200}
    quoted = "${{ format('${{ matrix.mem }}') }}-${{ matrix.mem }}"
    assert matrix.substitute(quoted, leg) == "${{ format('${{ matrix.mem }}') }}-200"
    assert matrix.substitute("a ${{ matrix.mem }} b", leg) == "a 200 b"
