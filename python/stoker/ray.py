"""``stoker.ray``: the short public name of :mod:`stoker.integrations.ray` (stoker on Ray Data),
the name this integration had first. The same objects under both names::

    import stoker.ray

    ds = stoker.ray.read_lerobot("s3://bucket/ds", spec, shuffle=True, seed=0, epoch=0)

It needs ``ray[data]``, as :mod:`stoker.integrations.ray` does; ``import stoker`` imports
neither.
"""

from stoker.integrations.ray import LoaderDatasource, ReadTaskEvent, read_lerobot, read_shards

__all__ = ["LoaderDatasource", "ReadTaskEvent", "read_lerobot", "read_shards"]
