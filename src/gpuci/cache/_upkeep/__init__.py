"""The store's upkeep: ``cache-weights prune``, ``ls``, ``pin`` and ``unpin``."""
