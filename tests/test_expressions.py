"""GitHub's expression semantics (actions/runner ``src/Sdk/Expressions``), and the unknowns a
plan carries through them."""

from __future__ import annotations

import pytest

from gpuci.dryrun._embedded import unclosed
from gpuci.dryrun._expressions import (
    ExpressionError,
    Partial,
    Unknown,
    condition,
    condition_expression,
    evaluate,
    interpolate,
)
from gpuci.dryrun._jobs import nothing_failed as ok  # the status functions where nothing failed

CTX = {
    "env": {"MEM": "10", "EMPTY": ""},
    "steps": {"r": {"outputs": {"cache-hit": "true"}, "outcome": "success"}},
    "vars": Unknown("vars"),
    "secrets": Unknown("secrets"),
    "github": Partial("github", {"ref": "refs/heads/main", "event_name": "push"}),
}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("'true' == true", False),  # 'true' is NaN as a number, true is 1
        ("'1' == true", True),
        ("null == 0", True),
        ("'' == 0", True),
        ("'abc' == 0", False),
        ("'0x10' == 16", True),
        ("env.MEM == 10", True),
        ("env.mem == '10'", True),  # contexts are case-insensitive
        ("'ABC' == 'abc'", True),
        ("'a' < 'B'", True),
        ("env.MISSING == ''", True),  # not set: null
        ("env.EMPTY || 'x'", "x"),
        ("env.MEM && 'y'", "y"),
        ("!env.EMPTY", True),
        ("format('{0}/{1}{{x}}', env.MEM, 'b')", "10/b{x}"),
        ("join(fromJSON('[1,2]'), '-')", "1-2"),
        ("github.ref_name", Unknown),  # a github property the plan does not know
    ],
)
def test_github_semantics(expr: str, expected: object) -> None:
    got = evaluate(expr, CTX, ok)
    if expected is Unknown:
        assert isinstance(got, Unknown) and got.why == "github.ref_name"
    else:
        assert got == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, "success()"),
        (False, "success() && false"),
        ("${{ env.X }}", "success() && ( env.X )"),
        ("always() && env.X", "always() && env.X"),
        ("${{ !cancelled() }}", " !cancelled() "),
        ("Failure()", "Failure()"),  # function names are case-insensitive
    ],
)
def test_conditions_add_success_unless_they_name_a_status(text, expected) -> None:
    assert condition_expression(text) == expected


def test_unknowns_decide_what_they_can() -> None:
    assert condition("vars.X == 'a' && steps.r.outputs.cache-hit != 'true'", CTX, ok) is False
    assert condition("vars.X == 'a' || steps.r.outputs.cache-hit == 'true'", CTX, ok) is True
    got = condition("vars.X == 'a'", CTX, ok)
    assert isinstance(got, Unknown) and got.why == "vars.X"
    unsure = lambda s: True if s == "always" else Unknown("an earlier step")  # noqa: E731
    assert condition("always()", CTX, unsure) is True
    assert isinstance(condition("true", CTX, unsure), Unknown)
    assert condition("false", CTX, unsure) is False
    # the value of `vars.X || 'd'` is unknown, though it is surely truthy
    assert isinstance(evaluate("vars.X || 'd'", CTX, ok), Unknown)
    assert condition("vars.X || 'd'", CTX, ok) is True
    assert isinstance(interpolate("${{ secrets.T }}-x", CTX, ok), Unknown)
    assert interpolate("${{ env.MEM }}/hub", CTX, ok) == "10/hub"
    hashed = evaluate("hashFiles('a')", CTX, ok, frozenset({"hashfiles"}))
    assert isinstance(hashed, Unknown) and hashed.why == "hashFiles()"


def test_what_github_would_refuse_is_an_error() -> None:
    for bad in ("nope.x", "hashFiles('a')", "env.MEM ==", "a b", "fromJSON('{')"):
        with pytest.raises(ExpressionError):
            evaluate(bad, CTX, ok)
    with pytest.raises(ExpressionError):  # not closed: GitHub fails the file
        condition("x ${{ true", CTX, ok)
    assert condition("x ${{ false }}", CTX, ok) is True  # text around: 'x false', not refused


