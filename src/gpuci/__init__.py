"""gpu-ci: keep GPU CI jobs short, cheap and trustworthy."""

__version__ = "0.1.0"

__all__ = ["__version__"]
