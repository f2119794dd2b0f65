"""stoker inside other engines, each optional and imported only when used: ``ray`` (Ray Data
read tasks: ``stoker.integrations.ray.read_lerobot``) and ``torchdata`` (a ``torchdata.nodes``
node over a :class:`stoker.Loader`). Each is also ``stoker.ray`` and ``stoker.torchdata``, its
short public name.
"""
