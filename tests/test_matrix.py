"""Matrix legs as GitHub Actions expands them (the examples of GitHub's own documentation)."""

from types import SimpleNamespace

import pytest

from gpuci.dryrun import _matrix as matrix
from gpuci.errors import InputError


def test_include_adds_keys_to_fitting_legs_and_new_legs_for_the_rest():
    legs = matrix.expand(
        {
            "fruit": ["apple", "pear"],
            "animal": ["cat", "dog"],
            "include": [
                {"color": "green"},
                {"color": "pink", "animal": "cat"},
                {"fruit": "apple", "shape": "circle"},
                {"fruit": "banana"},
                {"fruit": "banana", "animal": "cat"},
            ],
        }
    )
    assert legs == [
        {"fruit": "apple", "animal": "cat", "color": "pink", "shape": "circle"},
        {"fruit": "apple", "animal": "dog", "color": "green", "shape": "circle"},
        {"fruit": "pear", "animal": "cat", "color": "pink"},
        {"fruit": "pear", "animal": "dog", "color": "green"},
        {"fruit": "banana"},
        {"fruit": "banana", "animal": "cat"},
    ]


def test_exclude_removes_every_leg_matching_all_its_keys():
    legs = matrix.expand(
        {
            "os": ["macos-latest", "windows-latest"],
            "version": [12, 14, 16],
            "environment": ["staging", "production"],
            "exclude": [
                {"os": "macos-latest", "version": 12, "environment": "production"},
                {"os": "windows-latest", "version": 16},
            ],
        }
    )
    assert legs is not None and len(legs) == 9
    assert {"os": "windows-latest", "version": 16, "environment": "staging"} not in legs


def test_only_include_and_no_matrix():
    assert matrix.expand({"include": [{"mem": 40}, {"mem": 200}]}) == [{"mem": 40}, {"mem": 200}]
    assert matrix.expand(None) == [{}]


def test_a_matrix_built_at_run_time_is_not_expanded():
    assert matrix.expand("${{ fromJSON(needs.plan.outputs.matrix) }}") is None
    assert matrix.expand({"mem": "${{ fromJSON(inputs.mems) }}"}) is None


def test_substitute_replaces_only_whole_matrix_references():
    leg = {"mem": 200, "gpu": "h200"}
    assert matrix.substitute("${{ matrix.mem }}", leg) == "200"
    assert matrix.substitute("x-${{matrix.gpu}}-${{ matrix.nope }}", leg) == (
        "x-h200-${{ matrix.nope }}"
    )
    assert matrix.substitute("${{ matrix.mem || 40 }}", leg) == "${{ matrix.mem || 40 }}"
    assert matrix.label(leg) == "mem=200, gpu=h200"


def test_a_leg_with_an_empty_value_is_named_by_the_others_and_renders_empty():
    """axolotl's ``axolotl_extras:`` with no value: not ``axolotl_extras=None`` anywhere."""
    leg = {"cuda": 128, "axolotl_extras": None, "pytorch": "2.9.1"}
    assert matrix.label(leg) == "cuda=128, pytorch=2.9.1"
    assert matrix.substitute("x${{ matrix.axolotl_extras }}y", leg) == "xy"


def test_legs_are_named_by_the_fewest_keys_that_tell_them_apart():
    legs = [
        {"name": "CUDA 2.7", "runs-on": "gpu", "gpu-arch-type": "cuda"},
        {"name": "CPU 2.7", "runs-on": "cpu", "gpu-arch-type": "cpu"},
    ]
    assert matrix.naming_keys(legs) == ["name"]
    e2e = [
        {"cuda": 128, "version": "12.8.1", "pytorch": "2.8.0", "extras": "fbgemm-gpu"},
        {"cuda": 128, "version": "12.8.1", "pytorch": "2.9.1", "extras": None},
        {"cuda": 130, "version": "13.0.0", "pytorch": "2.9.1", "extras": None},
    ]
    assert matrix.naming_keys(e2e) == ["cuda", "pytorch"]
    assert matrix.label(e2e[1], matrix.naming_keys(e2e)) == "cuda=128, pytorch=2.9.1"
    assert matrix.naming_keys([{"a": 1, "b": 2}]) == ["a", "b"]  # one leg: all it has


