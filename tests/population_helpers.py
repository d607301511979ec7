"""Shared helpers of the population tests (tests/train, tests/runtime): tiny configs, a
population of fresh models, fake batches and replay rows."""

from __future__ import annotations

import numpy as np
import torch

from sgi_lab.config import FinetuneConfig, build_config
from sgi_lab.data.sampler import SequenceBatch
from sgi_lab.nets import SGIModel
from sgi_lab.train.population import Population
from sgi_lab.train.transfer import model_args_for

TINY = {
    "batch_size": 4,
    "spr_steps": 2,
    "n_step": 3,
    "cpu_amp": False,
    "channels_last": False,
}


def make_config(seed=0, game="Pong", **overrides) -> FinetuneConfig:
    return build_config(FinetuneConfig, {**TINY, "seed": seed, "game": game, **overrides})


def fresh_model(config: FinetuneConfig, num_actions: int) -> SGIModel:
    torch.manual_seed(config.seed)
    return SGIModel(**model_args_for(config, num_actions))


def population(configs, actions, device="cpu") -> Population:
    models = [fresh_model(c, a) for c, a in zip(configs, actions, strict=True)]
    return Population.build(configs, models, loaded=(), device=device)


def fake_batch(config: FinetuneConfig, num_actions: int, seed: int) -> SequenceBatch:
    rng = np.random.default_rng(seed)
    B, T = config.batch_size, config.spr_steps + 1
    valid = np.ones((B, T), bool)
    valid[0, -1] = False  # an episode end inside the sequence
    return SequenceBatch(
        obs=rng.integers(0, 255, (B, T, 4, 84, 84), dtype=np.uint8),
        actions=rng.integers(0, num_actions, (B, T)).astype(np.int64),
        rewards=rng.random((B, T)).astype(np.float32),
        valid=valid,
        terminals=np.zeros((B, T), bool),
        returns=rng.normal(size=B).astype(np.float32),
        bootstrap_obs=rng.integers(0, 255, (B, 4, 84, 84), dtype=np.uint8),
        bootstrap_discount=np.full(B, 0.97, np.float32),
        goal_obs=rng.integers(0, 255, (B, 4, 84, 84), dtype=np.uint8),
        goal_offset=np.ones(B, np.int64),
        indices=np.arange(B),
    )


def append_random_row(
    replay, rng, first: bool = False, first_prob: float = 0.0, terminal_prob: float = 0.05
) -> None:
    """One random row for every agent of a `PopulationReplay` (6 actions)."""
    n = replay.num_agents
    replay.append(
        rng.integers(0, 255, (n, 84, 84), dtype=np.uint8),
        rng.integers(0, 6, n),
        rng.normal(size=n).astype(np.float32),
        rng.random(n) < terminal_prob,
        np.full(n, first) | (rng.random(n) < first_prob),
    )


def clone_state(pop: Population, i: int) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in pop.agent_state(i).items()}


LOOP = [
    "--set", "steps=40", "--set", "learning_starts=20", "--set", "eps_steps=21",
    "--set", "log_every=10", "--set", "checkpoint_every=20", "--set", "batch_size=4",
    "--set", "eval_episodes=1", "--set", "eval_envs=1", "--set", "eval_max_frames=200",
]  # fmt: skip
