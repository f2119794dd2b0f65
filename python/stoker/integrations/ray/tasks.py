"""Deprecated: ``stoker.integrations.ray.tasks`` is now :mod:`stoker.writers.etl_tasks` (the
ETL's transcode tasks) and :mod:`stoker.integrations.ray.cluster` (joining the cluster); this
name warns, and goes in a later release."""

import warnings

from stoker.integrations.ray.cluster import cluster_cpus, connect
from stoker.writers.etl_tasks import TranscodeTasks

__all__ = ["TranscodeTasks", "cluster_cpus", "connect"]

warnings.warn(
    "stoker.integrations.ray.tasks is deprecated: import stoker.writers.etl_tasks "
    "(TranscodeTasks) and stoker.integrations.ray.cluster (connect, cluster_cpus)",
    DeprecationWarning,
    stacklevel=2,
)
