"""A workflow file a pull request wrote, read within GitHub's own bounds: nesting, what its
aliases stand for, keys named twice. Each is one ``bad input`` line (exit 2) naming the file,
the line and what GitHub allows, not a traceback, a MemoryError or a silent guess."""

from __future__ import annotations

from pathlib import Path

import pytest

from dryrun.dryrun_testing import WORKFLOWS, dry_run, write
from gpuci.dryrun._workflow import load_workflow, read_yaml
from gpuci.errors import InputError

JOB = "jobs:\n  j:\n    runs-on: x\n    steps:\n      - run: echo\n"


def refused(tmp_path: Path, text: str) -> str:
    """The one-line reason ``read_yaml`` refuses ``text`` with, and its hint."""
    path = tmp_path / "wf.yml"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        read_yaml(path, "workflow")
    message = f"{caught.value} (fix: {caught.value.hint})"
    assert str(path) in message and "\n" not in message
    return message


def test_nesting_deeper_than_github_reads_is_refused(tmp_path):
    """50,000 nested brackets were a RecursionError, an 'internal error' of the dry run."""
    message = refused(tmp_path, "on: push\njobs: {j: {steps: " + "[" * 50_000 + "]" * 50_000 + "}}")
    assert "nests deeper than 100 levels at line 2" in message
    # an alias counts as deep as its anchor is, where it stands
    chain = "a0: &a0 " + "[" * 60 + "]" * 60 + "\n"
    chain += "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 50))
    assert "nests deeper than 100 levels" in refused(tmp_path, chain)


def test_nesting_within_githubs_depth_still_loads(tmp_path):
    path = write(tmp_path, "on: push\nx: " + "[" * 98 + "]" * 98 + "\n" + JOB)
    nested: list = []
    for _ in range(97):
        nested = [nested]
    assert load_workflow(path)["x"] == nested  # 99 levels with the document's own mapping


def test_an_alias_bomb_is_refused_before_anything_walks_it(tmp_path):
    """Nine anchors of ten aliases each, 530 bytes standing for 10**9 values: the plan's
    env and matrix walks ran out of memory (or time) on it."""
    bomb = "x-bomb:\n  - &l0 [a,a,a,a,a,a,a,a,a,a]\n" + "".join(
        f"  - &l{i} [{','.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 9)
    )
    message = refused(tmp_path, bomb + "on: push\nenv:\n  BIG: *l8\n" + JOB)
    assert "holds more than 1,000,000 values once its aliases are read" in message
    assert "GitHub reads a workflow within 1,000,000 values" in message


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path):
    assert "alias *me inside its own anchor &me" in refused(tmp_path, "a: &me [1, *me]\n" + JOB)


def test_anchors_and_aliases_github_accepts_still_load(tmp_path):
    """GitHub reads anchors and aliases since September 2025: a shared env or steps list."""
    path = write(
        tmp_path,
        """
        on: push
        jobs:
          a:
            runs-on: x
            env: &env {MODEL: m, SIZE: "7"}
            steps: &steps
              - run: echo
          b:
            runs-on: x
            env: *env
            steps: *steps
        """,
    )
    jobs = load_workflow(path)["jobs"]
    assert (
        jobs["b"]["env"] == {"MODEL": "m", "SIZE": "7"} and jobs["b"]["steps"] == jobs["a"]["steps"]
    )


def test_a_key_named_twice_is_refused(tmp_path):
    """GitHub refuses a mapping that repeats a key; PyYAML kept the last value unseen."""
    message = refused(
        tmp_path,
        "on: push\njobs:\n  j:\n    runs-on: x\n    steps:\n      - uses: a/b@v1\n"
        "        with:\n          key: w-v1\n          path: models\n          key: w-v2\n",
    )
    assert "names the key 'key' twice in one mapping at line 10" in message
    assert "GitHub refuses" in message
    # a merge key may repeat what it merges: that is what merging is for
    merged = write(tmp_path, "base: &b {A: 1, B: 2}\nx:\n  <<: *b\n  A: 3\non: push\n" + JOB)
    assert load_workflow(merged)["x"] == {"A": 3, "B": 2}


