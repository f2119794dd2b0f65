"""The LeRobot checks of ``stoker check``: episodes, cameras, metadata and (``deep``) decoding.

:func:`check_lerobot` reads a LeRobot dataset (v2.0, v2.1 or v3.0; local, ``s3://`` or
``https://``) leniently, so that one problem does not hide the others: every meta file, the
episode and task tables, the data files' schemas and columns, and every video's frame table.
The frame tables come from stoker's episode index when it builds (nothing is scanned twice; an
index already built is mapped), else from one scan of each video, on all cores; episodes are
placed in their video files by the engine's own rule (the index build's). Each problem becomes
a :class:`~stoker.checks.findings.Finding` naming the episode, the camera and the frame or row
where it matters, what was expected and found, and what to do; docs/check.md lists the checks
and their severities.

The checks compare whole numpy columns (per episode at most, never per row in Python); with
``deep``, :meth:`stoker.VideoReader.verify` decodes every video in C++, one video per thread of
a pool as wide as the usable cores, and every image of an image feature is decoded too.

One module per concept, in the order the checks run:

* :mod:`~stoker.checks.lerobot.run`: the run (options, findings), the check names, the pools;
* :mod:`~stoker.checks.lerobot.metadata`: info.json, the episode and task tables, the files;
* :mod:`~stoker.checks.lerobot.rows`: the data files' rows and timestamps;
* :mod:`~stoker.checks.lerobot.features`: info.json's features against the data's columns;
* :mod:`~stoker.checks.lerobot.values`: the data columns' values (NaN, infinities);
* :mod:`~stoker.checks.lerobot.videos`: the videos' frame tables, sizes and frame rates;
* :mod:`~stoker.checks.lerobot.frames`: episodes placed in their files, frames against rows;
* :mod:`~stoker.checks.lerobot.stats`: the statistics against the data;
* :mod:`~stoker.checks.lerobot.deep`: every frame and image decoded (``deep``);
* :mod:`~stoker.checks.lerobot.check`: :func:`check_lerobot`, which runs them.
"""

from stoker.checks.lerobot.check import check_lerobot
from stoker.checks.lerobot.run import CHECKS, DEEP_CHECKS, DEFAULT_TOLERANCE_S

__all__ = ["CHECKS", "DEEP_CHECKS", "DEFAULT_TOLERANCE_S", "check_lerobot"]