def test_an_object_filter_maps_a_property_over_the_items():
    ctx = {"github": {"event": {"labels": [{"name": "gpu"}, {"name": "docs"}, {"id": 3}]}}}
    assert evaluate("github.event.labels.*.name", ctx, ok) == ["gpu", "docs"]
    assert evaluate("contains(github.event.labels.*.name, 'GPU')", ctx, ok) is True
    assert evaluate("contains(github.event.nothing.*.name, 'gpu')", ctx, ok) is False


def test_from_json_of_hostile_text_is_an_error_not_a_traceback() -> None:
    """fromJSON reads vars and --vars-file text through untrusted_json: 100,000 nested brackets
    were a RecursionError (an internal error), a 5,000-digit number a ValueError's traceback."""
    ctx = {**CTX, "vars": {"DEEP": "[" * 100_000 + "]" * 100_000, "LONG": "9" * 5_000}}
    for name in ("DEEP", "LONG"):
        with pytest.raises(ExpressionError, match="fromJSON of text that is not JSON"):
            evaluate(f"fromJSON(vars.{name})", ctx, ok)


@pytest.mark.parametrize(
    "text",
    [
        "(" * 3000 + "true" + ")" * 3000,
        "!" * 5000 + "true",
        "format(" * 2000 + "'x'" + ")" * 2000,
        "env[" * 2000 + "'MEM'" + "]" * 2000,
        " || ".join(["true"] * 6000),  # 30,000 characters: GitHub allows 21,000
    ],
    ids=["parentheses", "nots", "calls", "indexes", "length"],
)
def test_an_expression_past_githubs_nesting_or_length_is_an_error(text: str) -> None:
    """GitHub refuses an expression over 21,000 characters or nested past 50 levels; here such
    one was a RecursionError (an internal error of the whole dry run), or was evaluated."""
    with pytest.raises(ExpressionError, match=r"nested deeper than 50|GitHub allows 21,000"):
        evaluate(text, CTX, ok)
    with pytest.raises(ExpressionError):
        condition(text, CTX, ok)


def test_nesting_within_githubs_depth_still_evaluates() -> None:
    assert evaluate("(" * 49 + "env.MEM" + ")" * 49, CTX, ok) == "10"
    assert evaluate("!" * 48 + "true", CTX, ok) is True
    assert condition("(" * 40 + "true" + ")" * 40, CTX, ok) is True


def test_a_string_longer_than_github_evaluates_is_an_error(monkeypatch) -> None:
    """format() through env: grew 16-fold a step (16**9 bytes from a 1 KiB file: MemoryError);
    each way an expression builds text stops at MAX_TEXT (lowered here to 100)."""
    import gpuci.dryrun._expressions as expressions

    monkeypatch.setattr(expressions, "MAX_TEXT", 100, raising=False)
    ctx = {**CTX, "env": {"X": "x" * 30, "LIST": ["y" * 30] * 4}}
    for text in (
        "format('{0}{0}{0}{0}', env.X)",
        "join(env.LIST, '')",
        "join(env.LIST, env.X)",
        "toJSON(env.LIST)",
    ):
        with pytest.raises(ExpressionError, match="GitHub evaluates at most 100"):
            evaluate(text, ctx, ok)
    with pytest.raises(ExpressionError, match="GitHub evaluates at most 100"):
        interpolate("${{ env.X }}${{ env.X }}${{ env.X }}${{ env.X }}", ctx, ok)
    assert evaluate("format('{0}{0}', env.X)", ctx, ok) == "x" * 60  # under the cap
    assert interpolate("${{ env.X }}-${{ env.X }}", ctx, ok) == "x" * 30 + "-" + "x" * 30


