"""One metric value may not hide another: a key named twice, or two leaves that flatten to one
dotted name, fail the metrics file in one line instead of the last value silently winning."""

from __future__ import annotations

import json

import pytest
from training_cli import run_gate

from gpuci import untrusted_json
from gpuci.errors import CheckFailed
from gpuci.training._metrics import load
from gpuci.training._rules import judge, parse_rules

COLLIDING = [
    '{"acc": 0.95, "a.cc": 1, "a": {"cc": 0.1}}',
    '{"a": {"cc": 0.1}, "a.cc": 1}',
    '{"a": [0.5], "a.0": 0.9}',
    '{"eval": {"x.y": 1, "x": {"y": 2}}}',
]


@pytest.mark.parametrize("content", COLLIDING, ids=["dotted-first", "nested-first", "list", "deep"])
def test_two_values_with_one_dotted_name_fail_the_file(tmp_path, content):
    path = tmp_path / "m.json"
    path.write_text(content)
    with pytest.raises(CheckFailed, match="is not usable metrics: two values are both named"):
        load(path)


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("m.json", '{"acc": 0.1, "acc": 0.99}'),
        ("m.json", '{"eval": {"acc": 0.1, "acc": 0.99}}'),
        ("m.jsonl", '{"acc": 0.5}\n{"acc": 0.1, "acc": 0.99}\n'),  # the last line: not torn
        ("m.log", 'step 1\n{"acc": 0.1, "acc": 0.99}\n'),
    ],
    ids=["flat", "nested", "jsonl", "log"],
)
def test_a_key_named_twice_fails_the_file(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(CheckFailed, match="is not usable metrics: it names one key twice"):
        load(path)


def test_the_gate_fails_a_duplicate_key_in_one_line(tmp_path):
    """The reviewer's case: ``{"acc": 0.1, "acc": 0.99}`` passed ``acc >= 0.9`` on the 0.99."""
    proc = run_gate(tmp_path, '{"acc": 0.1, "acc": 0.99}', "--min", "acc=0.9")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "internal error" not in proc.stdout + proc.stderr
    record = json.loads((tmp_path / "o" / "gate.json").read_text())
    assert record["passed"] is False and "names one key twice" in record["metrics_error"]


def test_a_collision_fails_the_rule_that_names_it(tmp_path):
    proc = run_gate(tmp_path, COLLIDING[0], "--min", "a.cc=0.5")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "two values are both named 'a.cc'" in proc.stdout


def test_only_the_metrics_reader_refuses_duplicate_keys():
    """Every other reader of untrusted JSON (store objects, reports) keeps last-one-wins."""
    assert untrusted_json.loads('{"a": 1, "a": 2}') == {"a": 2}
    assert untrusted_json.parse_object(b'{"a": 1, "a": 2}') == {"a": 2}
    with pytest.raises(untrusted_json.DuplicateKey):
        untrusted_json.loads('{"a": 1, "a": 2}', unique_keys=True)


def test_distinct_names_still_flatten_as_before(tmp_path):
    path = tmp_path / "m.json"
    path.write_text('{"a": {"b": 1, "c": [2, {"d": 3}]}, "a.e": 4, "x": {}, "y": []}')
    assert load(path) == {"a.b": 1, "a.c.0": 2, "a.c.1.d": 3, "a.e": 4, "x": {}, "y": []}


def _rule(kind: str, line: str):
    return parse_rules(kind, [line])


def test_a_name_the_metrics_make_ambiguous_fails_its_row_and_the_others_are_judged():
    """``junk.accuracy`` beside ``eval.accuracy`` made ``accuracy`` bad input (exit 2, no
    gate.json, no comment): the file is the PR's, so it is a failing row like any bad data."""
    metrics = {"eval.accuracy": 0.1, "junk.accuracy": 1, "loss": 0.2}
    verdict = judge(metrics, [*_rule("min", "accuracy=0.5"), *_rule("max", "loss=0.3")], None)
    assert [r.passed for r in verdict.rows] == [False, True]
    assert verdict.rows[0].verdict == (
        "FAIL: metric 'accuracy' is ambiguous: 2 matches (eval.accuracy, junk.accuracy); "
        "name it in full"
    )
    baseline = {"x.eval.accuracy": 0.5, "y.eval.accuracy": 0.5}
    (row,) = judge(metrics, _rule("max-regression", "eval.accuracy=1%"), baseline).rows
    assert not row.passed and row.verdict.endswith("in the baseline; name it in full")


def test_an_ambiguity_lists_three_names_however_many_match():
    metrics = {f"k{i}.acc": 0.5 for i in range(200_000)}
    (row,) = judge(metrics, _rule("min", "acc=0.5"), None).rows
    assert not row.passed
    assert row.verdict.endswith(
        "200000 matches (k0.acc, k1.acc, k10.acc and 199997 more); name it in full"
    )


def test_the_gate_fails_an_ambiguous_name_and_writes_its_report(tmp_path):
    metrics = {"eval": {"accuracy": 0.1}, "junk": {"accuracy": 1}}
    proc = run_gate(tmp_path, metrics, "--min", "accuracy=0.5", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (row,) = json.loads((tmp_path / "o" / "gate.json").read_text())["rows"]
    assert "is ambiguous: 2 matches" in row["verdict"]
