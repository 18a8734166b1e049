"""Moving bytes from a store into place: its ranged GETs, driven by gpuci.ranged."""
