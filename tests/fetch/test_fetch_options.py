"""retry-fetch's min-rate as a user writes it: ``0``, ``none`` and ``off`` turn the check off.

The docs say "0 turns the check off"; ``none`` read as a size is ``None``, which once meant
"not given", so ``--min-rate none`` (an Action's ``min-rate: none``, ``GPUCI_FETCH_MIN_RATE=none``)
got the 256 KiB/s default, or an error, where the user asked for no check.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from gpuci.errors import InputError
from gpuci.fetch._policy import DEFAULT_MIN_RATE
from gpuci.fetch.options import FetchInputs
from gpuci.inputs import build, resolve, specs_of

URL = {"url": "http://h/a.bin"}


def min_rate(flags: Mapping[str, str], environ: Mapping[str, str]) -> float:
    """The policy's rate for these flags and environment, read as the CLI and Actions read them."""
    values = resolve(specs_of(FetchInputs), {**URL, **flags}, environ)
    return build(FetchInputs, values).policy(environ).min_rate


@pytest.mark.parametrize("word", ["none", "off", "0", "OFF", " None ", "0KiB", "0.0"])
def test_min_rate_words_that_turn_the_check_off(word: str):
    assert min_rate({"min-rate": word}, {}) == 0  # the flag
    assert min_rate({}, {"INPUT_MIN-RATE": word}) == 0  # an Action's input
    assert min_rate({}, {"GPUCI_FETCH_MIN_RATE": word}) == 0  # the setting


def test_min_rate_not_given_is_the_setting_else_the_default():
    assert min_rate({}, {}) == DEFAULT_MIN_RATE
    assert min_rate({}, {"GPUCI_FETCH_MIN_RATE": "2097152"}) == 2 << 20
    assert min_rate({}, {"GPUCI_FETCH_MIN_RATE": "512KiB"}) == 512 << 10
    assert min_rate({"min-rate": "1MiB"}, {"GPUCI_FETCH_MIN_RATE": "none"}) == 1 << 20
    assert min_rate({"min-rate": "none"}, {"GPUCI_FETCH_MIN_RATE": "1MiB"}) == 0


@pytest.mark.parametrize(
    ("flags", "environ", "named"),
    [
        ({"min-rate": "fast"}, {}, "input 'min-rate'"),
        ({}, {"INPUT_MIN-RATE": "-1"}, "input 'min-rate'"),
        ({}, {"GPUCI_FETCH_MIN_RATE": "never"}, "GPUCI_FETCH_MIN_RATE"),
        # under 1 B/s: a byte count rounded it to 0, which silently turned the check off
        ({"min-rate": "0.5"}, {}, "input 'min-rate'"),
        ({}, {"GPUCI_FETCH_MIN_RATE": "0.0001K"}, "GPUCI_FETCH_MIN_RATE"),
    ],
)
def test_a_bad_min_rate_is_one_line_naming_the_values_accepted(flags, environ, named):
    with pytest.raises(InputError) as caught:
        min_rate(flags, environ)
    line = caught.value.one_line()
    assert named in line and "none or off" in line and "\n" not in line, line
