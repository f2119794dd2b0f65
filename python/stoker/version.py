"""The package version (one place: ``stoker.__version__``, ``stoker --version``, reports)."""

__version__ = "0.1.0"
