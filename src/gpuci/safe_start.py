"""How gpu-ci starts Python in a folder it does not trust: a job's checkout.

``python -m gpuci`` (and ``-c``) puts the current folder first on ``sys.path``; in a CI step
that is the code under test, so its ``gpuci/`` package, or a ``numpy.py`` or ``torch.py`` the
smoke imports, would run in gpu-ci's place with the step's tokens in reach. ``-P`` (and
``PYTHONSAFEPATH``) keep it off only from Python 3.11, and gpu-ci supports 3.10; ``-I`` keeps it
off on 3.10 too but also drops ``PYTHONPATH`` (how a job may hand the smoke its torch) and every
other ``PYTHON*`` setting. So gpu-ci is started with ``-c`` code that first drops the current
folder from ``sys.path``: ``''`` and every entry naming it (an empty ``PYTHONPATH`` entry, or
``.``, is the current folder too), then imports gpu-ci. The generated actions' steps, the GitLab
templates and the all-reduce child all start so.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

DROP_CWD = (
    "import os, sys; here = os.path.realpath('.'); "
    "sys.path[:] = [p for p in sys.path if p and os.path.realpath(p) != here]"
)


def code(module: str, call: str = "main()") -> str:
    """The ``-c`` code that runs ``module``'s ``main`` (as ``call``) with the cwd off sys.path."""
    return f"{DROP_CWD}; from {module} import main; raise SystemExit({call})"


def without_cwd(paths: Iterable[str]) -> list[str]:
    """``paths`` (a ``sys.path`` handed to a child as ``PYTHONPATH``) less the current folder."""
    here = os.path.realpath(".")
    return [p for p in paths if p and os.path.realpath(p) != here]
