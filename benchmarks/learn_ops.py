"""Operators dispatched by one population learn step and one acting step, by phase.

Every computing ATen operator (views excluded) is a kernel launch on a GPU wherever nothing is
captured in a graph, so the count is the launch floor of the GPU path; counted by a dispatch
mode (`sgi_lab.runtime.graphs.OpCounter`), it is exact and the same on any machine and under any
load. The population is built as on a GPU (``population_batching: vmap``), with the replay's
sampling as on a GPU (``prefix``) or as the CPU default (``tree``); the learn step is
`sgi_lab.train.update.learn_step` split into the replay's sample, the update (inputs: draws and
augmentation; forward: losses under vmap; backward; clip; SPR EMA; Adam; the rest: noise copy
and stats) and the priority write; acting is `sgi_lab.train.acting.acting_actions`.

    python benchmarks/learn_ops.py                                 # Nature N=26, MinAtar N=16
    python benchmarks/learn_ops.py --cases minatar:16 --batch-size 32 --top 25 --json ops.json

Counts do not depend on the batch size (checked by `--check-batch`), so the default batch is
small to keep Nature's N = 26 within a laptop's memory; the replay's capacity only changes the
``tree`` walk's depth (17 levels at Atari 100k's capacity: `benchmarks/sum_tree_ops.py`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import torch

import sgi_lab.train.population_steps as steps_module
import sgi_lab.train.update as update_module
from sgi_lab.config import FinetuneConfig, build_config, read_params
from sgi_lab.data.population_replay import PopulationReplay
from sgi_lab.envs.games import ATARI_100K_GAMES
from sgi_lab.nets import SGIModel
from sgi_lab.runtime.graphs import OpCounter
from sgi_lab.train.acting import acting_actions
from sgi_lab.train.population import Population
from sgi_lab.train.transfer import model_args_for

MINATAR_GAMES = ("minatar/breakout", "minatar/asterix")  # 4 channels each: one population
UPDATE_PHASES = ("inputs", "forward", "backward", "clip", "spr_ema", "adam")


def build(case: str, agents: int, batch_size: int, sampling: str, rows: int) -> tuple:
    """A vmap'd population of ``agents`` and a replay of random rows, on the CPU."""
    if case == "minatar":
        base = read_params(Path(__file__).parents[1] / "params/finetune/minatar_none.yaml")
        games = [MINATAR_GAMES[i % 2] for i in range(agents)]
        actions = [6] * agents
    else:
        base = {"config": {"encoder": case}}
        games = [list(ATARI_100K_GAMES)[i % len(ATARI_100K_GAMES)] for i in range(agents)]
        actions = [18] * agents  # the width every agent's noise is drawn at; counts alike
    configs = [
        build_config(
            FinetuneConfig,
            {
                **base["config"],
                "game": g,
                "seed": i,
                "batch_size": batch_size,
                "population_batching": "vmap",
                "pretrained": None,
                "device": "cpu",
                "cpu_amp": False,
            },
        )
        for i, g in enumerate(games)
    ]
    models = []
    for c, a in zip(configs, actions, strict=True):
        torch.manual_seed(c.seed)
        models.append(SGIModel(**model_args_for(c, a)))
    pop = Population.build(configs, models, loaded=(), device="cpu")
    cfg = pop.config
    replay = PopulationReplay(
        agents,
        rows,
        alpha=cfg.priority_alpha,
        K=cfg.rollout_steps,
        n_step=cfg.n_step,
        gamma=cfg.gamma,
        seeds=[c.seed for c in configs],
        goal_window=cfg.goal_window if cfg.uses_goal_rl else 0,
        spec=cfg.observation_spec,
        sampling=sampling,
    )
    rng = np.random.default_rng(0)
    for t in range(rows):
        replay.append(
            rng.integers(
                0,
                255 if case != "minatar" else 2,
                (agents, *cfg.observation_spec.frame_shape),
                dtype=np.uint8,
            ),
            rng.integers(0, 4, agents),
            rng.integers(-1, 2, agents).astype(np.float32),
            rng.random(agents) < 0.002,
            np.full(agents, t == 0),
        )
    pop.host_checks = replay.tree.host_checks = False  # as on a GPU: no host checks
    pop.lean_kernels = True  # and fewer operators for more FLOPs (`update.lean_kernels`)
    return pop, replay


def labelled(counter: OpCounter, name: str, fn: Any) -> Any:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with counter.phase(name):
            return fn(*args, **kwargs)

    return wrapped


