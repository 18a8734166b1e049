"""Matrix legs as GitHub Actions expands them (the examples of GitHub's own documentation)."""

from gpuci.dryrun import _matrix as matrix


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
