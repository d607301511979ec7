"""A trained finetuning agent as a collector's policy (``sgi-lab collect agent``).

A Random policy loses MinAtar Breakout's ball within a few steps, so a Random store's states
barely vary and a probe's de-duplicated test split stays under 100 rows; an agent that keeps the
ball in play visits many more. `collect_with_agent` plays a finetuning run's model (its
``model.pt``, or a checkpoint) through the Random data's own collector,
`sgi_lab.data.collect.collect`, so a MinAtar store records the game's state (``labels``) and an
Atari store the RAM exactly as a Random store does.

The agent acts as the finetuning evaluation acts (`sgi_lab.train.evaluate`, whose functions it
calls): greedy on noise-free Q values with batch norm on running statistics, epsilon-greedy with
the evaluation's own draws (one uniform, then one random action, every step, from a generator
seeded with the collection's seed), in the environment options the run trained with. Epsilon
defaults to 0.05 rather than the evaluation's 0.001 so that the states vary. The store's
manifest records the policy under ``params["policy"]``: the file, its SHA-256, its kind, the
training step, the game, the run's name and epsilon; resuming or re-running with another file
or epsilon is refused like any other change of settings.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sgi_lab.base.errors import SgiLabError
from sgi_lab.data.collect import collect
from sgi_lab.data.store import TransitionStore
from sgi_lab.envs import canonical_env_game, env_protocol, is_minatar, num_actions
from sgi_lab.envs import observation_spec as game_observation_spec
from sgi_lab.nets import SGIModel
from sgi_lab.runs.checkpoints import load_checkpoint
from sgi_lab.runs.folder import RunDir
from sgi_lab.runs.status import file_sha256

# The evaluation's own acting (greedy, noise-free, its epsilon draws) and the env options a run
# trained with: one way for a trained agent to act, not a second copy of it.
from sgi_lab.train.evaluate import (
    _epsilon_greedy,
    _model_policy,
    _noise_free,
    _recorded_env_options,
)

__all__ = [
    "DEFAULT_POLICY_EPS",
    "AgentPolicy",
    "AgentPolicyError",
    "collect_with_agent",
    "load_agent",
]

DEFAULT_POLICY_EPS = 0.05
"""Epsilon of ``sgi-lab collect agent``: enough random actions that the agent's states vary."""

POLICY_KINDS = ("finetuned_model", "finetune")
"""Checkpoint kinds that hold a trained Q head: a finetuning run's model.pt and checkpoints."""


class AgentPolicyError(SgiLabError, ValueError):
    """A policy file that cannot act in the collection asked for (one line, naming it)."""


def load_agent(source: str | os.PathLike) -> tuple[SGIModel, dict[str, Any]]:
    """A finetuning agent's model and what the manifest records of it.

    Args:
        source: a finetuning run folder (its ``model.pt``, else its newest checkpoint) or a
            model/checkpoint file of one. Loaded with ``weights_only=True``.

    Returns:
        (the model in eval mode on the CPU, ``{"file", "sha256", "kind", "step", "game",
        "run"}`` plus the run's ``config`` under ``"config"``, which the caller leaves out of
        the manifest).

    Raises:
        AgentPolicyError: no such path, a folder without a model, a pretraining file (its Q head
            never learned the game).
        CheckpointError: a truncated or foreign file.
    """
    file = _policy_file(Path(source))
    payload = load_checkpoint(file, "cpu")
    kind = payload.get("kind")
    if kind not in POLICY_KINDS or not isinstance(payload.get("model_args"), dict):
        raise AgentPolicyError(
            f"{file}: a {kind!r} file, not a trained agent; collect with a finetuning run "
            "(its model.pt or a checkpoint): only its Q head has learned to play"
        )
    model = SGIModel(**payload["model_args"])
    model.load_state_dict(payload["model"])
    config = payload.get("config") if isinstance(payload.get("config"), dict) else {}
    run = file.parent.parent if file.parent.name == "checkpoints" else file.parent
    info = {
        "file": str(file),
        "sha256": file_sha256(file),
        "kind": kind,
        "step": payload.get("step"),
        "game": payload.get("game") or config.get("game"),
        "run": run.name,
    }
    return model.eval(), {**info, "config": config}


def _policy_file(path: Path) -> Path:
    """The file a policy source names: itself, or a run folder's model.pt / newest checkpoint."""
    if not path.exists():
        raise AgentPolicyError(f"{path}: no such finetuning run folder or model/checkpoint file")
    if not path.is_dir():
        return path
    if (path / "model.pt").is_file():
        return path / "model.pt"
    newest = RunDir(path).latest_checkpoint()
    if newest is None:
        raise AgentPolicyError(
            f"{path}: no model.pt and no checkpoints/ckpt_*.pt: not a finetuning run folder"
        )
    return newest