def test_an_env_block_larger_than_github_evaluates_leaves_the_rest_to_the_run(monkeypatch):
    """Values that each repeat a long one (``X2: a${{ env.X1 }}``) add up in one env: block;
    past MAX_TEXT (lowered to 100) the rest is unknown, as GitHub evaluates a block in one go."""
    import gpuci.dryrun._expressions as expressions
    from gpuci.dryrun._contexts import layer_env

    monkeypatch.setattr(expressions, "MAX_TEXT", 100, raising=False)
    scope = {"X1": "x" * 40, "X2": "a${{ env.X1 }}", "X3": "b${{ env.X1 }}", "X4": "c"}
    env = layer_env({}, scope, {**CTX, "env": {}}, ok)
    assert env["X1"] == "x" * 40 and env["X2"] == "a" + "x" * 40
    assert isinstance(env["X3"], Unknown) and "larger than GitHub evaluates" in env["X3"].why
    assert isinstance(env["X4"], Unknown)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # A number is a double, printed with 15 significant digits (ExpressionConstants
        # .NumberFormat "G15"): Python printed 17, or every digit of an integer.
        ("format('{0}', 1.23456789012345678)", "1.23456789012346"),
        ("format('{0}', 1e20)", "1E+20"),
        ("format('{0}', 0.00001)", "1E-05"),
        ("format('{0}', fromJSON('12345678901234567890'))", "1.23456789012346E+19"),
        ("format('{0}', 3.5)", "3.5"),
        ("format('{0}', 40)", "40"),
        ("format('{0}', fromJSON('{\"a\": 1}'))", "Object"),  # not its JSON
        ("format('{0}', fromJSON('[1, 2]'))", "Array"),
        ("join(fromJSON('[[1], {\"a\": 1}, 2]'))", "Array,Object,2"),
        ("join(fromJSON('[1, 2]'), fromJSON('[0]'))", "1,2"),  # a separator no primitive
        ("join(fromJSON('{\"a\": 1}'))", ""),
        ("contains(fromJSON('{\"title\": 1}'), 'title')", False),  # JSON's text was searched
        ("contains('Object', fromJSON('{}'))", False),
        ("startsWith(fromJSON('[\"ab\"]'), '[')", False),
        ("endsWith('x]', fromJSON('[]'))", False),
    ],
)
def test_values_are_text_as_the_runner_makes_them(expr: str, expected: object) -> None:
    """ConvertToString, Contains, StartsWith, EndsWith and Join of actions/runner's
    ``Expressions2``: a plan showed (and compared) text the run never has."""
    assert evaluate(expr, CTX, ok) == expected


