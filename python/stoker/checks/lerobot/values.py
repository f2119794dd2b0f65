"""The values of the data columns: a NaN or an infinity in a numeric feature is an error,
named by episode, feature, dimension and row (a policy normalizing by the statistics, or
regressing on the value, trains on it as it is)."""

from __future__ import annotations

import numpy as np

from stoker.checks.lerobot.metadata import Meta
from stoker.checks.lerobot.rows import Rows
from stoker.checks.lerobot.run import Run


def check_values(run: Run, meta: Meta, rows: Rows) -> None:
    episode_of_row = np.repeat(np.arange(meta.num_episodes), meta.length)
    for name, values in rows.features.items():
        bad = rows.valid[:, None] & ~np.isfinite(values)
        if not bad.any():
            continue
        bad_rows = np.flatnonzero(bad.any(axis=1))
        episodes, first = np.unique(episode_of_row[bad_rows], return_index=True)
        for e, i in zip(episodes.tolist(), first.tolist()):
            r = int(bad_rows[i])
            in_episode = bad_rows[episode_of_row[bad_rows] == e]
            dimensions = np.flatnonzero(bad[in_episode].any(axis=0))
            value = values[r, int(np.flatnonzero(bad[r])[0])]
            named = ", ".join(str(int(d)) for d in dimensions[:8])
            named += " ..." if len(dimensions) > 8 else ""
            plural = "s" if len(dimensions) > 1 else ""
            count = f"{len(in_episode)} row{'s' if len(in_episode) > 1 else ''}"
            run.add(
                "error",
                "values",
                f"episode {meta.episode_index[e]}, feature {name!r}: {value} at row "
                f"{r - meta.from_row[e]} of the episode (dimension{plural} {named}; {count} of "
                "the episode)",
                "re-record or drop the episode, or fill the values (interpolate) and recompute "
                "the statistics",
                episode=int(meta.episode_index[e]),
                row=r,
                field=name,
                found=str(value),
            )
