"""sampler_bench: the load balancer's effect, and what a random order costs per index.

    PYTHONPATH=python .venv/bin/python bench/sampler_bench.py [--samples N] [--batch-size B]

Data: synthetic per-sample costs drawn from a log-normal distribution (sigma 1.0 and 1.5; a
skew like that of episodes whose windows need very different decode work), fixed seed.

Printed:
  - per world size, the imbalance of the global steps (max / mean of the ranks' summed costs)
    when dealt round-robin as DistributedSampler does ("before") and after LoadBalancedSampler
    re-deals them ("after"): the average step's ratio, and "total" = sum of the steps' max /
    sum of their mean, i.e. how much longer synchronous steps take than perfect balance;
    "bound" is the least total any equal-count assignment of the same steps could reach (a
    rank's share is at least the mean and at least the step's heaviest sample);
  - ns per id of a random order (stoker.RandomSampler, computed position by position, for a
    stored-size and a 10^15-sample dataset) next to numpy's stored permutation, a sequential
    order, weighted draws and load-balanced ids. Single thread; best of 3.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

import stoker


def best_ns_per_item(fn, items, repeats=3):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best / items * 1e9


def lower_bound(costs, world_size, batch_size):
    """The least "total" any assignment can reach on the same steps: a rank's step cost is at
    least the mean, and at least the step's heaviest sample."""
    order = stoker.RandomSampler(len(costs), seed=0).indices(0)  # the balancer's base order
    step = world_size * batch_size
    full = len(order) // step * step
    steps = costs[order[:full]].reshape(-1, step)
    mean = steps.sum(axis=1) / world_size
    return np.maximum(mean, steps.max(axis=1)).sum() / mean.sum()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--order-samples", type=int, default=10_000_000)
    args = parser.parse_args()

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}")
    print(f"\nLoad balance: {args.samples} samples, log-normal costs, batch_size "
          f"{args.batch_size} per rank, epoch 0")
    print(f"{'sigma':>5} {'world':>5} {'steps':>6} | {'before mean':>11} {'total':>6} | "
          f"{'after mean':>10} {'total':>6} | {'bound':>6} | {'step time saved':>15}")
    for sigma in (1.0, 1.5):
        costs = np.random.default_rng(0).lognormal(0.0, sigma, args.samples)
        for world_size in (2, 4, 8, 16, 32):
            sampler = stoker.LoadBalancedSampler(costs, batch_size=args.batch_size,
                                                 world_size=world_size, seed=0)
            r = sampler.imbalance(0)
            before, after = r["before"], r["after"]
            saved = 1 - after["total"] / before["total"]
            print(f"{sigma:>5} {world_size:>5} {r['steps']:>6} | {before['mean']:>11.3f} "
                  f"{before['total']:>6.3f} | {after['mean']:>10.3f} {after['total']:>6.3f} | "
                  f"{lower_bound(costs, world_size, args.batch_size):>6.3f} | {saved:>14.1%}")

    n = args.order_samples
    print(f"\nOrder cost, ns per id ({n} ids per call):")
    rows = [
        ("RandomSampler, n = 10^7 (Feistel permutation)",
         lambda: stoker.RandomSampler(n, seed=1).indices()),
        ("RandomSampler, n = 10^15, a window of 10^7",
         lambda: stoker.RandomSampler(10**15, seed=1).indices(start=10**14, count=n)),
        ("SequentialSampler, n = 10^7 (call overhead)",
         lambda: stoker.SequentialSampler(n).indices()),
        ("numpy.random.permutation, n = 10^7 (stored)",
         lambda: np.random.default_rng(1).permutation(n)),
        ("WeightedSampler, 10^7 draws from 10^6 weights",
         lambda: stoker.WeightedSampler(np.arange(1, 10**6 + 1, dtype=np.float64),
                                        num_samples=n, seed=1).indices()),
    ]
    costs = np.random.default_rng(0).lognormal(0.0, 1.5, 10**6)
    lb = stoker.LoadBalancedSampler(costs, batch_size=args.batch_size, world_size=8, seed=1)
    rows.append((f"LoadBalancedSampler, 10^6 costs, world 8 (one rank's {len(lb)} ids)",
                 lambda: lb.indices()))
    for name, fn in rows:
        items = len(lb) if name.startswith("LoadBalanced") else n
        print(f"  {name:<62} {best_ns_per_item(fn, items):8.1f}")
    print("  (the load-balanced rank solves every global step: world_size x the ids it returns)")


if __name__ == "__main__":
    main()
