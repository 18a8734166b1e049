"""``CUDA_VISIBLE_DEVICES`` resolved to NVML devices, the way CUDA resolves it.

NVML sees every GPU on the host; a job sees the ones ``CUDA_VISIBLE_DEVICES`` names. Judging
the host's GPUs would fail a job for another tenant's ECC errors, and exporting their UUIDs would
widen the job onto them. So gpu-setup and gpu-smoke look only at what this module selects.

CUDA's rules, as its programming guide (environment variables) and driver behave:

- unset: every device CUDA can open;
- a comma-separated list read left to right; the first entry CUDA cannot resolve ends the list
  (it and everything after it are ignored). So ``""``, ``-1`` and ``NoDevFiles`` (what the
  NVIDIA container runtime sets when no device is given) select nothing, and ``0,7,1`` on a
  4-GPU host selects device 0 only;
- an integer is an ordinal in CUDA's order: ASCII digits only, as CUDA parses it, and at most
  9 of them (far above any device count), so a Unicode digit (``²``, a fullwidth U+FF11) or a
  longer number ends the list. ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` orders by PCI bus
  id, which is how NVML enumerates; the default ``FASTEST_FIRST`` ranks by a speed heuristic
  NVML cannot see. On a host of one model the heuristic ties and CUDA falls back to bus order,
  so we resolve ordinals in PCI bus order and warn when models are mixed and the order is not
  ``PCI_BUS_ID`` (use UUIDs, or set ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, to be exact);
- ordinals count only GPUs this process can open: a GPU NVML lists but refuses to open
  (NoPermission under Slurm's ``ConstrainDevices``) is not a CUDA device either;
- ``GPU-<uuid>``, or any prefix of it that names exactly one GPU (CUDA's documented
  abbreviation); an ambiguous or unknown prefix ends the list;
- ``MIG-<uuid>`` (R470 and later) names one MIG device; ``MIG-GPU-<uuid>/<gi>/<ci>`` (R450)
  names a GPU instance of a GPU;
- a device named twice ends the list at the repeat (never widens what we judge).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpuci import settings
from gpuci.gpu._gpu_info import GpuInfo, Snapshot
from gpuci.gpu._nvml import pci_address

ENV = settings.CUDA_VISIBLE_DEVICES.name
ORDER_ENV = settings.CUDA_DEVICE_ORDER.name
# ASCII digits only (``\d`` and str.isdigit() take any Unicode digit, which CUDA does not read)
_ORDINAL = re.compile(r"[0-9]{1,9}")
_OLD_MIG = re.compile(r"MIG-(GPU-[0-9a-fA-F-]+)/([0-9]{1,9})/([0-9]{1,9})")
# Why a list stops at a device it names twice ('0,0'): the device exists, it is a repeat.
_REPEAT = "a duplicate: it names a device an earlier entry already named"


@dataclass(frozen=True)
class Visibility:
    """Which NVML devices ``CUDA_VISIBLE_DEVICES`` selects, in CUDA's order."""

    raw: str | None  # the variable as set; None when unset
    order: str  # CUDA_DEVICE_ORDER as CUDA reads it
    selected: tuple[int, ...]  # NVML indices of the selected GPUs, in CUDA order
    mig: dict[int, tuple[str, ...]] = field(default_factory=dict)  # GPU -> MIG UUIDs named
    hidden: tuple[int, ...] = ()  # NVML indices this job does not see
    stopped_at: str | None = None  # the first entry CUDA could not resolve
    notes: tuple[str, ...] = ()

    @property
    def restricted(self) -> bool:
        return self.raw is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "cuda_visible_devices": self.raw,
            "cuda_device_order": self.order,
            "selected_nvml_indices": list(self.selected),
            "mig_uuids": {str(k): list(v) for k, v in self.mig.items()},
            "hidden_nvml_indices": list(self.hidden),
            "ignored_from": self.stopped_at,
            "notes": list(self.notes),
        }

    def describe_none(self) -> str:
        """Why nothing is visible, for a headline."""
        why = f"{ENV}={self.raw!r}"
        if self.stopped_at is not None:
            why += f" (CUDA stops at the entry {self.stopped_at!r}, which names no device here)"
        return f"{why} hides all {len(self.hidden)} GPU(s) from this job"


def cuda_order(gpus: tuple[GpuInfo, ...] | list[GpuInfo]) -> list[GpuInfo]:
    """GPUs in PCI bus order (CUDA's ``PCI_BUS_ID`` order), NVML's index where no bus id."""

    def key(g: GpuInfo) -> tuple[int, tuple[int, int, int], int]:
        address = pci_address(g.pci_bus_id)
        return (0, address, g.index) if address else (1, (0, 0, 0), g.index)

    return sorted(gpus, key=key)


