"""What a user gives the plan that only a run would have: ``vars`` and which secrets exist.

``--var NAME=VALUE`` (repeatable) and ``--vars-file`` (YAML, JSON or dotenv) fill ``vars``;
``--secret NAME`` says a secret exists, never what it is: its value is never asked for, read or
printed, and it evaluates as an opaque, non-empty value (``secrets.X != ''`` holds, its text
stays unknown). Once any is given, a name not given is empty, as in act and in GitHub for an
unset variable or secret; with none given, ``vars``/``secrets`` stay unknown throughout.

``--event-payload`` is the event as act's ``-e`` takes it: that JSON *is* ``github.event``
(:func:`gpuci.dryrun._contexts.event_context`), and what it lacks is null.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gpuci import settings, untrusted_json
from gpuci.dryrun._expressions import Partial, Unknown, opaque
from gpuci.dryrun._values import text_of
from gpuci.dryrun._workflow import MAX_FILE_BYTES
from gpuci.errors import InputError
from gpuci.untrusted_yaml import fold

__all__ = ["ALWAYS_SECRETS", "load_payload", "secrets_context", "vars_context"]

ALWAYS_SECRETS = (settings.GITHUB_TOKEN.name,)  # the runner makes it for every job
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# the value to the line's end, its trailing white space cut by rstrip(): ``(.*?)\s*$`` tried
# that white space at every position of the value (20,000 spaces: 2 s)
_DOTENV = re.compile(r"^\s*(?:export\s+)?(?P<name>[^=\s]+)\s*=\s*(?P<value>.*)$")


def _check_name(name: str, what: str, fix: str) -> str:
    if not _NAME.match(name):
        shown = name if len(name) <= 60 else name[:60] + "..."
        raise InputError(
            f"{what} name {shown!r} is not a valid name (letters, digits and _, not first a digit)",
            hint=fix,
        )
    return name


def vars_context(pairs: list[str], file: str) -> dict[str, str] | Unknown:
    """``vars`` from ``--vars-file`` then ``--var`` (a flag beats the file); Unknown if neither.
    Names are case-blind, as GitHub's are: ``--var gpu=1`` replaces the file's ``GPU``.

    Raises InputError for a pair without ``=``, a bad name, or an unreadable file.
    """
    if not pairs and not file:
        return Unknown("vars")
    found: dict[str, str] = _read_vars_file(file) if file else {}
    named = {fold(name): name for name in found}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise InputError(
                f"--var {pair[:60]!r} has no '='", hint="pass --var NAME=VALUE, once per variable"
            )
        name = _check_name(name.strip(), "--var", "pass --var NAME=VALUE")
        found.pop(named.get(fold(name), name), None)  # as the file (or a flag) spelled it
        found[name] = value
        named[fold(name)] = name
    return found


def _read_vars_file(file: str) -> dict[str, str]:
    import yaml

    from gpuci import untrusted_yaml as _yaml

    hint = "pass a YAML or JSON mapping (NAME: VALUE) or a dotenv file (NAME=VALUE per line)"
    text = untrusted_json.read_input(Path(file), "the vars file", hint, MAX_FILE_BYTES)
    refused: _yaml.Refused | None = None
    try:
        body: Any = _yaml.load(text)  # bounded: a vars file 10,000 deep is no mapping
    except _yaml.Refused as exc:  # YAML that GitHub refuses: unless it is dotenv, say why
        body, refused = None, exc
    except yaml.YAMLError:
        body = None
    if not isinstance(body, dict):
        try:
            body = _dotenv(text, file, hint)
        except InputError:
            if refused is None:
                raise
            raise _refusal(file, refused) from None
    found = {  # variables are text: YAML may read 1 or true
        _check_name(str(k), f"vars file {file}: variable", hint): text_of(v)
        for k, v in body.items()
    }
    named: dict[str, str] = {}
    for name in found:  # a merge (<<) may bring in a name again, in another case
        if (first := named.setdefault(fold(name), name)) != name:
            raise _twice(file, name, first, "")
    return found


def _refusal(file: str, exc: Any) -> InputError:
    """The vars file's YAML refusal, in one line: a name given twice says which, and the fix."""
    from gpuci import untrusted_yaml as _yaml

    mark = exc.problem_mark
    where = f" at line {mark.line + 1}" if mark else ""
    if isinstance(exc, _yaml.DuplicateKey):
        return _twice(file, exc.key, exc.first, where)
    return InputError(f"the vars file {file} {exc.problem}{where}", hint=exc.hint)


def _twice(file: str, name: str, first: str, where: str) -> InputError:
    """A variable named again (case-blind: GitHub keeps one of a name), with the fix."""
    again = f"'{name[:60]}' again" + (f" (after '{first[:60]}')" if first != name else "")
    return InputError(
        f"the vars file {file} names the variable {again}{where}; GitHub's variable names are "
        "case-blind, so they are one variable",
        hint="keep one of them (a --var flag replaces the file's value)",
    )


def _dotenv(text: str, file: str, hint: str) -> dict[str, str]:
    found: dict[str, str] = {}
    named: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _DOTENV.match(line)
        if match is None:
            raise InputError(f"the vars file {file}: line {number} is not NAME=VALUE", hint=hint)
        value = match.group("value").rstrip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        name = match.group("name")
        if (first := named.setdefault(fold(name), name)) in found:
            raise _twice(file, name, first, f" at line {number}")
        found[name] = value
    return found


def secrets_context(names: list[str]) -> dict[str, Any]:
    """``secrets``: each named one exists (opaque), any other is empty; with none named, only
    ``GITHUB_TOKEN`` is known to exist (the runner makes it) and any other is unknown.

    Raises InputError for ``NAME=VALUE`` (a value is never taken) or a bad name.
    """
    found: dict[str, Any] = {name: opaque(f"secrets.{name}") for name in ALWAYS_SECRETS}
    if not names:
        return Partial("secrets", found)
    for raw in names:
        if "=" in raw:
            name = raw.partition("=")[0].strip()
            raise InputError(
                f"--secret {name[:60]!r} was given a value; dry-run takes only names",
                hint=f"pass --secret {name[:60]} (whether it exists is all a plan needs)",
            )
        name = _check_name(raw.strip(), "--secret", "pass --secret NAME")
        found[name] = opaque(f"secrets.{name}")
    return found


MAX_PAYLOAD_BYTES = 4 << 20  # GitHub caps webhook payloads at 25 MB; a test event is KiBs


def load_payload(path: str) -> dict[str, Any]:
    """The JSON object in ``path`` (``--event-payload``), as act's ``-e`` reads it.

    Raises InputError for a file that is missing, too large, or not a JSON object.
    """
    hint = 'pass a JSON file holding the payload, e.g. {"pull_request": {"draft": true}}'
    return untrusted_json.object_input(
        Path(path), "the event payload", hint, MAX_PAYLOAD_BYTES, finite=True
    )
