"""LeRobot datasets: ``format`` (the files' layout, shared with the writers), ``vocabulary``
(every info.json key, feature attribute and dtype stoker reads, ignores or refuses),
``lance_layout`` (their Lance copies: tables read with pylance, videos as byte slices of its
files), ``metadata`` (info.json, the episode tables and the videos, read once), ``index`` (the
memory-mapped episode index: sample id -> rows and frames, built once per job),
``index_command`` (``stoker index``, building it ahead of a job), ``dataset``
(:class:`stoker.LeRobotDataset` and :class:`stoker.WindowSpec`) and ``meta_view`` (``ds.meta``
shaped as LeRobot's, and where LeRobot keeps datasets on this machine).
"""
