"""Probe speed (``sgi_lab.probes``): one frozen encoder on one game's store, features plus every
probe (AtariARI state variables, reward; the action probe where the data are not Random).

    .venv/bin/python benchmarks/probe_speed.py --game pong --frames 50000
    .venv/bin/python benchmarks/probe_speed.py --data outputs/data/pong_random --frames 50000

Without ``--data`` a Random store of ``--frames`` steps (with RAM) is collected into a temp folder
first (not timed). The encoder is a random Nature CNN (``--encoder``): its weights do not change
the time. Prints one JSON row: seconds per phase, frames/s, the CPU time (over the torch threads:
about the wall time on an idle machine), the CPU model and the load average (this machine is
shared: a loaded CPU reads slower).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch

from sgi_lab.analysis.probe_encoders import random_probe_encoder
from sgi_lab.base.files import cpu_model
from sgi_lab.data import TransitionStore
from sgi_lab.data.collect import collect_random
from sgi_lab.probes import probe_encoder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="pong")
    parser.add_argument("--frames", type=int, default=50_000, help="rows probed")
    parser.add_argument("--data", type=Path, default=None, help="a store with RAM to probe")
    parser.add_argument("--encoder", default="nature")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--random-baseline", action="store_true", help="time it too")
    parser.add_argument("--json", type=Path, default=None, help="also write the row here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        if args.data is None:
            store = collect_random(args.game, args.frames, Path(tmp) / "store", progress=False)
        else:
            store = TransitionStore(args.data)
        encoder = random_probe_encoder(Path(tmp) / "probe", store.num_actions, args.encoder)
        load = os.getloadavg()[0]
        cpu_started = time.process_time()
        started = time.perf_counter()
        result = probe_encoder(
            encoder,
            store,
            max_frames=args.frames,
            random_baseline_seed=1 if args.random_baseline else None,
            progress=False,
        )
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
    frames = sum(result["split"]["rows"].values()) + result["split"]["test_duplicates_removed"]
    row = {
        "game": store.game,
        "encoder": args.encoder,
        "frames": frames,
        "variables": len(result["variables"]),
        "seconds": result["seconds"],
        "wall_s": round(wall, 1),
        "frames_per_s": round(frames / wall, 1),
        # CPU time over the threads: about the wall time on an otherwise idle machine.
        "cpu_s": round(cpu, 1),
        "cpu_s_per_thread": round(cpu / torch.get_num_threads(), 1),
        "overall_f1": round(result["overall"], 3),
        "torch_threads": torch.get_num_threads(),
        "cpu": cpu_model(),
        "load_average_1min_before": round(load, 2),
        "load_average_1min_after": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(row, indent=2))
    if args.json:
        args.json.write_text(json.dumps(row, indent=2) + "\n")


if __name__ == "__main__":
    main()