def test_an_object_value_is_named_as_short_json_not_a_python_dict():
    leg = {"config": {"name": "Fast PyTorch Pipeline CPU tests", "runner": "aws-general-8-plus"}}
    assert matrix.label(leg) == 'config={"name":"Fast PyTorch Pipeline CPU te...'


def _axes(*lengths: int) -> dict:
    return {f"a{i}": list(range(n)) for i, n in enumerate(lengths)}


def test_a_matrix_over_256_legs_is_refused_from_its_size_before_a_leg_is_built(monkeypatch):
    """GitHub: "a job matrix can generate a maximum of 256 jobs per workflow run". Eight axes
    of ten values (a 478-byte workflow) were 10^8 legs built: a MemoryError, "internal error"."""

    def no_product(*axes):
        raise AssertionError("a leg was built")

    monkeypatch.setattr(matrix, "itertools", SimpleNamespace(product=no_product))
    with pytest.raises(InputError) as caught:
        matrix.expand(_axes(*[10] * 8))
    assert caught.value.one_line() == (
        "strategy.matrix makes 100,000,000 legs (10 x 10 x 10 x 10 x 10 x 10 x 10 x 10 values): "
        "GitHub runs at most 256 legs per matrix ('Strategy expansion exceeded 256 results') "
        "(fix: cut its axes, or split the job)"
    )


def test_the_256_leg_limit_counts_the_legs_after_exclude_and_include():
    """GitHub counts the legs it makes: exclude may bring a product under the limit, include
    entries that fit no leg may push it over."""
    with pytest.raises(InputError, match=r"makes 289 legs \(17 x 17 values\)"):
        matrix.expand(_axes(17, 17))
    under = matrix.expand({**_axes(20, 15), "exclude": [{"a0": 0}, {"a0": 1}, {"a0": 2}]})
    assert under is not None and len(under) == 255
    over = {**_axes(20, 15), "exclude": [{"a0": 0}, {"a0": 1}]}
    with pytest.raises(InputError, match="more than 256 legs after its exclude entries"):
        matrix.expand(over)
    exact = matrix.expand({**_axes(16, 16), "include": [{"a0": 0, "extra": 1}]})
    assert exact is not None and len(exact) == 256 and exact[0]["extra"] == 1  # fits: no new leg
    with pytest.raises(InputError, match="more than 256 legs with its include entries"):
        matrix.expand({**_axes(16, 16), "include": [{"a0": 99}]})


def test_a_matrix_too_large_to_weigh_is_refused(monkeypatch):
    """Combinations times exclude entries (legs times include entries) are compared: past
    MAX_CHECKS (about a second's work; lowered here) the matrix is refused, not walked."""
    monkeypatch.setattr(matrix, "MAX_CHECKS", 100)
    with pytest.raises(InputError, match=r"100 combinations to weigh against 2 exclude entries"):
        matrix.expand({**_axes(10, 10), "exclude": [{"a0": 0}, {"a0": 1}]})
    with pytest.raises(InputError, match=r"50 legs to weigh against 3 include entries"):
        matrix.expand({**_axes(10, 5), "include": [{"x": 1}, {"x": 2}, {"x": 3}]})
    assert matrix.expand({**_axes(10, 10), "exclude": [{"a0": 0}]}) is not None  # 100 checks