def resolve(raw: str | None, order: str, gpus: tuple[GpuInfo, ...] | list[GpuInfo]) -> Visibility:
    """Resolve ``raw`` (the variable's value, None when unset) against NVML's GPUs."""
    ordered = cuda_order(gpus)
    order = (order or "FASTEST_FIRST").strip().upper()
    if raw is None:
        return Visibility(None, order, tuple(g.index for g in ordered))
    selected: list[int] = []
    mig: dict[int, list[str]] = {}
    seen: set[str] = set()
    stopped: str | None = None
    why_stopped = ""
    by_ordinal = False
    for entry in raw.split(","):
        token = entry.strip()
        found = _one(token, ordered)
        if found is None or _key(found) in seen:
            stopped = token
            why_stopped = "it names no device here" if found is None else _REPEAT
            break
        seen.add(_key(found))
        index, mig_uuid = found
        by_ordinal = by_ordinal or _ORDINAL.fullmatch(token) is not None
        if index not in selected:
            selected.append(index)
        if mig_uuid is not None:
            mig.setdefault(index, []).append(mig_uuid)
    notes = []
    if by_ordinal and order != "PCI_BUS_ID" and len({g.name for g in gpus}) > 1:
        notes.append(
            f"{ENV} names devices by index and {ORDER_ENV} is {order} on mixed GPU models: "
            "CUDA ranks them by speed, which NVML cannot see, so indices were read in PCI bus "
            f"order; set {ORDER_ENV}=PCI_BUS_ID or use GPU UUIDs to be exact"
        )
    if stopped is not None and selected:
        notes.append(
            f"{ENV}={raw!r}: CUDA ignores {stopped!r} and every entry after it ({why_stopped})"
        )
    # A GPU named whole and through a MIG UUID: the whole GPU is visible.
    whole = {i for i in selected if i not in mig}
    return Visibility(
        raw,
        order,
        tuple(selected),
        {i: tuple(u) for i, u in mig.items() if i not in whole},
        tuple(g.index for g in ordered if g.index not in selected),
        stopped,
        tuple(notes),
    )


def _key(found: tuple[int, str | None]) -> str:
    return f"{found[0]}/{found[1] or ''}"


def _one(token: str, ordered: list[GpuInfo]) -> tuple[int, str | None] | None:
    """``(NVML index, MIG UUID or None)`` for one entry, or None when CUDA would stop here."""
    if _ORDINAL.fullmatch(token):
        ordinal = int(token)
        return (ordered[ordinal].index, None) if ordinal < len(ordered) else None
    low = token.lower()
    if old := _OLD_MIG.fullmatch(token):
        gpu_uuid, gi = old.group(1).lower(), int(old.group(2))
        for g in ordered:
            if g.uuid.lower() == gpu_uuid:
                for m in g.mig_devices:
                    if m.gpu_instance_id == gi:
                        return g.index, m.uuid
        return None
    if low.startswith("mig-"):
        for g in ordered:
            for m in g.mig_devices:
                if m.uuid.lower() == low:
                    return g.index, m.uuid
        return None
    if low.startswith("gpu-") and len(low) > len("gpu-"):
        hits = [g for g in ordered if g.uuid.lower().startswith(low)]
        return (hits[0].index, None) if len(hits) == 1 else None
    return None  # "", "-1", "NoDevFiles", a bare UUID: CUDA resolves none of them


def visible_snapshot(snapshot: Snapshot, vis: Visibility) -> Snapshot:
    """``snapshot`` with only the selected GPUs, in CUDA's order, MIG devices narrowed."""
    by_index = {g.index: g for g in snapshot.gpus}
    gpus = []
    for index in vis.selected:
        gpu = by_index[index]
        if index in vis.mig:
            named = set(vis.mig[index])
            gpu = replace(gpu, mig_devices=tuple(m for m in gpu.mig_devices if m.uuid in named))
        gpus.append(gpu)
    return replace(snapshot, gpus=tuple(gpus))


def job_view(snapshot: Snapshot, environ: Mapping[str, str]) -> tuple[Snapshot, Visibility]:
    """The job's GPUs (``CUDA_VISIBLE_DEVICES`` applied) and how they were chosen."""
    vis = resolve(
        settings.CUDA_VISIBLE_DEVICES.raw(environ),
        settings.CUDA_DEVICE_ORDER.value(environ),
        snapshot.gpus,
    )
    return visible_snapshot(snapshot, vis), vis
