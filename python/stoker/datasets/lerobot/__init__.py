"""LeRobot datasets: ``format`` (the files' layout, shared with the writers), ``metadata``
(info.json, the episode tables and the videos, read once), ``index`` (the memory-mapped episode
index: sample id -> rows and frames, built once per job), ``index_command`` (``stoker index``,
building it ahead of a job), ``dataset`` (:class:`stoker.LeRobotDataset` and
:class:`stoker.WindowSpec`) and ``meta_view`` (``ds.meta`` shaped as LeRobot's, and where
LeRobot keeps datasets on this machine).
"""
