"""A budget reservation: what it holds, under which budget, and which pod it was made for.

:mod:`gpuci.pods._budgets.ledger` stores them; a reservation holds only the pod it was made
for (:func:`made_for`), so one planted in the ledger names no pod it does not pay for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuci.pods._budgets.records import _amount, _num
from gpuci.pods._runpod.naming import fold_owner, tag_of


@dataclass
class Reservation:
    key: str
    owner: str
    cost_per_hr: float
    until: float  # the pod's expiry plus one reaper interval: the most it can bill to
    run_url: str = ""
    name: str = ""  # the pod name it was made for: how a cancelled ``up`` finds its own
    budget: float | None = None  # the budget (USD) the pod was admitted under, if written
    period_s: float | None = None  # and that budget's period
    place_by: float | None = None  # no pod is created under it after this (older: unknown)

    @classmethod
    def of(cls, key: str, owner: str, item: Mapping[str, Any]) -> Reservation:
        """The reservation a ledger object at ``key`` says (decoded: :mod:`.records`)."""
        return cls(
            key,
            owner,
            _amount(item.get("costPerHr")),
            _num(item.get("untilEpoch")),
            str(item.get("runUrl") or ""),
            str(item.get("podName") or ""),
            None if item.get("budgetUsd") is None else _amount(item.get("budgetUsd")),
            None if item.get("periodS") is None else _amount(item.get("periodS")),
            None if item.get("placeByEpoch") is None else _num(item.get("placeByEpoch")),
        )

    def remaining(self, now: float) -> float:
        """USD the reserved pod may still bill from ``now``."""
        return max(0.0, self.cost_per_hr) * max(0.0, self.until - now) / 3600


@dataclass(frozen=True)
class Hold:
    """What a reservation says besides its amount: for whom and under which budget."""

    run_url: str = ""
    name: str = ""  # the pod name it is made for
    budget: float | None = None  # the budget it was admitted under: a later extension's cap
    period_s: float | None = None
    replaces: str = ""  # a pod name whose older reservations this one takes over
    place_by: float | None = None  # the writer creates no pod under it after this time


def made_for(reserved: str, pod_name: str) -> bool:
    """Whether the pod named ``pod_name`` is the one a reservation made for the pod name
    ``reserved`` holds: that name, that name with its smoke verdict appended (as the client
    finds it), or ``up``'s smoke replacement (the same tag under a new nonce, placed under
    the same reservation)."""
    if not reserved or not pod_name:
        return False
    if pod_name == reserved or pod_name.startswith(reserved + " smoke "):
        return True
    mine, theirs = tag_of({"name": reserved}), tag_of({"name": pod_name})
    if mine is None or theirs is None:
        return False
    return (fold_owner(mine.owner), mine.run_url, mine.expires_at) == (
        fold_owner(theirs.owner),
        theirs.run_url,
        theirs.expires_at,
    )
