"""``stoker doctor DATASET --ray ADDRESS|local``: the doctor's method on a Ray cluster.

Decode runs in stoker read tasks (:func:`stoker.integrations.ray.read_lerobot`) on the cluster's
CPUs; the trainer is a Ray Train-style consumer in this process: ``iter_torch_batches`` and a
synthetic step. For each point of a sweep of the CPUs given to the read tasks (tasks at once
times CPUs per task), it measures the consumer's ``data_wait`` (time blocked for the next batch) and
the achieved rate, then says which line of the decision table applies (docs/scale-out.md):

* ``scale-pool``: data_wait is high and the last step of the sweep still helped: adding CPU
  helps, the data-supply roofline was too low; give the read tasks more CPUs.
* ``run-etl``: data_wait is high and adding CPU plateaus: per-sample decode cost is the lower
  bound; materialize at training size (``stoker etl``) instead of buying CPUs.
* ``stop-tuning``: data_wait is low and the sweep no longer helps: the data side is not the
  bottleneck; move to the GPU side (batch, memory, DDP).

Per node: each read task reports where it runs and how far it got (the read's ``task_hook``,
into a small actor), so each point also says which node ran which task and at what rate
(rows over the task's time), and the table of the widest point shows them node by node: a slow
or idle node stands out.
"""

from __future__ import annotations

import html
import json
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from stoker.doctor.report import write_page

#: data_wait below this share of the wall time counts as low.
LOW_WAIT_SHARE = 0.10
#: The last step of the sweep must raise the rate by this factor to count as helping.
HELPS = 1.15


@dataclass
class RayTask:
    """One read task as it reported itself: its node, its rows and its time so far."""

    task: int
    node_id: str
    pid: int
    rows: int
    seconds: float

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


@dataclass
class RayNode:
    """A node's read tasks at one point: how many, their rows, their rows/s (all their rows
    over all their time: a task's mean rate on that node)."""

    node_id: str
    address: str
    tasks: int
    rows: int
    rows_per_s: float


@dataclass
class RayPoint:
    cpus: int  # CPUs given to the read tasks: concurrency * cpus per task
    concurrency: int
    samples_per_s: float
    data_wait_share: float
    data_wait_p50_ms: float
    steps: int
    tasks: list[RayTask] = field(default_factory=list)
    nodes: list[RayNode] = field(default_factory=list)


