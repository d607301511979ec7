"""Interleaved before/after timing of the finetuning update: this checkout against a git ref.

    python benchmarks/finetune_ab.py --base 8032bc1 --rounds 4

On a shared VM whose speed drifts by tens of percent from one minute to the next, two timings
taken minutes apart compare machine states, not code. This script checks the base ref out into a
temporary git worktree and, round after round, times the base's and this checkout's update in
fresh processes one right after the other, alternating which goes first (each process imports its own ``sgi_lab`` through
PYTHONPATH), so each round compares the two versions on the same machine state. It prints, per
round and version, the fastest and the median update, and the per-round ratio of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Run inside each version's checkout: time `train_step` of that version's own code.
CHILD = """
import json, statistics, sys, time
import torch
sys.path.insert(0, "benchmarks")
torch.set_num_threads({threads})
import sgi_lab
from finetune_speed import filled_agent
from sgi_lab.config import FinetuneConfig
from sgi_lab.train.finetune import train_step
agent = filled_agent(FinetuneConfig(encoder="{encoder}", steps=4_000, device="cpu"), rows=1_500)
batches = [agent.replay.sample(32, 0.4) for _ in range({updates} + 3)]
for batch in batches[:3]:
    train_step(agent, *batch)
times = []
for batch in batches[3:]:
    start = time.perf_counter()
    train_step(agent, *batch)
    times.append(time.perf_counter() - start)
print(json.dumps({{"sgi_lab": sgi_lab.__file__, "min": min(times), "median": statistics.median(times)}}))
"""


def time_version(checkout: Path, encoder: str, updates: int, threads: int) -> dict:
    code = CHILD.format(encoder=encoder, updates=updates, threads=threads)
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=checkout, env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(f"timing {checkout} failed:\n{out.stderr[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if not result["sgi_lab"].startswith(str(checkout)):  # the editable install won instead
        raise RuntimeError(f"{checkout} imported sgi_lab from {result['sgi_lab']}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="git ref to compare against")
    parser.add_argument("--encoders", nargs="+", default=["nature", "resnet"])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--updates", type=int, default=20, help="timed updates per process")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "-q", str(base), args.base], cwd=ROOT, check=True
        )
        try:
            for round_ in range(1, args.rounds + 1):
                for encoder in args.encoders:
                    row = {"round": round_, "encoder": encoder}
                    versions = [("base", base), ("now", ROOT)]
                    if round_ % 2 == 0:  # alternate which goes first
                        versions.reverse()
                    for name, checkout in versions:
                        timing = time_version(checkout, encoder, args.updates, args.threads)
                        row[f"{name}_min_s"] = round(timing["min"], 4)
                        row[f"{name}_median_s"] = round(timing["median"], 4)
                    row["median_ratio"] = round(row["now_median_s"] / row["base_median_s"], 3)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT)
    for encoder in args.encoders:
        mine = [r for r in rows if r["encoder"] == encoder]
        summary = {
            "encoder": encoder,
            "base_fastest_s": min(r["base_min_s"] for r in mine),
            "now_fastest_s": min(r["now_min_s"] for r in mine),
            "median_ratios": [r["median_ratio"] for r in mine],
        }
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
