"""Deprecated: ``stoker.etl`` is now :mod:`stoker.writers.etl` (``stoker etl`` on the command
line); this name warns, and goes in a later release."""

import warnings

from stoker.writers.etl import EtlReport, materialize

__all__ = ["EtlReport", "materialize"]

warnings.warn(
    "stoker.etl is deprecated: import stoker.writers.etl (the same materialize)",
    DeprecationWarning,
    stacklevel=2,
)