@dataclass
class RaySweep:
    """What :func:`sweep` measured, and the line of the decision table that applies."""

    address: str
    batch_size: int
    step_ms: float
    cpus_per_task: int
    cluster_cpus: int
    points: list[RayPoint] = field(default_factory=list)
    verdict: str = ""
    headline: str = ""
    advice: list[str] = field(default_factory=list)

    def conclude(self) -> None:
        """Sets the verdict from the points (the decision table's three lines)."""
        last = self.points[-1]
        gain = last.samples_per_s / self.points[-2].samples_per_s if len(self.points) > 1 else 1.0
        wait = f"{last.data_wait_share:.0%}"
        if last.data_wait_share <= LOW_WAIT_SHARE and gain < HELPS:
            self.verdict = "stop-tuning"
            self.headline = (
                f"data_wait is low ({wait} of the time at {last.cpus} CPUs) and the sweep no "
                f"longer helps (x{gain:.2f} for the last step): stop tuning the loader."
            )
            self.advice = [
                "The data side is no longer the bottleneck: work on the GPU side (the largest "
                "per-device batch the recipe allows, memory, DDP synchronization)."
            ]
        elif gain >= HELPS or last.data_wait_share <= LOW_WAIT_SHARE:
            self.verdict = "scale-pool"
            self.headline = (
                f"Adding CPU helps: x{gain:.2f} for the last step of the sweep (to "
                f"{last.cpus} CPUs), data_wait {wait} of the time."
            )
            self.advice = [
                "The data-supply roofline is too low: give the read tasks more CPUs "
                "(read_lerobot(concurrency=..., threads_per_task=...), or more CPU nodes).",
                "If the gain flattens as you add CPUs, per-sample cost is next: `stoker etl`.",
            ]
        else:
            self.verdict = "run-etl"
            self.headline = (
                f"Adding CPU plateaus (x{gain:.2f} for the last step, to {last.cpus} CPUs) "
                f"while the trainer still waits {wait} of the time: per-sample cost bounds "
                "the supply."
            )
            self.advice = [
                "Move the materialization boundary: `stoker etl SRC DST --size WxH` "
                "re-encodes at training size once (add `--ray` to run it on this cluster), "
                "instead of decoding full-size video every epoch.",
            ]

    def summary(self) -> str:
        lines = [
            f"stoker doctor --ray {self.address}: {self.verdict}. {self.headline}",
            "",
            f"Consumer: iter_torch_batches(batch_size={self.batch_size}), synthetic step "
            f"{self.step_ms:.0f} ms; read tasks of {self.cpus_per_task} CPUs; cluster "
            f"{self.cluster_cpus} CPUs.",
            "",
            "  CPUs  tasks  samples/s  data_wait  data_wait p50",
        ]
        for p in self.points:
            lines.append(
                f"  {p.cpus:4d}  {p.concurrency:5d}  {p.samples_per_s:9.1f}  "
                f"{p.data_wait_share:8.0%}  {p.data_wait_p50_ms:10.1f} ms"
            )
        widest = max(self.points, key=lambda p: p.cpus) if self.points else None
        if widest is not None and widest.nodes:
            lines += [
                "",
                f"Read tasks by node at {widest.cpus} CPUs (rows/s: a task's rows over its time):",
                "  node      address          tasks   rows  rows/s",
            ]
            for n in widest.nodes:
                lines.append(
                    f"  {n.node_id[:8]:8s}  {n.address:15s}  {n.tasks:5d}  {n.rows:5d}  "
                    f"{n.rows_per_s:6.1f}"
                )
        lines += ["", "What to do:"] + [f"  - {a}" for a in self.advice]
        return "\n".join(lines)

    def write_report(self, folder: str | os.PathLike) -> str:
        """Writes ``index.html``, ``ray_sweep.json`` and ``ray_sweep.png`` into ``folder``;
        returns the HTML file's path."""
        folder = os.fspath(folder)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "ray_sweep.json"), "w") as f:
            json.dump(asdict(self), f, indent=2)
        image = "<p>(matplotlib is not installed: no plot)</p>"
        if self._plot(os.path.join(folder, "ray_sweep.png")):
            image = (
                '<figure><img src="ray_sweep.png" alt="CPU sweep"><figcaption>Samples/s and '
                "data_wait share by CPUs given to the read tasks</figcaption></figure>"
            )
        heading = f"stoker doctor --ray: {html.escape(self.verdict)}"
        return write_page(
            folder,
            "stoker doctor --ray",
            heading,
            self.headline,
            self.advice,
            image,
            self.summary(),
        )

    def _plot(self, path: str) -> bool:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return False
        cpus = [p.cpus for p in self.points]
        fig, ax = plt.subplots(figsize=(7, 3.6))
        ax.plot(cpus, [p.samples_per_s for p in self.points], "o-", label="samples / s")
        ax.set_xlabel("CPUs given to stoker read tasks")
        ax.set_ylabel("samples / s")
        ax.set_xticks(cpus)
        ax.set_ylim(bottom=0)
        wait = ax.twinx()
        wait.plot(cpus, [p.data_wait_share * 100 for p in self.points], "s--", color="tab:red")
        wait.set_ylabel("data_wait (% of time)", color="tab:red")
        wait.set_ylim(0, 100)
        ax.set_title(f"Ray CPU sweep: {self.verdict}")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return True


