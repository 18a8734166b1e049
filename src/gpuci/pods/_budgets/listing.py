"""How the ledger lists its store: one folder at a time and never past a cap.

Every object in the store is anyone's to plant (whoever can write there), so a listing is an
input too: its prefix names one folder, ending in ``/`` (a folder of a like name, ``alice-x``
beside ``alice``, is never listed with it), and it stops at a cap, so objects planted in other
folders cost a listing nothing and objects planted in its own folder cost at most the cap.
What a listing cut short means is each caller's call (:mod:`gpuci.pods._budgets.ledger`).
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from gpuci.cache._stores.base import ObjectInfo, Store
from gpuci.pods._runpod.naming import fold_owner, tag_of

#: Objects one listing of a pod's event folder takes: a pod has a handful of events, so a
#: folder holding more was flooded; the read goes on with those listed, said in one warning
#: (refusing would let one pod's folder stop every owner's budget check).
MAX_POD_LISTED = 1_000
#: Objects one listing of every event takes (``down``'s look for its run's runners, which
#: warns and goes on): more is refused in one line, none read.
MAX_EVENTS_LISTED = 200_000
#: Objects one listing of an owner's reservation or release folder takes (each ``up`` with
#: a budget adds one of each; a scheduled ``pods reap`` deletes those past every budget period,
#: :mod:`gpuci.pods._budgets.prune`): more is refused in one line (exit 3),
#: since a cut listing could miss a live reservation and hide spend; the folder is the
#: owner's alone, so only that owner is stopped.
MAX_OWNER_LISTED = 100_000
#: Folders an older gpu-ci filed one owner's objects under in another case that one read lists.
MAX_CASE_FOLDERS = 8


def listed(store: Store, prefix: str, cap: int) -> tuple[list[ObjectInfo], bool]:
    """The first ``cap`` objects under ``prefix`` and whether there were more: the listing
    stops there (no further page is asked for, no further folder walked)."""
    found = store.list(prefix)
    try:
        out = list(itertools.islice(found, cap + 1))
    finally:
        close = getattr(found, "close", None)
        if close is not None:
            close()
    return out[:cap], len(out) > cap


def folder_of(name: str) -> str:
    """A store-safe, collision-free folder name for ``name`` as given (never ``..`` or
    ``/``): :func:`gpuci.pods._budgets.ledger.owner_key` folds the name first; an older gpu-ci
    did not."""
    readable = re.sub(r"[^A-Za-z0-9_-]+", "_", name)[:40] or "_"
    return f"{readable}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"


def case_folders(owner: str, pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """The folders an older gpu-ci (before owners were folded) filed ``owner``'s objects
    under, for each other case of the name a pod on RunPod is tagged with: the pods it made
    carry the name in the case it wrote, and their reservations are the ones still holding
    (one of a pod gone holds at most :data:`gpuci.pods._budgets.holds.MAX_HOLD_S` from its
    writing, so none left from before the folding holds for long). Each is listed as its own
    folder: never a listing of every folder of a like name."""
    names = set()
    for pod in pods:
        tag = tag_of(pod)
        if tag is not None and fold_owner(tag.owner) == fold_owner(owner):
            names.add(tag.owner)
    own = folder_of(fold_owner(owner))
    return sorted({folder_of(n) for n in names} - {own})[:MAX_CASE_FOLDERS]


def capped(keys: list[str], root: str, most: int) -> tuple[list[str], dict[str, str]]:
    """At most ``most`` of each pod folder's ``keys`` (under ``root``), its ``created``
    events first, then by time; and the folders cut short, each with why."""
    by_pod: dict[str, list[str]] = defaultdict(list)
    for key in keys:
        by_pod[key[len(root) + 1 :].partition("/")[0]].append(key)
    out, cut = [], {}
    for pid, found in by_pod.items():
        if len(found) > most:
            found = sorted(found, key=lambda k: ("-created-" not in k, k))[:most]
            why = f"{len(by_pod[pid])} event objects, over the {most} read of a pod"
            cut[f"{root}/{pid}/"] = why
        out.extend(found)
    return out, cut
