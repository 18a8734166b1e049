"""What a prune plans to delete (:class:`Plan`) and what it then deleted (:class:`Outcome`):
the records :mod:`gpuci.cache._upkeep.prune` fills and :mod:`gpuci.cache._upkeep.prune_report`
words."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from gpuci.cache._stores.base import ObjectInfo

__all__ = ["Outcome", "Plan", "StaleRef"]


@dataclass(frozen=True)
class StaleRef:
    """A ref the plan found unused, as the listing saw it: execute deletes it only if it is
    still so (a save or a restore since then keeps it)."""

    object_key: str
    modified: float  # the ref's last save
    used: float  # its use record's last restore; 0.0 when none
    etag: str = ""  # where the store's listing gives one


@dataclass
class Plan:
    refs: list[StaleRef] = field(default_factory=list)
    older_than: float = 0.0  # a ref saved or restored this recently since the plan stays
    manifests: list[ObjectInfo] = field(default_factory=list)
    data: list[ObjectInfo] = field(default_factory=list)  # blobs and packs
    kept_young: int = 0  # unnamed manifests, blobs and packs younger than the grace period
    # Everything the grace period holds back: those young objects, plus the blobs and packs
    # only a young unnamed manifest still reaches (they go with it).
    held_manifests: list[ObjectInfo] = field(default_factory=list)
    held_data: list[ObjectInfo] = field(default_factory=list)
    # Temp files (``*.incomplete-*``) killed saves left in a file store, older than the grace.
    leftovers: list[ObjectInfo] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # refs whose names no save could write
    notes: list[str] = field(default_factory=list)  # what the plan could not look at (warnings)
    pinned: int = 0  # manifests kept by a pin (pins/<sha256>.json) whatever the refs say
    # Kept manifests this gpu-ci cannot read (warnings): no blob or pack is deleted then.
    unreadable: list[str] = field(default_factory=list)
    cut: int = 0  # MAX_PLANNED when the listing stopped there (a later prune goes on), else 0

    @property
    def bytes(self) -> int:
        return sum(o.size for o in self.manifests + self.data + self.leftovers)

    @property
    def held_bytes(self) -> int:
        return sum(o.size for o in self.held_manifests) + sum(o.size for o in self.held_data)

    def held_until(self, grace: float) -> float | None:
        """When the last held object is older than the grace period (a later prune frees all)."""
        held = self.held_manifests + self.held_data
        return max(o.modified for o in held) + grace if held else None


@dataclass
class Outcome:
    """What a prune deleted (planning: would delete), and what its re-checks just before each
    delete kept: the store may change between the listing and the deletes."""

    refs: list[str] = field(default_factory=list)  # object keys
    manifests: list[ObjectInfo] = field(default_factory=list)
    data: list[ObjectInfo] = field(default_factory=list)
    leftovers: list[ObjectInfo] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # saved, restored, pinned or reused meanwhile
    warnings: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def planned(cls, work: Plan) -> Outcome:
        """A dry run's outcome: everything the plan lists."""
        refs = [r.object_key for r in work.refs]
        return cls(refs, list(work.manifests), list(work.data), list(work.leftovers))

    @property
    def bytes(self) -> int:
        return sum(o.size for o in self.manifests + self.data + self.leftovers)

    def deleted(self, into: list[ObjectInfo], item: ObjectInfo) -> None:
        with self.lock:
            into.append(item)

    def deleted_ref(self, key: str) -> None:
        with self.lock:
            self.refs.append(key)

    def keep(self, key: str) -> None:
        with self.lock:
            self.kept.append(key)