def count_learn_step(pop: Population, replay: PopulationReplay, views: bool = False) -> OpCounter:
    """One `learn_step`, its operators counted by phase (the library's functions wrapped
    with labels for the count only); ``views``: every dispatch, views included."""
    counter = OpCounter(views)
    replay.set_beta(0.4)
    with ExitStack() as undo:

        def patch(owner: Any, attr: str, label: str) -> None:
            original = getattr(owner, attr)
            setattr(owner, attr, labelled(counter, label, original))
            undo.callback(setattr, owner, attr, original)

        patch(replay, "sample_at_beta", "sample")
        patch(replay, "update_priorities", "priorities")
        patch(update_module, "update_inputs", "update/inputs")
        patch(torch.autograd, "backward", "update/backward")
        patch(steps_module, "clip_gradients", "update/clip")
        patch(steps_module, "update_spr_target", "update/spr_ema")
        patch(steps_module, "step_optimizer", "update/adam")
        batched = pop.batched
        pop.batched = lambda fn: labelled(counter, "update/forward", batched(fn))
        undo.callback(delattr, pop, "batched")
        original_update = update_module.update
        update_module.update = labelled(counter, "update/rest", original_update)
        undo.callback(setattr, update_module, "update", original_update)
        with counter:
            update_module.learn_step(pop, replay)
    return counter


def count_act(pop: Population) -> OpCounter:
    counter = OpCounter()
    x = torch.zeros(pop.size, *pop.config.observation_spec.stacked_shape, dtype=torch.uint8)
    with counter, counter.phase("act"):
        acting_actions(pop, x)
    return counter


def measure(case: str, agents: int, batch_size: int, sampling: str, rows: int, top: int) -> dict:
    pop, replay = build(case, agents, batch_size, sampling, rows)
    update_module.learn_step(pop, replay)  # warm: lazy state (optimizer moments) built
    learn = count_learn_step(pop, replay)
    act = count_act(pop)
    dispatches = count_learn_step(pop, replay, views=True).totals()
    phases = learn.totals()
    update = {p: phases.get(f"update/{p}", 0) for p in (*UPDATE_PHASES, "rest")}
    every = Counter()
    for c in learn.counts.values():
        every.update(c)
    return {
        "case": case,
        "agents": agents,
        "batch_size": batch_size,
        "sampling": sampling,
        "capacity": rows,
        "sample": phases.get("sample", 0),
        "update": sum(update.values()),
        "update_parts": update,
        "priorities": phases.get("priorities", 0),
        "learn": sum(phases.values()),
        "act": act.totals().get("act", 0),
        "dispatches": {
            "learn": sum(dispatches.values()),
            "update": sum(v for k, v in dispatches.items() if k.startswith("update/")),
        },
        "top": every.most_common(top),
    }


def show(row: dict) -> str:
    parts = ", ".join(f"{k} {v}" for k, v in row["update_parts"].items())
    return (
        f"{row['case']:7s} N={row['agents']:3d} {row['sampling']:6s} learn {row['learn']:5d} = "
        f"sample {row['sample']} + update {row['update']} ({parts}) + priorities "
        f"{row['priorities']} | act {row['act']} | with views: learn "
        f"{row['dispatches']['learn']}, update {row['dispatches']['update']}"
    )


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases",
        nargs="+",
        default=["nature:26", "minatar:16"],
        help="ENCODER:AGENTS (nature, resnet, minatar)",
    )
    parser.add_argument("--sampling", nargs="+", default=["prefix", "tree"])
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--rows", type=int, default=300, help="replay rows (its capacity)")
    parser.add_argument("--top", type=int, default=25, help="most dispatched operators kept")
    parser.add_argument(
        "--check-batch",
        type=int,
        default=None,
        help="also count at this batch size and fail if any count differs",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for case in args.cases:
        encoder, _, n = case.partition(":")
        for sampling in args.sampling:
            row = measure(encoder, int(n or 1), args.batch_size, sampling, args.rows, args.top)
            print(show(row), flush=True)
            if args.check_batch:
                other = measure(encoder, int(n or 1), args.check_batch, sampling, args.rows, 0)
                keys = ("sample", "update_parts", "priorities", "act")
                if any(row[k] != other[k] for k in keys):
                    sys.exit(f"counts differ at batch {args.check_batch}: {show(other)}")
            rows.append(row)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
