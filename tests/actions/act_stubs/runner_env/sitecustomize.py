"""Under act, make every Python started in a composite action see what GitHub's runner gives it.

act sets ``INPUT_<NAME>`` for composite actions itself; the real runner does not, so an input
an action forgot to pass through its ``env:`` works under act and is silently empty on GitHub.
This drops every ``INPUT_*`` variable the action's own action.yml does not declare, before
gpu-ci reads its environment, and logs what it dropped to ``$ACT_INPUTS_LOG`` so the test can
see the check was active. Put on ``PYTHONPATH`` by tests/actions/test_act_examples.py only.
"""

import os
import re

_action = os.environ.get("GITHUB_ACTION_PATH", "")
_spec = os.path.join(_action, "action.yml")
if _action and os.path.isfile(_spec):
    with open(_spec, encoding="utf-8") as _handle:
        _declared = set(re.findall(r"^\s+(INPUT_[A-Z0-9_]+):", _handle.read(), re.M))
    _dropped = sorted(k for k in os.environ if k.startswith("INPUT_") and k not in _declared)
    for _key in _dropped:
        del os.environ[_key]
    _log = os.environ.get("ACT_INPUTS_LOG")
    if _log and _dropped:
        with open(_log, "a", encoding="utf-8") as _handle:
            _handle.write(f"{os.path.basename(_action)}: {' '.join(_dropped)}\n")
