"""``gate``, ``provenance``, ``report``: training in CI (placeholder specs; filled by that work)."""

from gpuci.commands import Command

GATE = Command(name="gate", help="Fail the job when a model's metrics miss their thresholds.")
PROVENANCE = Command(name="provenance", help="Record which commit and which data made a model.")
REPORT = Command(name="report", help="Post the gate table and provenance on the pull request.")
