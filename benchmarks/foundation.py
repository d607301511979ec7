"""Foundation benchmarks: sampling speed, resident memory on a paper-sized store, collection speed.

    python benchmarks/foundation.py sampling --rows 1000000     # batches/s at batch 256, K+1 = 6
    python benchmarks/foundation.py memory --rows 6000000       # RSS while sampling a 42 GB store
    python benchmarks/foundation.py collect --steps 20000        # Random collection steps/s

Stores are built under --workdir (default /tmp/sgi-bench) and reused between runs. The sampling
store holds real (random-noise) frames; the memory store's frame chunks are sparse files, so a
6M-row store costs no disk writes while its reads still go through the page cache and memmaps.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

import numpy as np
from numpy.lib.format import open_memmap

from sgi_lab.data import SequenceSampler, TransitionStore
from sgi_lab.data.store_format import FIELDS, MANIFEST, StoreManifest, chunk_path, write_manifest


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def synthetic_store(path: Path, rows: int, chunk: int = 100_000, sparse: bool = False) -> Path:
    """A store of ``rows`` transitions with episodes of ~2,000 steps (terminals at their ends)."""
    if (path / MANIFEST).exists():
        return path
    rng = np.random.default_rng(0)
    (path / "chunks").mkdir(parents=True, exist_ok=True)
    noise = rng.integers(0, 256, size=(4096, 84, 84), dtype=np.uint8)
    sizes = [min(chunk, rows - s) for s in range(0, rows, chunk)]
    episode_len = 2_000
    global_row = 0
    episodes = terminals = 0
    for index, n in enumerate(sizes):
        r = np.arange(global_row, global_row + n)
        first = (r % episode_len == 0).astype(np.uint8)
        terminal = (r % episode_len == episode_len - 1).astype(np.uint8)
        columns = {
            "action": rng.integers(0, 6, n).astype(np.int32),
            "reward": (rng.random(n) < 0.02).astype(np.float32),
            "terminal": terminal,
            "first": first,
        }
        for name, values in columns.items():
            np.save(chunk_path(path, name, index), values, allow_pickle=False)
        frames = open_memmap(chunk_path(path, "frame", index), "w+", np.uint8, (n, 84, 84))
        if not sparse:
            for s in range(0, n, len(noise)):
                frames[s : s + len(noise)] = noise[: min(len(noise), n - s)]
        frames.flush()
        del frames
        episodes += int(first.sum())
        terminals += int(terminal.sum())
        global_row += n
    manifest = StoreManifest(
        game="Pong",
        source="synthetic-benchmark",
        num_transitions=rows,
        num_episodes=episodes,
        num_terminals=terminals,
        chunk_size=chunk,
        chunks=sizes,
        num_actions=6,
        complete=True,
        fields={k: {"dtype": d, "shape": list(s)} for k, (d, s) in FIELDS.items()},
    )
    write_manifest(path / MANIFEST, manifest.to_json())
    return path


def bench_sampling(args: argparse.Namespace) -> dict:
    path = synthetic_store(Path(args.workdir) / f"store_{args.rows}", args.rows)
    store = TransitionStore(path)
    results = {}
    for label, kwargs in {
        "full batch (K+1=6 obs, n-step bootstrap, goal)": {},
        "sequence only (K+1=6 obs)": {"n_step": 0, "goal_window": 0},
    }.items():
        sampler = SequenceSampler(store, batch_size=256, K=5, seed=0, **kwargs)
        for _ in range(3):  # warm the page cache for the touched pages
            sampler.sample()
        t0 = time.perf_counter()
        n = args.batches
        for _ in range(n):
            sampler.sample()
        results[label] = round(n / (time.perf_counter() - t0), 1)
    return {
        "bench": "sampling",
        "rows": args.rows,
        "batch": 256,
        "batches_per_s": results,
        "rss_mb": round(rss_mb()),
    }


def bench_memory(args: argparse.Namespace) -> dict:
    path = synthetic_store(Path(args.workdir) / f"sparse_{args.rows}", args.rows, sparse=True)
    before = rss_mb()
    t0 = time.perf_counter()
    store = TransitionStore(path)
    open_s = time.perf_counter() - t0
    after_open = rss_mb()
    sampler = SequenceSampler(store, batch_size=256, K=5, seed=0)
    peak = after_open
    t0 = time.perf_counter()
    for i in range(args.batches):
        sampler.sample()
        if i % 10 == 0:
            peak = max(peak, rss_mb())
    rate = args.batches / (time.perf_counter() - t0)
    peak = max(peak, rss_mb())
    return {
        "bench": "memory",
        "rows": args.rows,
        "frames_gb": round(args.rows * 84 * 84 / 1e9, 1),
        "open_s": round(open_s, 2),
        "rss_mb_before": round(before),
        "rss_mb_after_open": round(after_open),
        "rss_mb_peak_sampling": round(peak),
        "ru_maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "batches": args.batches,
        "batches_per_s": round(rate, 1),
    }


def bench_collect(args: argparse.Namespace) -> dict:
    from sgi_lab.data.collect import collect_random

    out = Path(args.workdir) / f"collect_{os.getpid()}"
    t0 = time.perf_counter()
    collect_random("pong", args.steps, out, seed=0, progress=False)
    elapsed = time.perf_counter() - t0
    import shutil

    shutil.rmtree(out)
    return {
        "bench": "collect",
        "steps": args.steps,
        "steps_per_s": round(args.steps / elapsed),
        "cores": 1,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=["sampling", "memory", "collect"])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--workdir", default="/tmp/sgi-bench")
    args = parser.parse_args()
    fn = {"sampling": bench_sampling, "memory": bench_memory, "collect": bench_collect}[args.what]
    print(json.dumps(fn(args)))


if __name__ == "__main__":
    main()