def _concurrencies(cluster_cpus: int, cpus_per_task: int) -> list[int]:
    """1, 2, 4, ... read tasks at once, up to what the cluster's CPUs hold."""
    most = max(1, cluster_cpus // cpus_per_task)
    counts, c = [], 1
    while c < most:
        counts.append(c)
        c *= 2
    return counts + [most]


class TaskLog:
    """Kept in a Ray actor (see :func:`_task_log`): each read task's last report, by (point of
    the sweep, task, process), so that a task Ray ran again counts once per try and a late
    report of an earlier point's task lands in that point."""

    def __init__(self) -> None:
        self._last: dict[tuple[int, int, int], RayTask] = {}

    def add(self, point: int, event: Any) -> None:
        self._last[(point, event.task, event.pid)] = RayTask(
            event.task, event.node_id, event.pid, event.rows, event.seconds
        )

    def take(self, point: int) -> list[RayTask]:
        keys = sorted(key for key in self._last if key[0] == point)
        return [self._last.pop(key) for key in keys]


@dataclass(frozen=True)
class ReportTo:
    """The read tasks' ``task_hook``: each report into the :class:`TaskLog` actor ``log``,
    waited for (one round trip per block) so that the log holds every block handed on."""

    log: Any
    point: int

    def __call__(self, event: Any) -> None:
        import ray

        ray.get(self.log.add.remote(self.point, event))


def _task_log() -> Any:
    import ray

    return ray.remote(num_cpus=0)(TaskLog).remote()


def _nodes(tasks: list[RayTask]) -> list[RayNode]:
    """The tasks grouped by node (address from the cluster's node table), busiest first."""
    import ray

    addresses = {n["NodeID"]: n.get("NodeManagerAddress", "") for n in ray.nodes()}
    nodes = []
    for node_id in sorted({t.node_id for t in tasks}):
        mine = [t for t in tasks if t.node_id == node_id]
        rows, seconds = sum(t.rows for t in mine), sum(t.seconds for t in mine)
        nodes.append(
            RayNode(
                node_id=node_id,
                address=addresses.get(node_id, ""),
                tasks=len(mine),
                rows=rows,
                rows_per_s=rows / seconds if seconds > 0 else 0.0,
            )
        )
    return sorted(nodes, key=lambda n: -n.rows)


def _measure(
    dataset,
    *,
    concurrency,
    cpus_per_task,
    batch_size,
    step_s,
    steps,
    epoch,
    seed,
    samples_per_task,
    log,
):
    import ray

    from stoker.integrations.ray import read_lerobot

    rd = read_lerobot(
        dataset,
        seed=seed,
        epoch=epoch,
        threads_per_task=cpus_per_task,
        concurrency=concurrency,
        samples_per_task=samples_per_task or batch_size * max(1, 64 // batch_size),
        rows_per_block=batch_size,
        task_hook=ReportTo(log, epoch),
    )
    waits: list[float] = []
    warmup = 2  # the first batches include starting the workers
    iterator = iter(rd.iter_torch_batches(batch_size=batch_size, prefetch_batches=2))
    started = samples = 0.0
    for n in range(steps + warmup):
        asked = time.perf_counter()
        batch = next(iterator, None)
        got = time.perf_counter()
        if batch is None:
            break
        if n == warmup:
            started = asked
        if n >= warmup:
            waits.append(got - asked)
            samples += len(batch["index"])
        time.sleep(step_s)  # the synthetic training step
    wall = time.perf_counter() - started if waits else 0.0
    del iterator
    tasks = ray.get(log.take.remote(epoch))
    waits_array = sorted(waits)
    return RayPoint(
        cpus=concurrency * cpus_per_task,
        concurrency=concurrency,
        samples_per_s=samples / wall if wall else 0.0,
        data_wait_share=sum(waits) / wall if wall else 0.0,
        data_wait_p50_ms=waits_array[len(waits_array) // 2] * 1000 if waits_array else 0.0,
        steps=len(waits),
        tasks=tasks,
        nodes=_nodes(tasks),
    )


def sweep(
    dataset,
    *,
    address: str = "local",
    batch_size: int = 32,
    step_ms: float = 120.0,
    steps: int = 30,
    cpus_per_task: int = 1,
    seed: int = 0,
    samples_per_task: int | None = None,
) -> RaySweep:
    """Runs the sweep on the cluster at ``address`` (``"local"``: a new local cluster; a
    process already connected stays on its cluster) over ``dataset`` (a
    :class:`stoker.LeRobotDataset`), ``steps`` steps per point, read tasks of
    ``samples_per_task`` samples (default: about 64, whole batches)."""
    import ray

    from stoker.integrations.ray import cluster

    cluster.connect(address)
    ray.data.DataContext.get_current().enable_progress_bars = False
    result = RaySweep(
        address=address,
        batch_size=batch_size,
        step_ms=step_ms,
        cpus_per_task=cpus_per_task,
        cluster_cpus=cluster.cluster_cpus(),
    )
    log = _task_log()
    for epoch, concurrency in enumerate(_concurrencies(result.cluster_cpus, cpus_per_task)):
        result.points.append(
            _measure(
                dataset,
                concurrency=concurrency,
                cpus_per_task=cpus_per_task,
                batch_size=batch_size,
                step_s=step_ms / 1000,
                steps=steps,
                epoch=epoch,
                seed=seed,
                samples_per_task=samples_per_task,
                log=log,
            )
        )
    ray.kill(log)
    result.conclude()
    return result


def main(args: Any, dataset) -> int:
    """``stoker doctor --ray``: the sweep over ``dataset`` with the command's arguments."""
    result = sweep(
        dataset,
        address=args.ray,
        batch_size=args.batch_size,
        step_ms=args.step_ms,
        steps=args.steps or 30,  # --steps has no default: the local doctor's phases adapt
        cpus_per_task=args.threads or 1,
    )
    print(result.summary())
    print(f"\nReport: {result.write_report(args.report)}")
    return 0
