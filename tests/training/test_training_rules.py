"""Reading metrics and judging rules: the edge cases that must fail, never pass."""

from __future__ import annotations

import json

import pytest

from gpuci.errors import CheckFailed, InputError
from gpuci.training._metrics import flatten, load, lookup
from gpuci.training._rules import judge, lower_is_better, parse_rules


def rules(**kinds: list[str]):
    return [r for kind, lines in kinds.items() for r in parse_rules(kind.replace("_", "-"), lines)]


def test_nested_json_flattens_to_dotted_names(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"eval": {"accuracy": 0.93, "per_class": [0.9, 0.96]}, "loss": 1}))
    assert load(path) == {
        "eval.accuracy": 0.93,
        "eval.per_class.0": 0.9,
        "eval.per_class.1": 0.96,
        "loss": 1,
    }


def test_jsonl_log_uses_last_complete_line(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 0.5}\n{"step": 3, "lo')
    assert load(path) == {"step": 2, "loss": 0.5}


def test_missing_and_malformed_metrics_files_fail(tmp_path):
    with pytest.raises(CheckFailed, match="not found"):
        load(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(CheckFailed, match="not valid JSON"):
        load(bad)
    arr = tmp_path / "arr.json"
    arr.write_text("[1, 2]")
    with pytest.raises(CheckFailed, match="not an object"):
        load(arr)


def test_lookup_exact_then_unique_suffix_and_ambiguity_is_an_error():
    metrics = flatten({"eval": {"accuracy": 0.9}, "train": {"loss": 1.0}, "eval.loss": 2.0})
    assert lookup(metrics, "eval.accuracy") == ("eval.accuracy", 0.9)
    assert lookup(metrics, "accuracy") == ("eval.accuracy", 0.9)
    assert lookup(metrics, "recall") is None
    with pytest.raises(InputError, match="ambiguous"):
        lookup(metrics, "loss")


def test_min_max_pass_and_fail_with_reasons():
    metrics = {"eval.accuracy": 0.91, "loss": 0.3}
    verdict = judge(metrics, rules(min=["eval.accuracy=0.92"], max=["loss=0.35"]), None)
    assert not verdict.passed
    assert [r.passed for r in verdict.rows] == [False, True]
    assert verdict.rows[0].verdict == "FAIL: below 0.92"
    assert verdict.rows[0].rule_text == "eval.accuracy >= 0.92"
    # the boundary value itself passes
    assert judge({"a": 0.92}, rules(min=["a=0.92"]), None).passed


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (float("nan"), "FAIL: NaN"),
        (float("inf"), "FAIL: infinite"),
        ("0.95", "FAIL: not a number (str)"),
        (True, "FAIL: not a number (bool)"),
        (None, "FAIL: not a number (null)"),
        ({}, "FAIL: not a number (dict)"),
    ],
)
def test_nan_and_wrong_types_fail_every_rule_kind(value, reason):
    metrics = {"acc": value}
    for rule_set in (rules(min=["acc=0"]), rules(max=["acc=1e9"])):
        verdict = judge(metrics, rule_set, None)
        assert not verdict.passed
        assert verdict.rows[0].verdict == reason
    regression = judge(metrics, rules(max_regression=["acc=1"]), {"acc": 0.9})
    assert not regression.passed


def test_nan_read_from_a_real_file_fails(tmp_path):
    path = tmp_path / "m.json"
    path.write_text('{"eval": {"accuracy": NaN}}')  # what json.dump writes for float("nan")
    verdict = judge(load(path), rules(min=["eval.accuracy=0.5"]), None)
    assert not verdict.passed and verdict.rows[0].verdict == "FAIL: NaN"


def test_missing_metric_fails():
    verdict = judge({"loss": 0.1}, rules(min=["eval.accuracy=0.5"]), None)
    assert not verdict.passed
    assert verdict.rows[0].verdict == "FAIL: metric missing"
    assert verdict.rows[0].metric == "eval.accuracy"


