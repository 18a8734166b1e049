"""``cache-weights save``: hash, upload what the store lacks, manifest, then ref."""
