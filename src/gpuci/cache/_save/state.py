"""One save's shared state and what the store already has: the manifests this job knows, the
packs still present, and the local tier the saved files are copied into.

The phases of a save (:mod:`gpuci.cache._save.command`, which also publishes) each take a
:class:`Saver`: scan, hash and upload (:mod:`gpuci.cache._save.upload`), publish, report
(:mod:`gpuci.cache._save.report`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpuci import journal
from gpuci.cache import _layout as layout
from gpuci.cache._format import manifest as mf
from gpuci.cache._format import refs
from gpuci.cache._format.tree import Tree
from gpuci.cache._save import sources
from gpuci.cache._stores import tier_evict
from gpuci.cache._stores.base import ObjectInfo, SourceChanged, Store
from gpuci.cache._stores.tier import LocalTier
from gpuci.errors import InputError
from gpuci.ranged._pool import parallel
from gpuci.runtime import Runtime

if TYPE_CHECKING:
    from gpuci.background import Background


@dataclass
class SaveStats:
    data_bytes: int = 0  # blob and pack bytes sent
    meta_bytes: int = 0  # manifest and ref bytes sent
    blobs: int = 0
    packs: int = 0
    reused_files: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)


class Saver:
    def __init__(self, store: Store, namespace: str, key: str, rt: Runtime) -> None:
        self.store = store
        self.namespace = namespace
        self.key = key
        self.rt = rt
        # HEADs and other small requests: the fixed count, else 8 at a time.
        self.workers = layout.workers(rt.environ)
        # Blobs, packs and multipart parts share one controller: what it learns sending packs
        # it keeps for the blobs.
        self.uploads = layout.concurrency(rt.environ, layout.UPLOAD_CONNECTIONS)
        self.threshold = layout.multipart_threshold(rt.environ)
        self.stats = SaveStats()
        self.tier: LocalTier | None = None
        self.not_copied: list[str] = []  # saved files replaced before the tier's copy
        self.filled_up = False  # the tier's disk filled during its copies: the rest were skipped
        # Set when the save fails or is interrupted: the tier's copies end at their next chunk.
        self.stop_fill = threading.Event()

    def load_manifest(self, digest: str) -> mf.Manifest | None:
        got = self.store.get(layout.manifest_key(digest), limit=mf.MAX_MANIFEST)
        try:
            return None if got is None else refs.parse_checked(got[0], digest)
        except InputError:
            return None

    def known_small_files(
        self, current: refs.Ref | None
    ) -> tuple[dict[str, mf.Entry], mf.Manifest | None]:
        """sha256 -> a packed entry whose pack exists, from the manifests this job knows."""
        digests: list[str] = []
        if current is not None:
            digests.append(current.manifest)
        for record in journal.read("cache-restore", self.rt.environ):
            digest = str(record.get("manifest"))
            if record.get("store") == self.store.url and layout.is_sha256(digest):
                digests.append(digest)
        current_manifest = None
        known: dict[str, mf.Entry] = {}
        for digest in dict.fromkeys(digests):
            manifest = self.load_manifest(digest)
            if manifest is None:
                continue
            if current is not None and digest == current.manifest:
                current_manifest = manifest
            for entry in manifest.files:
                if entry.pack:
                    known.setdefault(entry.sha256, entry)
        present = self._present_packs(sorted({e.pack for e in known.values()}))
        return {sha: e for sha, e in known.items() if e.pack in present}, current_manifest

    def head(self, key: str, size: int | None = None) -> ObjectInfo | None:
        """The object when the store has it at ``size`` bytes, the size this save knows (any
        size when None: a reused pack's, which no manifest states); None when absent or of
        another size (a lie, or cut: sent again, never made young by copying what a HEAD
        claims). Timed for the controller: its first answers tell a far store from a
        near one (:meth:`gpuci.adaptive.Concurrency.first_byte`), so a save to a remote store
        gets every connection after a few lookups, as a restore does, instead of climbing from 8.
        """
        started = time.monotonic()
        info = self.store.head(key)
        self.uploads.first_byte(time.monotonic() - started)
        return info if info is not None and size in (None, info.size) else None

    def _present_packs(self, packs: list[str]) -> set[str]:
        def there(pack: str) -> bool:
            info = self.head(layout.pack_key(pack))
            if info is not None and not self.rt.dry_run:
                self.refresh(info)
            return info is not None

        found = parallel(there, packs, self.uploads)  # HEADs under the save's one controller
        return {pack for pack, yes in zip(packs, found, strict=True) if yes}

    def refresh(self, info: ObjectInfo) -> None:
        """Reusing an old object: make it young, so a concurrent prune's grace period keeps it."""
        if time.time() - info.modified > layout.TOUCH_AFTER:
            self.store.touch(info.key)

    def fill_tier(self, tree: Tree, files: list[mf.Entry]) -> int:
        """Copy into the runner-local tier the saved files it still lacks (reflinks where the
        disk can): those too large to hold in memory (the rest went in as they were hashed,
        :meth:`LocalTier.keep`), only where the tier's disk has room to spare for them all (it
        may be the disk the job writes next). Packed files are left to runs where the tier
        keeps them (:meth:`~gpuci.cache._stores.tier_runs.Runs.keep`): a blob each would cost
        the inode per small file that runs avoid."""
        if self.tier is None:
            return 0
        with_bytes = [e for e in files if e.size and not (e.pack and self.tier.keeps_runs)]
        held = self.tier.holds(with_bytes)
        lacking = {e.sha256: e for e, h in zip(with_bytes, held, strict=True) if not h}
        added = 0
        if self.tier.room_for(sum(e.size for e in lacking.values())):
            for entry in lacking.values():
                if self.stop_fill.is_set():
                    return added
                copied = self._copy_in(self.tier, tree, entry)
                added += copied
                if not copied and self._filled(self.tier, entry):
                    break
        tier_evict.evict(self.tier)
        return added

    def _filled(self, tier: LocalTier, entry: mf.Entry) -> bool:
        """Whether a copy that did not land met a full disk: the file is still not in the tier
        and the copy met ENOSPC or EDQUOT (a quota, which the disk's free space does not
        show), or the disk has no room for it now (another process filled it since the room
        was checked; another save that copied the file in meanwhile is no failure). The rest
        are not tried then: each would only take the disk to its last byte again."""
        if tier.has(entry.sha256, entry.size):
            return False
        if not tier.copy_met_full and tier.room_for(entry.size):
            return False
        self.filled_up = True
        return True

    def fill_tier_beside(self, tree: Tree, files: list[mf.Entry]) -> Background[int] | None:
        """:meth:`fill_tier` on a thread of its own, once every file is read and hashed: the
        copies go on while the last parts land and the manifest and ref are written (a
        failed or interrupted save ends them: :attr:`stop_fill`). None: no tier to fill."""
        if self.tier is None:
            return None
        from gpuci.background import Background

        return Background(lambda: self.fill_tier(tree, files), "gpuci-tier-fill")

    def _copy_in(self, tier: LocalTier, tree: Tree, entry: mf.Entry) -> bool:
        """One file into the tier from the very file the save read and sent (its device, inode
        and size: :func:`~gpuci.cache._save.sources.open_source`). A file swapped in under its
        name since is not copied at all: its bytes were never sent, and it may be larger than
        the room the tier made."""
        tier.copy_met_full = False  # this copy's, for _filled, even where none is tried
        try:
            with sources.source(tree, entry) as fd:
                return tier.copy_in(
                    tree.source(entry), entry.sha256, fd, self.stop_fill, entry.size
                )
        except (SourceChanged, sources.Unreadable):
            self.not_copied.append(str(tree.source(entry)))
            return False

    def tier_notes(self) -> list[str]:
        """The tier's warnings, and one for the files replaced before they could be copied in."""
        notes = self.tier.warnings() if self.tier is not None else []
        if self.not_copied:
            more = f" (and {len(self.not_copied) - 1} more)" if len(self.not_copied) > 1 else ""
            notes.append(
                f"local cache: {self.not_copied[0]} was replaced after the save read it{more}; "
                "not copied into the local cache (the store has what the save read)"
            )
        if self.filled_up:
            notes.append(
                "local cache: its disk filled up while the save copied files into it; the rest "
                "were not copied in (the store has them; free space on the runner)"
            )
        return notes
