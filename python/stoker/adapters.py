"""Deprecated: ``stoker.adapters`` is now ``stoker.torchdata`` (or
:mod:`stoker.integrations.torchdata`); this name warns, and goes in a later release."""

import warnings

from stoker.integrations.torchdata import loader_node

__all__ = ["loader_node"]

warnings.warn(
    "stoker.adapters is deprecated: import stoker.torchdata (the same loader_node)",
    DeprecationWarning,
    stacklevel=2,
)
