"""The cache's format: manifests, packs, refs and uses, and the trees they describe."""
