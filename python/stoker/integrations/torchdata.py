"""A :class:`stoker.Loader` inside other data-loading frameworks, without depending on them.

``torchdata.nodes`` (torchdata >= 0.10)::

    node = stoker.integrations.torchdata.loader_node(loader)          # a torchdata.nodes.BaseNode
    pipeline = torchdata.nodes.Loader(torchdata.nodes.Prefetcher(node, 2))
    for batch in pipeline: ...
    state = pipeline.state_dict()                       # holds the stoker Loader's state

The node's state is the loader's :meth:`~stoker.Loader.state_dict` (under ``"loader"``):
``torchdata.nodes.Loader`` resumes from it exactly. A checkpoint that treats the loader as a
``torchdata.stateful_dataloader.StatefulDataLoader`` (``state_dict()`` / ``load_state_dict()``)
works with the Loader itself: they are the same calls.
"""

from __future__ import annotations

from typing import Any

__all__ = ["loader_node"]

_NODE_CLASS: Any = None


def loader_node(loader) -> Any:
    """A ``torchdata.nodes.BaseNode`` yielding ``loader``'s batches. Each ``reset()`` starts an
    iteration of the loader, as ``iter(loader)`` does (the current epoch from its beginning;
    an epoch iterated to its end moves on to the next); ``reset(state)`` resumes exactly where
    the state was taken. Raises ``ImportError`` when torchdata cannot be imported."""
    return _node_class()(loader)


def _node_class():
    global _NODE_CLASS
    if _NODE_CLASS is not None:
        return _NODE_CLASS
    try:
        from torchdata.nodes import BaseNode  # type: ignore[import-untyped]
    except ImportError as error:
        raise ImportError(
            "stoker.integrations.torchdata.loader_node needs torchdata (pip install torchdata)"
        ) from error

    class LoaderNode(BaseNode):
        """A stoker Loader as a torchdata node; its state is the loader's."""

        STATE_KEY = "loader"

        def __init__(self, loader):
            super().__init__()
            self.loader = loader
            self._iterator: Any = None

        def reset(self, initial_state: dict | None = None) -> None:
            super().reset(initial_state)
            if self._iterator is not None:
                self._iterator.close()
            if initial_state is not None:
                self.loader.load_state_dict(initial_state[self.STATE_KEY])
            self._iterator = iter(self.loader)

        def next(self):
            return next(self._iterator)

        def get_state(self) -> dict[str, Any]:
            return {self.STATE_KEY: self.loader.state_dict()}

    _NODE_CLASS = LoaderNode
    return LoaderNode
