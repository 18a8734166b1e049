"""The content-addressed cache: blobs, packs, manifests and refs in an S3 or local store.

Laid out by floor, each importing only its own and the ones below (docs/architecture.md):
``api`` (the Python API) over the operations ``restore/``, ``save/`` and ``upkeep/`` (prune,
ls, pin; ``common`` is what they share), over ``transfer/`` (moving bytes), over ``format/``
(manifests, packs, refs, uses, local trees), over ``stores/`` (the file store, ``s3/`` and the
runner-local tier), over ``layout`` (names and sizes) and ``options`` (typed inputs). Nothing
here is imported by ``gpuci`` itself.
"""

__all__: list[str] = []  # nothing imported here: a restore's start-up loads only what it uses
