"""One-job CI runners on pods: registration, labels, the boot script, releases, clean-up."""
