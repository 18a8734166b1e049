"""The one reader of JSON someone else wrote: hostile text ends in one line, never a hang."""

import itertools
import random

import pytest

from gpuci import untrusted_json


def test_an_unclosed_string_of_escaped_quotes_is_taken_in_one_match():
    """Each escaped quote of a string that never closes used to start a new scan to the end of
    the text (80 KB took 40 s: a planted ref or verdict held a job for minutes). One match now
    takes the unclosed string to the end, so the scan is linear; the parser then refuses it."""
    text = '"' + '\\"' * 50_000
    found = untrusted_json._STRING.match(text)
    assert found is not None and found.end() == len(text)
    with pytest.raises(untrusted_json.Unusable, match="not valid JSON"):
        untrusted_json.loads(text)


def test_brackets_inside_strings_still_do_not_count_as_nesting():
    assert untrusted_json.loads('{"a": "[[[[{{{{\\"]]]]"}') == {"a": '[[[[{{{{"]]]]'}


def _nesting_by_regex(text: str) -> int:
    """The nesting as the one regex reads it (strings with their escapes stripped first)."""
    brackets = untrusted_json._NOT_A_BRACKET.sub("", untrusted_json._STRING.sub("", text))
    step = {"[": 1, "{": 1, "]": -1, "}": -1}
    return max(itertools.accumulate(step[b] for b in brackets), default=0)


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ('[[["]]]"]', 3),  # brackets in a string, no backslash
        ('[["[[[[', 2),  # a string that never closes takes the rest
        ('["\\\\"[[]]', 3),  # an escaped backslash, then the quote that closes
        ('[["\\"[[[]"]]', 2),  # an escaped quote: the string goes on
        ('[["\\"]]', 2),  # ... to the end, when no quote closes it
        ('{"a":[{"b":"}}}"}]}', 3),
        ("", 0),
    ],
)
def test_the_nesting_ignores_strings_with_and_without_escapes(text, depth):
    assert untrusted_json._nesting(text) == depth == _nesting_by_regex(text)


def test_the_split_reading_of_nesting_agrees_with_the_regex():
    """Text without a backslash is read from its brackets and quotes alone (a warm restore's
    manifest, several times faster); with one the regex reads it. Both must measure every text
    alike, non-ASCII text included (its UTF-8 never holds a bracket's or a quote's byte)."""
    rng = random.Random(33)
    for size in range(1, 200):
        for alphabet in ('[]{}"a,\u00e9\U0001f600', '[]{}"\\a\u00e9'):
            text = "".join(rng.choice(alphabet) for _ in range(size))
            assert untrusted_json._nesting(text) == _nesting_by_regex(text), text


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"untilEpoch": Infinity}', "Infinity"),
        ('{"untilEpoch": -Infinity}', "-Infinity"),
        ('{"value": NaN}', "NaN"),
        ('{"untilEpoch": 1e400}', "too large"),
    ],
)
def test_numbers_no_limit_can_compare_are_refused_in_records(text, why):
    """A reservation "until Infinity" would never expire and hold its owner's budget for good:
    records gpu-ci writes itself (refs, pins, the ledger, verdicts) hold finite numbers only."""
    with pytest.raises(untrusted_json.Unusable, match=why):
        untrusted_json.loads(text, finite=True)
    with pytest.raises(untrusted_json.Unusable, match=why):
        untrusted_json.parse_object(text)


def test_metrics_keep_nan_so_the_gate_can_name_it():
    """A diverged run's loss is NaN (json.dump writes it so): the gate fails that metric by
    name, so a metrics file is not refused whole."""
    got = untrusted_json.loads('{"loss": NaN}')
    assert got["loss"] != got["loss"]


@pytest.mark.parametrize("text", ['{"path": "a\\ud800b"}', '{"k\\udfff": 1}', '{"k": ["\\ud83d"]}'])
def test_a_lone_surrogate_is_refused_as_no_text(text):
    """JSON lets "\\ud800" stand alone; no UTF-8 can hold it, so a ref's key, a pin's reason or
    a manifest's path holding one ended in UnicodeEncodeError wherever it was printed, quoted
    into a URL or opened (an internal error, far from the read). The one reader refuses it, as
    it refuses bytes that are not UTF-8."""
    for given in (text, text.encode()):
        with pytest.raises(untrusted_json.Unusable, match="lone surrogate"):
            untrusted_json.parse_object(given)
    with pytest.raises(untrusted_json.Unusable, match="lone surrogate"):
        untrusted_json.loads('"\\ude00\\ud83d"')  # a pair in the wrong order is two lone ones
    with pytest.raises(untrusted_json.Unusable, match="lone surrogate"):
        untrusted_json.loads('"x\ud800"')  # a str that holds one itself


def test_an_escaped_surrogate_pair_and_an_escaped_backslash_still_read():
    assert untrusted_json.loads('["\\ud83d\\ude00", "\\\\ud800"]') == ["\U0001f600", "\\ud800"]


@pytest.mark.parametrize("sign", ["", "-"])
def test_an_integer_of_one_digit_too_many_is_refused_at_the_limit(sign):
    """Integers are read by the parser's own ``int`` unless the text holds a run of more than
    MAX_DIGITS digits somewhere; then each goes through the digit count."""
    most = "9" * untrusted_json.MAX_DIGITS
    assert untrusted_json.loads(f'{{"n": {sign}{most}}}')["n"] == int(sign + most)
    assert untrusted_json.loads(f'{{"n": {sign}{most}}}'.encode())["n"] == int(sign + most)
    with pytest.raises(untrusted_json.Unusable, match="an integer of 401 digits"):
        untrusted_json.loads(f'{{"n": {sign}{most}9}}')
    with pytest.raises(untrusted_json.Unusable, match="an integer of 401 digits"):
        untrusted_json.loads(f'[1, "x", {sign}{most}9]'.encode())


def test_a_long_run_of_digits_in_a_string_reads_as_before():
    """The digit run that makes every integer go through the count may sit in a string."""
    text = '{"s": "' + "7" * 500 + '", "n": 12, "m": [-3, 0]}'
    assert untrusted_json.loads(text) == {"s": "7" * 500, "n": 12, "m": [-3, 0]}
    assert untrusted_json.loads(text.encode()) == {"s": "7" * 500, "n": 12, "m": [-3, 0]}
