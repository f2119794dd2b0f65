"""What stoker writes: ``etl`` (``stoker etl``: a LeRobot dataset re-encoded at training
resolution), ``shards`` (``stoker shard``: tar shards of equal bytes), ``clips`` (clips cut
from a LeRobot dataset into shards), ``typed_columns`` (JSON columns into typed Parquet
columns), ``encoding`` (the encoder options they share with their Ray tasks) and
``etl_tasks`` (``stoker etl --ray``: its units as Ray tasks).
"""
