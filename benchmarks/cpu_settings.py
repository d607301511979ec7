"""Is the automatic CPU choice (`sgi_lab.runtime.cpu_settings`) within 5% of the best setting?

    python benchmarks/cpu_settings.py [--encoders nature resnet] [--rounds 4] [--threads 2]

For each workload (a finetuning update of one agent at batch 32, a pretraining step at batch
64), first lets ``"auto"`` choose as a run would (a fresh cache, its short measurement), then
times all four settings (bf16 x channels-last) interleaved over ``--rounds`` rounds, the fastest
of three steps each round, and reports the median per setting and how far the automatic choice
lies from the best. Write the CPU model beside the figures (the script prints it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from sgi_lab.base.files import cpu_model
from sgi_lab.config import FinetuneConfig, PretrainConfig, build_config
from sgi_lab.runtime.cpu_settings import settle
from sgi_lab.train.transfer import model_args_for
from sgi_lab.train.update import measure_update

SETTINGS = [(b, c) for b in (False, True) for c in (False, True)]


def finetune_workload(encoder: str):
    config = build_config(FinetuneConfig, {"encoder": encoder})
    args = [model_args_for(config, 6)]

    def measure(bf16: bool, channels_last: bool) -> float:
        return measure_update([config], args, bf16, channels_last, warmup=1, repeats=3)

    return config, f"finetune-update/{encoder}/bench", measure


def pretrain_workload(encoder: str, store: Path):
    from sgi_lab.data import TransitionStore
    from sgi_lab.train.pretrain_step import measure_step

    config = build_config(PretrainConfig, {"encoder": encoder, "batch_size": 64, "prefetch": 0})
    data = TransitionStore(store)

    def measure(bf16: bool, channels_last: bool) -> float:
        return measure_step(config, data, torch.device("cpu"), bf16, channels_last)

    return config, f"pretrain-step/{encoder}/bench", measure


def evaluate(config, workload, measure, rounds: int, cache: Path) -> dict:
    settled, choice = settle(config, torch.device("cpu"), workload, measure, cache)
    times = {s: [] for s in SETTINGS}
    for _ in range(rounds):
        for s in SETTINGS:
            times[s].append(measure(*s))
    medians = {s: statistics.median(v) for s, v in times.items()}
    best = min(medians.values())
    chosen = medians[(settled.cpu_amp, settled.channels_last)]
    return {
        "workload": workload,
        "auto": {"bf16": settled.cpu_amp, "channels_last": settled.channels_last},
        "medians_s": {f"bf16={b},channels_last={c}": t for (b, c), t in medians.items()},
        "auto_vs_best": chosen / best,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoders", nargs="+", default=["nature"])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--jobs", nargs="+", default=["finetune", "pretrain"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(json.dumps({"cpu": cpu_model(), "threads": args.threads, "torch": torch.__version__}))
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cpu.json"
        store = None
        if "pretrain" in args.jobs:
            from sgi_lab.data.collect import collect_random

            store = collect_random("Pong", 2_000, Path(tmp) / "store", progress=False).path
        for encoder in args.encoders:
            for job in args.jobs:
                if job == "finetune":
                    workload = finetune_workload(encoder)
                else:
                    workload = pretrain_workload(encoder, store)
                print(json.dumps(evaluate(*workload, args.rounds, cache)))


if __name__ == "__main__":
    main()
