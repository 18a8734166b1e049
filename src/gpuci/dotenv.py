"""GitLab's dotenv report: the few outputs later jobs need, at most GitLab's variable limit.

GitLab refuses a dotenv report with more variables than its per-instance limit (20 on many
instances), and every gpu-ci command of a job writes into the same file. So only a documented
set of outputs is written by default (:data:`DEFAULT_OUTPUTS`: what a later job acts on: the
pod to reach or end, whether the cache hit, whether the gate passed), each as
``GPUCI_<NAME>``; ``GPUCI_DOTENV_OUTPUTS`` replaces the set (output names like ``pod-id`` or
variable names like ``CUDA_VISIBLE_DEVICES``, comma- or space-separated; ``all`` for every
one). The file is merged, not appended: a later command's value of a name replaces the earlier
one, and beyond ``GPUCI_DOTENV_LIMIT`` (default 20) variables the newest are dropped with a
warning. It is rewritten atomically (:func:`gpuci.files.atomic_write_bytes`), so a job never
ships half a report; any step of the job may have written it, so it is read bounded.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path

from gpuci import files, settings, untrusted_json
from gpuci.errors import InputError

DEFAULT_LIMIT = int(settings.DOTENV_LIMIT.default)
MAX_BYTES = 1 << 20  # GitLab takes 5 KB of dotenv by default (self-managed may raise it)
DEFAULT_OUTPUTS = (
    "pod-id",
    "pod-ids",
    "url",
    "cost-per-hr",
    "expires-at",
    "total-usd",
    "cache-hit",
    "matched-key",
    "passed",
    "failed-rules",
    "failed-checks",
    "skipped-checks",
    "digest",
    "gpu-count",
    "gpu-names",
)


def variable_name(output: str) -> str:
    """``pod-id`` -> ``GPUCI_POD_ID``."""
    return "GPUCI_" + re.sub(r"[^A-Za-z0-9]", "_", output).upper()


def wanted(environ: Mapping[str, str]) -> set[str] | None:
    """The variable names to write; None means every one."""
    listed = re.split(r"[\s,]+", settings.DOTENV_OUTPUTS.value(environ))
    names = [n for n in listed if n] or list(DEFAULT_OUTPUTS)
    if "all" in names:
        return None
    return {n if n.isupper() else variable_name(n) for n in names}


def limit(environ: Mapping[str, str]) -> int:
    try:
        return max(1, int(settings.DOTENV_LIMIT.value(environ)))
    except ValueError:
        return DEFAULT_LIMIT


def _read(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    hint = "delete it, or set GPUCI_DOTENV to a new file"
    text = untrusted_json.read_input(path, "the dotenv report", hint, MAX_BYTES)
    pairs: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key:
            pairs[key] = value
    return pairs


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


def write(
    environ: Mapping[str, str],
    pairs: Mapping[str, str],
    warn: Callable[[str], None],
) -> None:
    """Merge ``pairs`` (variable name -> value) into the report, keeping the wanted ones."""
    keep = wanted(environ)
    chosen = {k: v for k, v in pairs.items() if keep is None or k in keep}
    if not chosen:
        return
    for key in chosen:
        if not _NAME.fullmatch(key):  # a name with '=' or a newline would forge other variables
            raise InputError(
                f"refusing to write the variable name {key[:80]!r} to the dotenv report",
                hint="names are letters, digits, '_', '-' and '.'",
            )
    path = Path(settings.DOTENV.value(environ))
    merged = _read(path)
    for key, value in chosen.items():
        # One line per variable: GitLab's dotenv has no multi-line values.
        merged[key] = ",".join(str(value).splitlines())
    cap = limit(environ)
    if len(merged) > cap:
        dropped = list(merged)[cap:]
        merged = dict(list(merged.items())[:cap])
        warn(
            f"dotenv report {path} is full ({cap} variables, GPUCI_DOTENV_LIMIT); not written: "
            f"{', '.join(dropped)}. List fewer names in GPUCI_DOTENV_OUTPUTS"
        )
    files.atomic_write_bytes(path, "".join(f"{k}={v}\n" for k, v in merged.items()).encode())
