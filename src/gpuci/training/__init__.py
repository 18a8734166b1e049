"""Training in CI: a metric gate, provenance of every model, and the report on the pull request.

``_metrics`` reads what a training run wrote, ``_rules``/``_gate`` judge it, ``_provenance``
records what made the model (plain JSON and an in-toto SLSA v1 statement), ``_report`` puts the
verdict on the pull request. Public: the commands' typed inputs (:mod:`gpuci.training.options`);
the rest (``_``-named) is internal and may change. Nothing is imported here: the commands load
their modules.
"""

__all__ = ["options"]
