"""A budget reservation: what it holds, under which budget, and which pod it was made for.

:mod:`gpuci.pods._budgets.ledger` stores them; a reservation holds only the pod it was made
for (:func:`made_for`), so one planted in the ledger names no pod it does not pay for, and
only for :data:`MAX_HOLD_S` from when it says it was written, so one planted with a distant
``until`` does not hold its owner's budget forever.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuci.errors import InputError
from gpuci.pods._budgets.records import _amount, _num
from gpuci.pods._runpod.naming import fold_owner, tag_of

#: The longest a reservation holds from its writing: the ``ttl`` plus the reap interval
#: counted past it, which is all :meth:`~gpuci.pods._budgets.ledger.Ledger.reserve` writes
#: (longer is refused, exit 2). Past it plus :data:`CLOCK_MARGIN_S` a reservation is read
#: as lapsed, whatever its ``until`` says: ``duration`` inputs go up to a century.
MAX_HOLD_S = 31 * 86400.0
#: Two runners' clocks: a reservation written (``createdEpoch``) later than this after the
#: reader's now is not gpu-ci's, and is read as lapsed.
CLOCK_MARGIN_S = 15 * 60.0


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
    created: float = 0.0  # when its writer wrote it (createdEpoch; none: lapsed)

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
            _num(item.get("createdEpoch")),
        )

    def end(self, now: float) -> float:
        """Until when it holds, read at ``now``: its ``until``, at most :data:`MAX_HOLD_S` (and
        the clocks' margin) after it was written; 0 (lapsed) when it says it was written after
        ``now`` and the margin, as none of gpu-ci's was."""
        if self.created > now + CLOCK_MARGIN_S:
            return 0.0
        return min(self.until, self.created + MAX_HOLD_S + CLOCK_MARGIN_S)

    def remaining(self, now: float) -> float:
        """USD the reserved pod may still bill from ``now``."""
        return max(0.0, self.cost_per_hr) * max(0.0, self.end(now) - now) / 3600


def check_hold(now: float, until: float) -> None:
    """Refuse (exit 2) a reservation from ``now`` to ``until`` longer than its readers take
    (:data:`MAX_HOLD_S`): it would hold less than it pays for."""
    if until - now > MAX_HOLD_S:
        days = MAX_HOLD_S / 86400
        raise InputError(
            f"ttl plus the reap interval is {(until - now) / 86400:.1f} days, over the "
            f"{days:.0f} a budget reservation holds",
            hint=f"pass a ttl of at most {days - 1:.0f}d (and a reap-interval of at most 1d), "
            "and pods start --ttl a stopped pod for more",
        )


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