def test_include_and_exclude_entries_match_as_expressions_compare():
    """actions/runner's MatrixBuilder turns each leaf of an entry into ``matrix[...] == value``:
    strings case-blind, numbers coerced, null equal to '', keys case-blind, and a nested
    mapping matched in part. Before, Python's ``==`` kept every leg below."""
    cased = matrix.expand(
        {"os": ["Ubuntu-Latest", "windows"], "exclude": [{"os": "ubuntu-latest"}]}
    )
    assert cased == [{"os": "windows"}]
    # ChristopherHX/runner.server#95: 'a' by 'A', '' and null by null
    empty = matrix.expand({"a": ["a", "b", "", None], "exclude": [{"A": "A"}, {"A": None}]})
    assert empty == [{"a": "b"}]
    nested = {"cfg": [{"py": 3, "cuda": 12}, {"py": 3, "cuda": 11}]}
    assert matrix.expand({**nested, "exclude": [{"cfg": {"cuda": 11}}]}) == [
        {"cfg": {"py": 3, "cuda": 12}}
    ]
    # an include entry fits the leg its axis value equals, and leaves that value as it was
    assert matrix.expand(
        {"os": ["linux"], "py": ["3.10"], "include": [{"OS": "Linux", "gpu": "a"}]}
    ) == [{"os": "linux", "py": "3.10", "gpu": "a"}]
    assert matrix.expand({"py": ["3.10"], "include": [{"py": 3.1, "tag": "x"}]}) == [
        {"py": "3.10", "tag": "x"}
    ]


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (
            {"os": ["a"], "exclude": [{"build": False}]},
            "Matrix exclude key 'build' does not match any key within the matrix",
        ),
        ({"os": ["a"], "exclude": [{}]}, "Matrix exclude filter must not be empty"),
        ({"os": ["a"], "include": [{}]}, "Matrix include mapping does not contain any values"),
    ],
    ids=["exclude-key", "empty-exclude", "empty-include"],
)
def test_an_entry_githubs_matrix_builder_refuses_is_bad_input(body, said):
    """actions/runner#2111: an exclude key that is no axis is refused (include entries are
    added after exclude, so an exclude cannot name their keys); so is an empty entry. Before,
    the plan expanded such a matrix as if the entry were not there."""
    with pytest.raises(matrix.BadMatrix) as caught:
        matrix.expand(body)
    assert f'("{said}")' in caught.value.message, caught.value.message


def test_an_entry_nesting_a_large_value_is_weighed_by_its_values():
    """An exclude entry whose one key holds 100,000 values (an alias makes that cheap to write)
    is compared leaf by leaf with each leg, as GitHub's filter does: counted as 100,000
    comparisons a leg, so 256 legs are refused, not walked for minutes."""
    big = {"cfg": [None] * 100_000}
    with pytest.raises(InputError, match=r"256 combinations to weigh against 1 exclude entries"):
        matrix.expand({**_axes(16, 16), "cfg": [{}], "exclude": [big]})
    assert matrix.expand({"os": ["a", "b"], "exclude": [{"os": ["x"] * 3}]}) == [
        {"os": "a"},
        {"os": "b"},
    ]


def test_each_key_an_entry_scans_in_a_legs_mapping_is_charged_to_the_plan(monkeypatch):
    """An exclude entry looks into a leg's value key by key (keys are case-blind): 200 entries
    into a mapping of 5,000 keys is a million keys compared, charged as an expression's lookup
    is, and past the plan's budget the matrix is left to the run (before: nothing counted)."""
    from gpuci.dryrun._bounds import KEY_COST, Budget
    from gpuci.dryrun._expressions import ExpressionError

    big = {f"k{i}": i for i in range(5_000)}
    value = {"big": [big], "exclude": [{"big": {"zzz": f"z{i}"}} for i in range(200)]}
    budget = Budget()
    with budget.active():
        assert matrix.expand(value) == [{"big": big}]
    assert budget.limit - budget.left >= 200 * 5_000 * KEY_COST
    monkeypatch.setattr("gpuci.dryrun._bounds.MAX_EVALUATED", 50 * 5_000 * KEY_COST)
    budget = Budget()
    with budget.active(), pytest.raises(ExpressionError, match="scanned over"):
        matrix.expand(value)
    assert budget.spent


def test_each_string_an_entry_compares_is_charged_to_the_plan():
    """A leaf compared case-blind folds both strings: 100 exclude entries against a leg's
    100,000-character value read 20 million characters, counted as an expression's == is
    (before: nothing counted, and aliases repeat such a value at no cost in the file)."""
    from gpuci.dryrun._bounds import Budget

    long = "x" * 100_000
    value = {"s": [long], "exclude": [{"s": f"y{i}{long}"} for i in range(100)]}
    budget = Budget()
    with budget.active():
        assert matrix.expand(value) == [{"s": long}]
    assert budget.limit - budget.left >= 100 * 2 * len(long)