@pytest.mark.parametrize("template", ["a{b", "a}b", "{0:x}", "{x}", "{ 0}", "{0", "}{"])
def test_a_format_string_the_runner_refuses_is_an_error(template: str) -> None:
    """The runner's format() throws on a brace that is neither escaped (``{{``, ``}}``) nor a
    ``{N}`` (a format specifier only for a date): the step fails. The plan printed the text
    as it was, a value the run never has."""
    with pytest.raises(ExpressionError, match="format"):
        evaluate(f"format('{template}', 1)", CTX, ok)
    assert evaluate("format('{{{0}}}}}', 1)", CTX, ok) == "{1}}"


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("toJSON(fromJSON('[1.0, 2.5, 1e20]'))", "[\n  1,\n  2.5,\n  1E+20\n]"),
        ('toJSON(fromJSON(\'{"é": "ü", "n": null}\'))', '{\n  "é": "ü",\n  "n": null\n}'),
        ("toJSON(fromJSON('[[], {}, [true]]'))", "[\n  [],\n  {},\n  [\n    true\n  ]\n]"),
        ("toJSON(12345678901234567890)", "1.23456789012346E+19"),
        ("toJSON('a\"b')", '"a\\"b"'),
    ],
)
def test_to_json_writes_as_the_runner_writes(expr: str, expected: str) -> None:
    """The runner's toJSON writes each number as its text (G15: ``1``, not ``1.0``) and a
    string's characters as they are (Python's json escaped every one past ASCII)."""
    assert evaluate(expr, CTX, ok) == expected


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("'1_000' == 1000", False),  # Python's float() reads underscores; .NET's does not
        ("'inf' > 1", False),
        ("'\u221e' > 1", False),  # the invariant culture's infinity is 'Infinity', not the sign
        ("'Infinity' > 1", True),
        ("'-Infinity' < 1", True),
        ("'0X10' == 16", False),  # only a lowercase 0x
        ("'0x10' == 16", True),
        ("'0o17' == 15", True),  # Python: NaN
        ("'0xffffffff' == -1", True),  # an Int32, as .NET parses it
        ("'0x100000000' == 4294967296", False),  # past an Int32: NaN
        ("' 1.5e1 ' == 15", True),
        ("'1.' == 1", True),
        ("'.' == 0", False),
    ],
)
def test_text_is_a_number_as_the_runner_parses_one(expr: str, expected: bool) -> None:
    """ExpressionUtility.ParseNumber: .NET's Double.TryParse, then 0x and 0o as an Int32,
    then 'Infinity'; anything else NaN. Python's float() read more, so a comparison the run
    finds false was true in the plan."""
    assert evaluate(expr, CTX, ok) is expected


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("'infinity' > 1", True),
        ("'INFINITY' > 1", True),
        ("'+infinity' > 1", True),
        ("'-infinity' < -1", True),
        ("' -INFINITY\t' < -1", True),
        ("'\u0131nfinity' > 1", False),  # a dotless i is no i to OrdinalIgnoreCase
        ("'\x1f5' == 5", False),  # no white space to .NET (Python's strip() took it)
        ("'\u30005\u2028' == 5", True),
        ("'5\x00\x00' == 5", True),  # NULs after a number end it
        ("'0x10\x00' == 16", False),
    ],
)
def test_text_is_a_number_as_dotnet_8_reads_it(expr: str, expected: bool) -> None:
    """ParseNumber's Double.TryParse (.NET 8, the runner's) reads 'Infinity', '-Infinity'
    and 'NaN' in any case (Number.TryParseFloat compares them OrdinalIgnoreCase) and a number
    followed by NULs, after String.Trim (.NET's white space); the plan read only 'Infinity' as
    written, so 'infinity' > 1 was false there and true in the run."""
    assert evaluate(expr, CTX, ok) is expected


@pytest.mark.parametrize(
    ("value", "text"),
    [(12.0, "12"), (1e3, "1000"), (1e20, "1E+20"), (0.1, "0.1"), (40, "40"), (True, "true")],
)
def test_a_yaml_number_is_text_as_the_runner_makes_it(value: object, text: str) -> None:
    """``env: {CUDA: 12.0}``: the runner's NumberToken is a double printed with G15, so the
    step's env holds ``12``; the plan had Python's ``12.0`` (and compared that)."""
    from gpuci.dryrun._values import text_of

    assert text_of(value) == text


@pytest.mark.timeout(60)  # a bound on a hang, not a timing: each comparison takes milliseconds
@pytest.mark.parametrize(
    "text",
    ["1" * 200_000 + "x", "-" + "1" * 200_000 + ".", "." + "1" * 200_000 + "e"],
    ids=["digits-letter", "sign-digits-point", "point-digits-e"],
)
def test_a_long_run_of_digits_is_read_in_linear_time(text: str) -> None:
    """``env.X == 0`` with 200,000 digits and one letter in X: the number pattern tried every
    split of the digits between two loops (16,000 digits took 12 s, this one hours)."""
    assert evaluate("env.X == 0 || env.X == 1", {"env": {"X": text}}, ok) is False


@pytest.mark.parametrize("text", ["1 ==\x1c1", "\x1f1 == 1", "1 == 1\x1e", "env.MEM\x1d== 10"])
def test_a_control_character_python_calls_space_is_no_space_to_the_runner(text: str) -> None:
    """U+001C-U+001F are white space to Python's ``\\s`` and ``strip()``, not to .NET's
    Char.IsWhiteSpace: the runner's LexicalAnalyzer reads ``\\x1c1`` as one token it refuses
    (the job fails), where the plan read ``1 == 1`` and ran the step."""
    with pytest.raises(ExpressionError):
        condition(text, CTX, ok)
    assert evaluate("1 ==\u30001\u2028", CTX, ok) is True  # .NET's own white space still is


