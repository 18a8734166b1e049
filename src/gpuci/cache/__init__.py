"""The content-addressed cache: blobs, packs, manifests and refs in an S3 or local store.

Laid out by floor, each importing only its own and the ones below (docs/architecture.md):
``api`` (the Python API) over the operations ``_restore/``, ``_save/`` and ``_upkeep/`` (prune,
ls, pin; ``_common`` is what they share), over ``_transfer/`` (moving bytes), over ``_format/``
(manifests, packs, refs, uses, local trees), over ``_stores/`` (the file store, ``s3/`` and the
runner-local tier), over ``_layout`` (names and sizes) and ``options`` (typed inputs). Nothing
here is imported by ``gpuci`` itself.
"""

__all__ = ["api", "options"]  # nothing imported here: a restore's start-up loads only what it uses