@pytest.mark.parametrize(
    ("keys", "named"),
    [
        ("{CUDA: 12, cuda: 11}", "cuda"),  # TemplateReader's keys: OrdinalIgnoreCase
        ("{0x10: a, 16: b}", "16"),  # a number key is its G15 text
        ("{1.0: a, 1: b}", "1"),
        ("{'1000': a, 1e3: b}", "1000"),
        ("{true: a, TRUE: b}", "true"),
        ("{~: a, '': b}", ""),
    ],
)
def test_a_key_named_twice_as_github_names_keys_is_refused(tmp_path, keys, named):
    """GitHub compares a mapping's keys as text, case-blind: ``env: {CUDA: 12, cuda: 11}``
    fails the run ("'cuda' is already defined"); the plan kept both, or (``0x10`` and ``16``,
    both 16 to PyYAML) the last one unseen."""
    message = refused(tmp_path, f"on: push\nenv: {keys}\n{JOB}")
    assert f"names the key '{named}' twice in one mapping at line 2" in message


def test_an_escape_of_a_surrogate_is_refused_as_github_refuses_it(tmp_path):
    """PyYAML reads "\\ud800" as a string no UTF-8 can hold (printing the plan that quotes it
    was an internal error); GitHub's reader refuses any surrogate escape, a pair too."""
    for escaped in ("a\\ud800/*", "\\ud83d\\ude00", "\\U0000dfff"):
        message = refused(tmp_path, f'on: push\n{JOB}x: "{escaped}"\n')
        assert "holds an escape of a surrogate" in message and "at line 7" in message
    path = write(tmp_path, 'on: push\nx: "\\U0001F600 \\u00e9"\n' + JOB)
    assert load_workflow(path)["x"] == "\U0001f600 \u00e9"


def test_an_integer_python_cannot_read_is_refused_in_one_line(tmp_path):
    """An integer of 5,000 digits was a ValueError (Python reads at most 4,300), an internal
    error of the dry run; a !!int or !!float that is no number (an empty one too) was a
    ValueError or an IndexError, where it is no YAML."""
    message = refused(tmp_path, f"on: push\n{JOB}x: {'9' * 5_000}\n")
    assert "holds an integer of 5,000 digits" in message and "at line 7" in message
    assert "quote it" in message
    for bad in ("!!int abc", '!!int ""', "!!int 0x", "!!float abc", '!!float ""', "!!int -_"):
        message = refused(tmp_path, f"on: push\n{JOB}x: {bad}\n")
        assert "a value GitHub refuses for that tag at line 7" in message
    path = write(tmp_path, f"on: push\nx: [{'9' * 100}, !!int 0x1f, !!float 1.5]\n" + JOB)
    assert load_workflow(path)["x"] == [int("9" * 100), 31, 1.5]


def test_minus_zero_is_text_as_githubs_double_makes_it(tmp_path):
    """GitHub reads ``-0`` as a double (MatchInteger: Double.TryParse), -0, whose text (G15,
    .NET 8) is ``-0``: ``env: {SHIFT: -0}`` sets SHIFT=-0, where the plan's integer said 0."""
    from gpuci.dryrun._values import text_of

    path = write(tmp_path, "on: push\nx: [-0, -000, !!int -0, 0, +0, -0.0]\n" + JOB)
    assert [text_of(v) for v in load_workflow(path)["x"]] == ["-0", "-0", "-0", "0", "0", "-0"]


@pytest.mark.parametrize(
    "bad",
    [
        *("!!int 0x1_f", "!!int 1:2", "!!int 1_000", "!!int +-5", "!!int -0x1", "!!int '0x1f'"),
        *("!!float '1.5'", "!!float 1_0.5", "!!bool yes", '!!bool "true"', "!!null foo"),
    ],
)
def test_a_tagged_value_reads_only_what_githubs_reader_reads(tmp_path, bad):
    """GitHub reads a ``!!int`` (``!!float``, ``!!bool``, ``!!null``) only unquoted and as it
    reads an untagged one (``MatchInteger``: digits with one sign, ``0x``, ``0o``), and refuses
    the rest; PyYAML read ``0x1_f`` as 31, ``1:2`` as 62 and ``yes`` as true, and ``+-5`` was a
    ValueError, an internal error of the dry run."""
    message = refused(tmp_path, f"on: push\n{JOB}x: {bad}\n")
    assert "a value GitHub refuses for that tag at line 7" in message
    assert "drop the tag, or write !!str to keep it as text" in message


@pytest.mark.parametrize(
    "bad", ["!!binary aGk=", "!!timestamp 2001-12-14", "!foo bar", "! 12", "! 'x'", "!<!> y"]
)
def test_a_value_of_a_tag_github_does_not_read_is_refused(tmp_path, bad):
    """GitHub's reader refuses a scalar's tag outside the core schema ('Unexpected tag'), the
    non-specific ``!`` too; PyYAML made bytes of ``!!binary``, a datetime of ``!!timestamp``
    and the number 12 of ``! 12``."""
    message = refused(tmp_path, f"on: push\n{JOB}x: {bad}\n")
    tag = "!" if bad.startswith(("! ", "!<!>")) else bad.split()[0]
    assert f"tags a value {tag}, a tag GitHub does not read at line 7" in message