def test_regression_direction_follows_the_metric():
    base = {"eval.accuracy": 0.95, "eval.loss": 0.20}
    # accuracy: higher is better, so a drop of 0.02 fails a 0.01 allowance, a rise passes
    r = rules(max_regression=["accuracy=0.01", "loss=0.05"])
    verdict = judge({"eval.accuracy": 0.93, "eval.loss": 0.24}, r, base)
    assert [row.passed for row in verdict.rows] == [False, True]
    assert verdict.rows[0].rule_text == "accuracy drop <= 0.01 vs baseline"
    assert verdict.rows[1].rule_text == "loss rise <= 0.05 vs baseline"
    assert verdict.rows[0].delta == pytest.approx(-0.02)
    assert judge({"eval.accuracy": 0.99, "eval.loss": 0.26}, r, base).rows[1].passed is False
    # exactly at the allowance passes despite float rounding (0.95 - 0.94)
    assert judge({"eval.accuracy": 0.94, "eval.loss": 0.2}, r, base).passed


def test_relative_regression_in_percent():
    r = rules(max_regression=["tokens_per_s=5%"])
    assert judge({"tokens_per_s": 960.0}, r, {"tokens_per_s": 1000.0}).passed
    assert not judge({"tokens_per_s": 940.0}, r, {"tokens_per_s": 1000.0}).passed


def test_lower_is_better_sources():
    assert lower_is_better("val.loss", [], None)
    assert lower_is_better("latency_ms", [], None)
    assert not lower_is_better("accuracy", [], None)
    assert lower_is_better("score", rules(max=["score=3"]), None)
    assert not lower_is_better("loss", rules(min=["loss=0"]), None)
    assert lower_is_better("eval.score", [], ["score"])


def test_baseline_absent_skips_regression_unless_required():
    r = rules(max_regression=["accuracy=0.01"])
    verdict = judge({"accuracy": 0.5}, r, None)
    assert verdict.passed and verdict.rows[0].skipped
    assert verdict.rows[0].verdict == "skipped: no baseline"
    required = judge({"accuracy": 0.5}, r, None, require_baseline=True)
    assert not required.passed and required.rows[0].verdict == "FAIL: no baseline"
    not_in = judge({"accuracy": 0.5}, r, {"other": 1.0})
    assert not_in.passed and not_in.rows[0].verdict == "skipped: not in baseline"


@pytest.mark.parametrize(
    ("value", "why"),
    [(float("nan"), "NaN"), (float("-inf"), "infinite"), ("0.9", "not a number (str)")],
)
def test_a_baseline_value_that_is_no_number_is_named_not_called_missing(value, why):
    """A baseline whose metric is NaN (main's run diverged) or a string skipped the regression
    rule as "not in baseline": the metric is there, and the row says what it holds."""
    r = rules(max_regression=["accuracy=0.01"])
    skipped = judge({"accuracy": 0.5}, r, {"accuracy": value})
    assert skipped.passed and skipped.rows[0].skipped
    assert skipped.rows[0].verdict == f"skipped: baseline value is {why}"
    required = judge({"accuracy": 0.5}, r, {"accuracy": value}, require_baseline=True)
    assert not required.passed
    assert required.rows[0].verdict == f"FAIL: baseline value is {why}"


@pytest.mark.parametrize(
    ("kind", "line", "match"),
    [
        ("min", "accuracy", "not name=value"),
        ("min", "=0.9", "not name=value"),
        ("min", "accuracy=high", "not a finite number"),
        ("max", "loss=nan", "not a finite number"),
        ("min", "acc 1=0.5", "not name=value"),
        ("max-regression", "accuracy=-0.1", "cannot be negative"),
        ("min", "5%", "not name=value"),
    ],
)
def test_malformed_rules_are_bad_input(kind, line, match):
    with pytest.raises(InputError, match=match) as info:
        parse_rules(kind, [line])
    assert info.value.hint


def test_duplicate_rule_is_bad_input():
    with pytest.raises(InputError, match="given twice"):
        parse_rules("min", ["a=1", "a=2"])


def test_bounds_on_both_sides_say_nothing_of_which_way_is_worse():
    """``min: loss=0`` and ``max: loss=2`` bound a loss on both sides: the min rule made it
    higher-is-better, so a regression rule let a loss that rose from 1.0 to 1.5 pass (and
    failed one that fell). Both bounds: the name decides, as the docs say."""
    both = rules(min=["loss=0"], max=["loss=2"], max_regression=["loss=0.05"])
    assert lower_is_better("loss", both, None)
    assert not judge({"loss": 1.5}, both, {"loss": 1.0}).passed
    assert judge({"loss": 0.5}, both, {"loss": 1.0}).passed
    assert not lower_is_better("accuracy", rules(min=["accuracy=0"], max=["accuracy=1"]), None)