class AgentPolicy:
    """``policy(obs) -> action`` of a trained agent, as the finetuning evaluation acts.

    Each call draws, from its own generator and in this order, one uniform (random action below
    ``eps``) and one random action, as `sgi_lab.train.evaluate` does for each environment; the
    greedy action is the model's argmax of noise-free Q values. Use it inside the evaluation's
    ``_noise_free(model)`` (as `collect_with_agent` does): eval mode, noise off.

    Args:
        model: the agent.
        eps: probability of a uniformly random action.
        seed: seed of the epsilon draws.
    """

    def __init__(self, model: SGIModel, eps: float = DEFAULT_POLICY_EPS, seed: int = 0) -> None:
        if not 0.0 <= eps <= 1.0:
            raise AgentPolicyError(f"eps: must lie in [0, 1], got {eps}")
        self.num_actions = int(model.num_actions)
        self.eps = float(eps)
        self.rng = np.random.default_rng(seed)
        self._greedy = _model_policy(model, torch.device("cpu"), amp=False)
        self._active = np.ones((1, 1), bool)

    def __call__(self, obs: np.ndarray) -> int:
        actions = _epsilon_greedy(
            self._greedy, obs[None, None], self._active, [self.rng], [self.num_actions], self.eps
        )
        return int(actions[0, 0])

    def state_dict(self) -> dict[str, Any]:
        """The epsilon draws' stream (JSON), saved with each finished chunk (resume)."""
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]


def check_agent_fits(
    model: SGIModel,
    info: dict[str, Any],
    game: str,
    full_action_space: bool,
    env_options: dict[str, Any],
) -> None:
    """Refuse an agent that cannot act in ``game``'s collection: trained on another game, on
    another action set, or on observations of another shape.

    Raises:
        AgentPolicyError: naming the file and what differs.
    """
    file, trained = info["file"], info["game"]
    if trained is not None and canonical_env_game(trained) != game:
        raise AgentPolicyError(
            f"{file}: an agent of {canonical_env_game(trained)}, not of {game}: collect "
            f"--game {canonical_env_game(trained)}, or give an agent trained on {game}"
        )
    actions = num_actions(game, full_action_space=full_action_space)
    if model.num_actions != actions:
        flag = "without" if full_action_space else "with"
        raise AgentPolicyError(
            f"{file}: the agent chooses among {model.num_actions} actions, {game}'s collection "
            f"among {actions} (try {flag} --full-action-space)"
        )
    minatar = {k: env_options[k] for k in ("frames", "channels") if k in env_options}
    shape = tuple(game_observation_spec(game, **minatar).stacked_shape)
    args = model.init_args
    wanted = (int(args["in_channels"]), int(args["image_size"]), int(args["image_size"]))
    if shape != wanted:
        raise AgentPolicyError(
            f"{file}: the agent reads observations of shape {wanted}, {game}'s are {shape}"
        )


def collect_with_agent(
    source: str | os.PathLike,
    game: str,
    steps: int,
    out: str | os.PathLike,
    *,
    eps: float = DEFAULT_POLICY_EPS,
    seed: int = 0,
    env_protocol_name: str | None = None,
    full_action_space: bool = False,
    **kwargs: Any,
) -> TransitionStore:
    """Collect ``steps`` transitions of ``game`` played by a trained agent into a store at ``out``.

    Args:
        source: a finetuning run folder or its model/checkpoint file (`load_agent`).
        game: the game to play (the agent's own; any spelling).
        steps: transitions to write.
        out: store folder (resumable, as `sgi_lab.data.collect.collect`).
        eps: epsilon of the epsilon-greedy policy (`DEFAULT_POLICY_EPS`).
        seed: environment seed (chunk ``k`` starts from a reset seeded ``seed + k``) and the
            seed of the epsilon draws.
        env_protocol_name: an Atari game's env; default the run's own (a MinAtar game plays
            ``"minatar"``). Another than the run's is refused.
        full_action_space: the action set (must be the agent's).
        **kwargs: more of `sgi_lab.data.collect.collect` (``chunk_size``, ``overwrite``,
            ``resume``, ``progress``, ``terminal_on_life_loss``).

    Returns:
        The finished store: source ``"agent"``, the policy in ``params["policy"]``.

    Raises:
        AgentPolicyError: an agent of another game, action set or observation shape, a
            pretraining file, no such file; or another env protocol than the run's.
    """
    game = canonical_env_game(game)
    model, info = load_agent(source)
    config = info.pop("config")
    env_options = _recorded_env_options(game, config)
    check_agent_fits(model, info, game, full_action_space, env_options)
    protocol = _agent_protocol(game, config, env_protocol_name, info["file"])
    policy = AgentPolicy(model, eps, seed)
    record = {"policy": {**info, "eps": float(eps)}}
    with _noise_free(model):
        return collect(
            policy,
            game,
            steps,
            out,
            seed=seed,
            source="agent",
            params=record,
            full_action_space=full_action_space,
            env_protocol=protocol,
            env_kwargs=env_options or None,
            **kwargs,
        )


def _agent_protocol(game: str, config: dict[str, Any], asked: str | None, file: str) -> str:
    """The env a collection with this agent plays: the run's own (a MinAtar game's is
    ``"minatar"``); another one asked for is refused (its frames would not be the agent's)."""
    trained = env_protocol(game, config.get("env_protocol") or "dopamine")
    if is_minatar(game) or asked is None:
        return trained
    if asked != trained:
        raise AgentPolicyError(
            f"{file}: the agent played the {trained!r} env, the collection asks for {asked!r}"
        )
    return asked