def test_a_tag_on_a_mapping_or_list_is_read_as_none(tmp_path):
    """GitHub's reader ignores a mapping's or list's tag; PyYAML made a set of ``!!set`` and
    tuples of ``!!omap``, and refused ``!foo {}`` as no YAML."""
    path = write(tmp_path, "on: push\nx: [!!set {a, b}, !!omap [a: 1], !foo {c: 2}]\n" + JOB)
    assert load_workflow(path)["x"] == [{"a": None, "b": None}, [{"a": 1}], {"c": 2}]


@pytest.mark.parametrize("value", ["0x1FFFFFFFF", "0x100000000", "0o40000000000"])
def test_a_hex_or_octal_integer_past_32_bits_is_refused(tmp_path, value):
    """GitHub's reader takes ``0x``/``0o`` digits as an Int32 (Int32.TryParse, hex;
    Convert.ToInt32, base 8) and refuses a value past 32 bits; PyYAML read any size."""
    message = refused(tmp_path, f"on: push\nenv:\n  V: {value}\n" + JOB)
    assert f"holds the integer {value}, past 32 bits at line 3" in message
    assert "write it in decimal, or quote it" in message


@pytest.mark.parametrize(
    ("value", "read"),
    [
        ("0x7FFFFFFF", 2**31 - 1),
        ("0x80000000", -(2**31)),
        ("0xFFFFFFFF", -1),
        ("0x000000000ff", 255),
        ("0o37777777777", -1),
        ("0o17", 15),
    ],
)
def test_a_hex_or_octal_integer_is_the_int32_githubs_reader_makes(tmp_path, value, read):
    """.NET reads 32 hex or octal bits as an Int32's two's complement: 0xFFFFFFFF is -1 in
    the run (PyYAML: 4294967295); leading zeros do not count."""
    path = write(tmp_path, f"on: push\nenv:\n  V: {value}\n" + JOB)
    assert load_workflow(path)["env"]["V"] == read


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("on: push\njobs: {j: {steps: " + "[" * 50_000 + "]" * 50_000 + "}}\n", "nests deeper"),
        ("on: push\n" + JOB + "    runs-on: y\n", "names the key 'runs-on' twice"),
        (
            "on: push\n" + JOB + "      - run: \"echo ${{ hashFiles('a\\ud800/*') }}\"\n",
            "holds an escape of a surrogate",
        ),
        ("on: push\n" + JOB + "env: {N: " + "9" * 5_000 + "}\n", "holds an integer of 5,000"),
        ("on: push\n" + JOB + "env: {N: 1e400}\n", "holds the number 1e400, past a double's"),
        ("on: push\n" + JOB + "env: {N: 0x1FFFFFFFF}\n", "holds the integer 0x1FFFFFFFF, past"),
        (
            "on: push\n" + JOB + "        if: ${{ github.event_name == 'push'\n",
            "holds an expression that is not closed (a ${{ with no }} after it; a }} inside a "
            "'...' string does not close one) at line 7 (fix: close it with }}",
        ),
    ],
    ids=[
        "deep",
        "duplicate-key",
        "surrogate-escape",
        "long-integer",
        "float-past-range",
        "hex",
        "unclosed-if",
    ],
)
def test_dry_run_says_it_in_one_bad_input_line(tmp_path, body, reason):
    wf = write(tmp_path, body, f"{WORKFLOWS}/wf.yml")
    proc = dry_run(tmp_path, wf, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if line.strip()]
    assert line.startswith("dry-run: bad input: workflow ") and reason in line
    assert "internal error" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "value",
    ["2001-02-30", "2001-12-14t21:59:43.10+99:00", "2001-12-14 21:59:43.10 -5", "2001-12-14"],
)
def test_a_date_is_the_text_github_reads_not_a_python_datetime(tmp_path, value):
    """GitHub's reader has no timestamp: ``2001-02-30`` is that text. PyYAML made a datetime
    of each (printed otherwise: ``21:59:43.100000-05:00``) and raised ValueError for a day no
    month has or an offset past a day, an internal error of the dry run."""
    path = write(tmp_path, f"on: push\nenv:\n  D: {value}\n" + JOB)
    assert load_workflow(path)["env"]["D"] == value
    wf = write(tmp_path, f"on: push\nenv:\n  D: {value}\n" + JOB, f"{WORKFLOWS}/wf.yml")
    proc = dry_run(tmp_path, wf, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("yes", "yes"),  # YAML 1.1 (PyYAML): True, printed "true"
        ("off", "off"),
        ("Y", "Y"),
        ("12:30", "12:30"),  # YAML 1.1: 750, sexagesimal
        ("0755", 755),  # YAML 1.1: 493, octal
        ("1_000", "1_000"),  # YAML 1.1: 1000
        ("0b101", "0b101"),
        ("=", "="),  # YAML 1.1: a value tag PyYAML has no constructor for (no YAML)
        ("1e3", 1000.0),  # YAML 1.1: text, its floats need a dot
        ("0o17", 15),
        ("0x1F", 31),
        ("True", True),
        ("-.inf", float("-inf")),
        ("~", None),
    ],
)
def test_a_plain_scalar_is_what_githubs_reader_makes_of_it(tmp_path, written, read):
    """GitHub reads plain scalars by the YAML 1.2 core schema (YamlObjectReader): ``env: {CI:
    yes}`` is the text ``yes`` in the run, where PyYAML's YAML 1.1 made it true, and ``MODE:
    0755`` is 755, not 493: the plan printed and compared values the run never has."""
    path = write(tmp_path, f"on: push\nenv:\n  V: {written}\n" + JOB)
    found = load_workflow(path)["env"]["V"]
    assert found == read and type(found) is type(read), found


