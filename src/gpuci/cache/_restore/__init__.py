"""``cache-weights restore``: lookup -> plan -> place -> report."""
