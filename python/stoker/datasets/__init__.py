"""The dataset kinds a :class:`stoker.Loader` reads, each describing its samples and planning
their reads for the native batch builder:

- ``lerobot/``: LeRobot datasets (v2.1 and v3.0; local, ``s3://`` or ``https://``) — the
  on-disk format, its metadata, the episode index and :class:`stoker.LeRobotDataset`;
- ``shards``: tar shards of images, clips, text and arrays (:class:`stoker.ShardDataset`);
- ``mix``: several datasets of any kinds drawn as one (:class:`stoker.MultiDataset`).
"""
