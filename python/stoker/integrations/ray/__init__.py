"""stoker on Ray Data: LeRobot samples and tar shards' samples decoded by stoker's native engine
inside Ray read tasks.

    import stoker.integrations.ray

    ds = stoker.integrations.ray.read_lerobot("s3://bucket/ds", spec, shuffle=True, seed=0, epoch=0)
    for batch in ds.iter_torch_batches(batch_size=32):   # LeRobot's keys, images as tensors
        train_step(batch)

Ray is optional: ``import stoker`` does not import it, and this package needs ``ray[data]``.
See docs/scale-out.md.

The package's modules: :mod:`~stoker.integrations.ray.datasource` (the
``ray.data.Datasource`` and :func:`read_lerobot`, :func:`read_shards`, with the
:class:`ReadTaskEvent` a ``task_hook`` receives) and
:mod:`~stoker.integrations.ray.cluster` (joining a cluster, its size; stoker etl's units run as
Ray tasks by :mod:`stoker.writers.etl_tasks`).
"""

from stoker.integrations.ray.datasource import (
    LoaderDatasource,
    ReadTaskEvent,
    read_lerobot,
    read_shards,
)

__all__ = ["LoaderDatasource", "ReadTaskEvent", "read_lerobot", "read_shards"]
