"""``stoker.torchdata``: the short public name of :mod:`stoker.integrations.torchdata` (a
:class:`stoker.Loader` as a ``torchdata.nodes`` node). The same objects under both names::

    import stoker.torchdata

    node = stoker.torchdata.loader_node(loader)

Importing it does not import torchdata (``loader_node`` does, when called).
"""

from stoker.integrations.torchdata import loader_node

__all__ = ["loader_node"]