@pytest.mark.timeout(60)  # a bound on a hang, not a timing: this takes milliseconds
def test_many_unclosed_expressions_are_scanned_in_linear_time() -> None:
    """``${{`` that no ``}}`` closes, 200,000 times in one value: the pattern tried each to the
    text's end (32,000 took 18 s). GitHub refuses such a text (the expression is not closed),
    and so does the scan, reading it once; so it does for 200,000 quoted strings."""
    for text in ("${{ env.MEM }} " + "${{" * 200_000, "${{ " + "'a'" * 200_000):
        assert unclosed(text)
        with pytest.raises(ExpressionError, match="not closed"):
            interpolate(text, CTX, ok)
    assert interpolate("${{ '${{' }}}}x", CTX, ok) == "${{}}x"
    assert interpolate("${{ env.MEM }}" * 100_000, CTX, ok) == "10" * 100_000


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("${{ format('}}') }}", "}"),  # the quoted }} does not end it (it was "format('")
        ("${{ format('a}}b{0}', 'c') }}!", "a}bc!"),
        ("${{ 'it''s }}' }}", "it's }}"),  # '' toggles twice: still in the string
        ("${{ '}' }}}", "}}"),  # the first }} outside a string ends it; the } after is text
        ("<${{ '{{ x }}' }}>${{ env.MEM }}", "<{{ x }}>10"),
    ],
)
def test_an_expression_ends_at_the_first_closing_braces_outside_a_string(text, expected):
    """GitHub's TemplateReader toggles "in a string" at each ' and ends an expression at the
    first }} outside one; the plan ended it at the first }}, inside the literal too."""
    assert interpolate(text, CTX, ok) == expected


def test_if_is_one_expression_only_when_its_braces_are_outside_strings() -> None:
    assert condition_expression("${{ '}}' == '}}' }}") == "success() && ( '}}' == '}}' )"
    assert condition("${{ '}}' == '}}' }}", CTX, ok) is True
    # two expressions are not one, though the text starts with ${{ and ends with }}
    expr = condition_expression("${{ true }} && ${{ false }}")
    assert expr == "success() && (format('{0} && {1}',  true ,  false ))"


def failed(name: str) -> bool:
    """The status functions after an earlier step failed."""
    return name in ("failure", "always")


@pytest.mark.parametrize(
    ("text", "after_success", "after_failure"),
    [
        ("${{ false }} && false", True, False),  # format('{0} && false', false): 'false && false'
        ("success() && ${{ false }}", True, False),  # its success() is text, not a call
        ("${{ always() }} && false", True, True),  # always() inside: no success() is added
        ("${{ false }}\n", True, False),  # ``if: |`` keeps the newline: text around it
        (" ${{ false }}", True, False),  # a quoted value keeps its spaces
        ("${{ '' }}${{ '' }}", False, False),  # the text format() makes is empty: false
        ("${{ 'false' }}", False, False),  # one literal: its text is the condition
        ("${{ 'always()' }}", True, True),
        ("${{ '' }}", True, False),  # a blank condition is success()
        ("", True, False),
        ("${{ false }}", False, False),
    ],
)
def test_an_if_with_text_around_its_expression_is_the_text_github_makes(
    text, after_success, after_failure
) -> None:
    """GitHub's TemplateReader makes ``format()`` of an ``if:`` with text around a ``${{ }}``,
    and its workflow converter reads the result as the condition: a string, true when not
    empty (``${{ false }} && false`` runs). The plan refused such an ``if:``, leaving the step
    'conditional'; a lone literal (``${{ 'false' }}``) it read as a truthy string."""
    assert condition(text, CTX, ok) is after_success
    assert condition(text, CTX, failed) is after_failure


def test_text_around_an_if_expression_keeps_its_quotes_and_braces() -> None:
    expr = condition_expression("it's {x}: ${{ env.MEM }}")
    assert expr == "success() && (format('it''s {{x}}: {0}',  env.MEM ))"
    assert evaluate(expr, CTX, ok) == "it's {x}: 10"
