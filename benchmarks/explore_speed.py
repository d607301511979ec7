"""Collection speed of the IDF curiosity agent (``sgi_lab.exploratory.collector``): agent steps/s
with learning, Burda et al.'s networks and rollouts, at a few env counts; projects a 6M-step run.

    .venv/bin/python benchmarks/explore_speed.py --game breakout --envs 4 8 --updates 3

Steps/s is read from the agent's ``metrics.jsonl`` (env steps + PPO updates between two
updates; the first update, which includes start-up, is dropped). Stores go to a temp folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

from sgi_lab.base.files import cpu_model
from sgi_lab.config import ExploreConfig
from sgi_lab.exploratory.collector import collect_exploratory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="breakout")
    parser.add_argument("--envs", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--updates", type=int, default=3, help="timed PPO updates per setting")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--sync", action="store_true", help="envs in this process")
    args = parser.parse_args()
    rows = []
    for envs in args.envs:
        config = dataclasses.replace(
            ExploreConfig(),
            num_envs=envs,
            device=args.device,
            threads=args.threads,
            asynchronous=not args.sync,
            checkpoint_every=10_000,
        )
        steps = envs * config.rollout_steps * (args.updates + 1) + 1
        with tempfile.TemporaryDirectory() as tmp:
            collect_exploratory(args.game, steps, Path(tmp) / "s", config=config, progress=False)
            metrics = [json.loads(x) for x in (Path(tmp) / "s/agent/metrics.jsonl").open()]
        sps = [m["charts/sps"] for m in metrics[1:]]
        mean = sum(sps) / len(sps)
        rows.append(
            {"envs": envs, "steps_per_s": round(mean, 1), "hours_6M": round(6e6 / mean / 3600, 1)}
        )
        print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"cpu": cpu_model(), "device": args.device, "game": args.game, "rows": rows}))


if __name__ == "__main__":
    main()