@pytest.mark.parametrize("value", ["1e400", "-1.5E+309", "!!float 1e400"])
def test_a_float_past_a_doubles_range_is_refused(tmp_path, value):
    """GitHub's reader refuses ``1e400`` (MatchFloat: exceeds range); PyYAML read infinity,
    so the plan compared and printed a value the run never has."""
    message = refused(tmp_path, f"on: push\nenv:\n  V: {value}\n" + JOB)
    assert "past a double's range at line 3" in message and "quote it" in message
    path = write(tmp_path, "on: push\nenv:\n  V: -.inf\n  W: 1e308\n" + JOB)
    assert load_workflow(path)["env"] == {"V": float("-inf"), "W": 1e308}


@pytest.mark.parametrize("steps", ["1", "-1", "1.5", "true", "{run: echo}", "''", "null"])
@pytest.mark.parametrize("skipped", [False, True])
def test_steps_that_are_no_list_fail_the_workflow_naming_the_job(tmp_path, steps, skipped):
    """``steps: 1``, in a job that runs or in one an ``if:`` skips, fails the workflow on
    GitHub; the plan read it as a job of no steps (and, before that, ``list(1)`` was a
    TypeError, an internal error of the dry run)."""
    body = "on: push\njobs:\n  a: {runs-on: x, steps: [{run: echo}]}\n"
    body += f"  b: {{runs-on: x, {'if: false, ' if skipped else ''}steps: {steps}}}\n"
    wf = write(tmp_path, body, f"{WORKFLOWS}/wf.yml")
    proc = dry_run(tmp_path, wf, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    lines = [line for line in out.splitlines() if "bad input" in line]
    assert len(lines) == 1 and "job 'b' has steps:" in lines[0] and "not a list" in lines[0], out
    assert "internal error" not in proc.stdout + proc.stderr


def test_a_called_workflow_whose_steps_are_no_list_fails_the_plan(tmp_path):
    write(
        tmp_path,
        "on: workflow_call\njobs:\n  inner: {runs-on: x, steps: 7}\n",
        f"{WORKFLOWS}/called.yml",
    )
    body = f"on: push\njobs:\n  outer:\n    uses: ./{WORKFLOWS}/called.yml\n"
    proc = dry_run(tmp_path, write(tmp_path, body, f"{WORKFLOWS}/wf.yml"), cwd=tmp_path)
    assert proc.returncode == 2 and "job 'inner' has steps: 7, not a list" in proc.stdout


@pytest.mark.parametrize(
    ("item", "shown"), [("1", "1"), ("null", "null"), ("[run: echo]", "[{'run': 'echo'}]")]
)
@pytest.mark.parametrize("skipped", [False, True])
def test_a_step_that_is_no_mapping_fails_the_workflow_naming_it(tmp_path, item, shown, skipped):
    """``steps: [{run: echo}, 1]``: GitHub's schema (``steps-item``: a run or uses mapping)
    fails the workflow; the plan skipped the item silently and planned the rest."""
    body = "on: push\njobs:\n  a: {runs-on: x, steps: [{run: echo}]}\n"
    cond = "if: false, " if skipped else ""
    body += f"  b: {{runs-on: x, {cond}steps: [{{run: echo}}, {item}]}}\n"
    wf = write(tmp_path, body, f"{WORKFLOWS}/wf.yml")
    proc = dry_run(tmp_path, wf, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if line.strip()]
    assert line.startswith(f"dry-run: bad input: workflow {wf} job 'b' step 2 is {shown}, not a ")
    assert "write the step as - run:" in line


@pytest.mark.parametrize(
    ("runs", "reason"),
    [
        ("{using: composite, steps: 1}", "has steps: 1, not a list"),
        ("{using: composite, steps: null}", "has steps: null, not a list"),
        ("{using: composite, steps: {run: echo}}", "has steps: {'run': 'echo'}, not a list"),
        ("{using: Composite, steps: [{run: echo, shell: bash}, 7]}", "step 2 is 7, not a mapping"),
        ("{using: composite}", "has no runs.steps"),
    ],
)
def test_a_composite_action_whose_steps_are_no_list_fails_the_plan_naming_it(
    tmp_path, runs, reason
):
    """The runner fails the job at 'Set up job' loading such an action.yml (steps: a sequence
    of mappings, required); the plan read it as an action of no steps."""
    action = write(tmp_path, f"name: act\nruns: {runs}\n", "act/action.yml")
    body = "on: push\njobs:\n  j: {runs-on: x, steps: [{uses: actions/checkout@v4}, {uses: ./act}]}"
    proc = dry_run(tmp_path, write(tmp_path, body, f"{WORKFLOWS}/wf.yml"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if line.strip()]
    assert line.startswith(f"dry-run: bad input: composite action {action} {reason}"), line


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[1]\n", "no mapping at its root ([1])"),
        ("", "no mapping at its root (null)"),
        ("name: act\n", "runs: null"),
        ("runs: [1]\n", "runs: [1]"),
        ("runs: {using: node99, main: a.js}\n", "using: node99"),
        ("runs: {using: !!int 7}\n", "using: 7"),
    ],
)
def test_an_action_the_runner_cannot_load_fails_the_plan_naming_it(tmp_path, text, reason):
    """The runner fails the job loading an action.yml that is no mapping, has no runs mapping
    or a using it does not run (ActionManifestManager: 'Failed to load', 'using: node99 is not
    supported'); the plan said 'no action.yml in the workspace' or 'local node99 action'."""
    action = write(tmp_path, text, "act/action.yml")
    body = "on: push\njobs:\n  j: {runs-on: x, steps: [{uses: actions/checkout@v4}, {uses: ./act}]}"
    proc = dry_run(tmp_path, write(tmp_path, body, f"{WORKFLOWS}/wf.yml"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if line.strip()]
    assert line.startswith(f"dry-run: bad input: action {action} has {reason}, not an action"), line
    assert "(fix: " in line


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("on: push\n" + JOB + "        if: ${{ success()\n", 7),
        ("on: push\nenv:\n  A: \"${{ format('}}') \"\n" + JOB, 3),  # its }} is in a string
        ("on: push\nenv:\n  B: |\n    ok ${{ env.A }}\n    ${{ env.A\n" + JOB, 3),
        ("on: push\nenv:\n  ${{ x: 1\n" + JOB, 3),  # a key is read as a value is
    ],
)
def test_an_expression_that_is_not_closed_fails_the_file(tmp_path, text, line):
    """GitHub refuses a file with a ${{ and no }} after it outside a string ("The expression is
    not closed"): the plan read such a value as text, and an if: of it as "conditional"."""
    assert "that is not closed (a ${{ with no }} after it" in (got := refused(tmp_path, text))
    assert f" at line {line} (fix: " in got


def test_closed_expressions_still_load(tmp_path):
    body = "on: push\nenv:\n  A: ${{ format('}}') }}\n  B: \"${{ '${{' }}\"\n  C: '{{ }}'\n"
    assert read_yaml(write(tmp_path, body + JOB), "workflow")["env"]["B"] == "${{ '${{' }}"


def test_a_composite_action_with_an_expression_not_closed_fails_the_plan_naming_it(tmp_path):
    """The runner loads an action.yml with the same template reader: it fails the job there."""
    runs = "runs:\n  using: composite\n  steps:\n    - run: echo ${{ inputs.x\n      shell: bash\n"
    action = write(tmp_path, "name: act\n" + runs, "act/action.yml")
    body = "on: push\njobs:\n  j: {runs-on: x, steps: [{uses: actions/checkout@v4}, {uses: ./act}]}"
    proc = dry_run(tmp_path, write(tmp_path, body, f"{WORKFLOWS}/wf.yml"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if line.strip()]
    assert line.startswith(f"dry-run: bad input: action {action} holds an expression "), line
    assert "that is not closed" in line and " at line 5 " in line, line
