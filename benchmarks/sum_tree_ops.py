"""Operators dispatched by prioritised replay's sum tree, tree walk against prefix sums.

Each operator is a kernel launch on a GPU (outside a captured graph), so the count is what the
GPU path pays per learn step in launches; counted by a dispatch mode (`count_ops`), it is exact
and the same on any machine or load. One learn step makes one stratified draw of B leaves per
agent (`BatchedSumTree.find_stratified`: ``draw``; ``find`` is the search alone, for masses
given) and one priority write; at Atari 100k's capacity the tree is 17 levels deep.

    python benchmarks/sum_tree_ops.py                       # MinAtar N = 16, Nature N = 26
    python benchmarks/sum_tree_ops.py --agents 2 --capacity 300 --json ops.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from sgi_lab.data.batched_sum_tree import BatchedSumTree
from sgi_lab.runtime.graphs import count_ops


def tree_ops(agents: int, capacity: int, batch: int = 32) -> dict[str, dict[str, int]]:
    """``{walk: {"draw": ops, "find": ops, "write": ops, "total": ops}}`` for one stratified
    draw of ``batch`` leaves per agent (and the search alone for given masses) and one write of
    ``batch`` priorities per agent, over a full tree of random priorities."""
    found = {}
    for walk in ("tree", "prefix"):
        tree = BatchedSumTree(agents, capacity, walk=walk)
        tree.host_checks = False  # as on a GPU
        g = torch.Generator().manual_seed(0)
        rows = torch.arange(capacity).expand(agents, -1)
        tree.update(rows, torch.rand(agents, capacity, generator=g, dtype=torch.float64))
        uniforms = torch.rand(agents, batch, generator=g, dtype=torch.float64)
        mass = uniforms * tree.total[:, None]
        tree.find_stratified(uniforms)  # warm: constants made once
        written = torch.randint(0, capacity, (agents, batch), generator=g)
        values = torch.rand(agents, batch, generator=g, dtype=torch.float64)
        found[walk] = {
            "draw": sum(count_ops(lambda t=tree, u=uniforms: t.find_stratified(u)).values()),
            "find": sum(count_ops(lambda t=tree, m=mass: t.find(m)).values()),
            "write": sum(count_ops(lambda t=tree, r=written, v=values: t.update(r, v)).values()),
            "total": sum(count_ops(lambda t=tree: t.total).values()),
        }
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[16, 26])
    parser.add_argument("--capacity", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = []
    for agents, capacity in zip(args.agents, args.capacity, strict=True):
        ops = tree_ops(agents, capacity)
        rows.append({"agents": agents, "capacity": capacity, **ops})
        print(
            f"N={agents:3d} capacity={capacity:7d}  tree: draw {ops['tree']['draw']}, find "
            f"{ops['tree']['find']}, write {ops['tree']['write']}  prefix: draw "
            f"{ops['prefix']['draw']}, find {ops['prefix']['find']}, write "
            f"{ops['prefix']['write']} (+{ops['prefix']['total']} for the total)"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
