"""Input resolution: flag > INPUT_<NAME> (hyphen or underscore form) > default, parsed by kind."""

import pytest

from gpuci.errors import InputError
from gpuci.inputs import Input, parse_duration, parse_list, resolve

SPECS = (
    Input("min-memory-gb", "mem", "float"),
    Input("min-gpus", "n", "int", "1", minimum=0),
    Input("require-gpu", "b", "bool", "true"),
    Input("path", "p", "lines"),
    Input("token", "t", "str", secret=True),
    Input("framework", "f", "str", "auto", choices=("auto", "torch")),
    Input("key", "k", "str", required=True),
)


def test_flag_beats_env_beats_default():
    env = {"INPUT_MIN-GPUS": "4", "INPUT_KEY": "k1"}
    assert resolve(SPECS, {"min-gpus": "2"}, env)["min-gpus"] == 2
    assert resolve(SPECS, {}, env)["min-gpus"] == 4
    assert resolve(SPECS, {}, {"INPUT_KEY": "k"})["min-gpus"] == 1


def test_hyphen_and_underscore_env_forms():
    values = resolve(SPECS, {}, {"INPUT_MIN-MEMORY-GB": "80", "INPUT_KEY": "k"})
    assert values["min-memory-gb"] == 80.0
    values = resolve(SPECS, {}, {"INPUT_MIN_MEMORY_GB": "40.5", "INPUT_KEY": "k"})
    assert values["min-memory-gb"] == 40.5


def test_empty_env_means_unset():
    # The runner passes '' for inputs the user didn't set: that must fall back to the default.
    values = resolve(SPECS, {}, {"INPUT_REQUIRE_GPU": "", "INPUT_KEY": "k"})
    assert values["require-gpu"] is True


def test_malformed_value_names_the_input_and_source():
    with pytest.raises(InputError) as info:
        resolve(SPECS, {}, {"INPUT_MIN-MEMORY-GB": "lots", "INPUT_KEY": "k"})
    assert "min-memory-gb" in info.value.message
    assert "INPUT_MIN-MEMORY-GB" in info.value.message
    assert "'lots'" in info.value.message
    assert info.value.exit_code == 2


def test_bool_minimum_and_choices():
    with pytest.raises(InputError, match="require-gpu"):
        resolve(SPECS, {"require-gpu": "maybe", "key": "k"}, {})
    with pytest.raises(InputError, match="below the minimum"):
        resolve(SPECS, {"min-gpus": "-1", "key": "k"}, {})
    with pytest.raises(InputError, match="not one of: auto, torch"):
        resolve(SPECS, {"framework": "jax", "key": "k"}, {})


def test_required_missing():
    with pytest.raises(InputError, match="'key' is required"):
        resolve(SPECS, {}, {})


def test_secret_callback_sees_value_before_parsing():
    seen = []
    resolve(SPECS, {"token": "s3cr3t-value", "key": "k"}, {}, on_secret=seen.append)
    assert seen == ["s3cr3t-value"]


def test_lists_and_durations():
    assert parse_list("a, b\n\n# comment\nc") == ["a", "b", "c"]
    values = resolve(SPECS, {"path": "models/a,b\n data/x \n", "key": "k"}, {})
    assert values["path"] == ["models/a,b", "data/x"]
    assert parse_duration("45m") == 2700
    assert parse_duration("2h") == 7200
    assert parse_duration("14d") == 14 * 86400
    assert parse_duration("90") == 90
    with pytest.raises(ValueError):
        parse_duration("soon")


def test_a_regex_input_of_more_than_a_name_needs_is_refused_uncompiled():
    """A 5 Mi-character ``gpu-name`` (a workflow's ``format()``) was compiled, for seconds, on
    every step a dry run planned; now it is one short line before any compile."""
    specs = (Input("gpu-name", "g", "regex"),)
    assert resolve(specs, {"gpu-name": "H100|H200"}, {})["gpu-name"].pattern == "H100|H200"
    with pytest.raises(InputError) as info:
        resolve(specs, {"gpu-name": "A" * 5_000_000}, {})
    assert "a pattern of 5,000,000 characters; at most 1,000" in info.value.message
    assert len(info.value.one_line()) < 400


@pytest.mark.parametrize("pattern", ["(" * 499 + ")" * 499, "a{4294967296}"])
def test_a_regex_re_cannot_compile_is_bad_input(pattern):
    """499 nested groups (under the length cap) raised RecursionError and ``a{4294967296}``
    OverflowError: an internal error with a traceback, not the input's one line."""
    with pytest.raises(InputError) as info:
        resolve((Input("gpu-name", "g", "regex"),), {"gpu-name": pattern}, {})
    assert info.value.message.startswith("input 'gpu-name' (flag --gpu-name) is ")


def test_a_whole_number_past_any_float_above_the_maximum_is_bad_input():
    """``{value:g}`` of a 400-digit int raised OverflowError while saying it was too big."""
    with pytest.raises(InputError) as info:
        resolve((Input("retries", "r", "int", maximum=10),), {"retries": "9" * 400}, {})
    assert "above the maximum 10" in info.value.message and len(info.value.one_line()) < 400


def test_checked_refuses_none_and_a_number_with_no_text_as_input():
    """None where the field's type admits none got past to crash later; an int past Python's
    4,300-digit limit raised ValueError from ``str()``, neither as InputError."""
    from dataclasses import replace

    from gpuci.cache.options import RestoreInputs
    from gpuci.inputs import checked, inp, options

    with pytest.raises(InputError, match="local-cache is None"):
        checked(replace(RestoreInputs(), local_cache=None))
    with pytest.raises(InputError, match="path is None"):
        checked(replace(RestoreInputs(), path=None))

    @options
    class Counts:
        tries: "int" = inp("How many.", default="1", maximum=5)

    with pytest.raises(InputError, match="more than 4,300 digits"):
        checked(Counts(tries=10**5000))


def test_checked_refuses_a_nul_and_a_list_of_other_things():
    """A NUL (which no flag or INPUT_* carries) in the Python API's local_cache raised
    ValueError 'embedded null byte' deep in a restore; a list field got whatever it was given."""
    from dataclasses import replace

    from gpuci.cache.options import RestoreInputs
    from gpuci.inputs import checked

    with pytest.raises(InputError, match="local-cache holds a NUL"):
        checked(replace(RestoreInputs(), local_cache="/tmp/a\0b"))
    with pytest.raises(InputError, match="include holds a NUL"):
        checked(replace(RestoreInputs(), include=["a\0"]))
    with pytest.raises(InputError, match="include is not a list of strings"):
        checked(replace(RestoreInputs(), include=[1]))
    assert checked(replace(RestoreInputs(), include=["*.json"])).include == ["*.json"]


def test_a_number_of_thousands_of_digits_is_said_in_a_short_line():
    """Below the minimum, a 4,000-digit int was quoted whole; a version part past Python's
    4,300-digit limit said Python's own advice (sys.set_int_max_str_digits) as the fix."""
    specs = (Input("tries", "n", "int", minimum=0), Input("cuda", "c", "version"))
    with pytest.raises(InputError, match="below the minimum 0") as info:
        resolve(specs, {"tries": "-" + "9" * 4000}, {})
    assert len(info.value.one_line()) < 400
    with pytest.raises(InputError, match="expected a version such as") as info:
        resolve(specs, {"cuda": "1." + "9" * 5000}, {})
    assert "set_int_max_str_digits" not in info.value.one_line()
