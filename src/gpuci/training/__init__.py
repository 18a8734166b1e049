"""Training in CI: a metric gate, provenance of every model, and the report on the pull request.

``metrics`` reads what a training run wrote, ``rules``/``gate`` judge it, ``provenance`` records
what made the model (plain JSON and an in-toto SLSA v1 statement), ``report`` puts the verdict on
the pull request. Imported only when one of those commands runs.
"""

__all__: list[str] = []  # nothing imported here: the commands load their modules
