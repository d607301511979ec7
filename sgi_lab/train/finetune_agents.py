"""A finetuning population's agents and how the population is built: fresh, from pretrained
models, or resumed from the agents' checkpoints (all at the newest step every agent has).

`AgentRun` is what the environment loop (`sgi_lab.train.finetune`) keeps per agent besides the
learner and the replay; `prepare_agents` reads each agent's checkpoint or pretrained model,
`build_population` makes the batched learner (`sgi_lab.train.population.Population`) and the agents'
replays and restores a resumed population's state; `save_checkpoint` writes one agent's.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Any

import numpy as np
import torch

from sgi_lab.base.files import atomic_write_text, raise_if_disk_full
from sgi_lab.config import ConfigError, FinetuneConfig, to_dict
from sgi_lab.data.population_replay import PopulationReplay
from sgi_lab.envs import canonical_env_game
from sgi_lab.envs import num_actions as game_actions
from sgi_lab.nets import SGIModel
from sgi_lab.runs.checkpoints import CheckpointError, load_checkpoint, restore_generator
from sgi_lab.runs.folder import FinetuneRun
from sgi_lab.runtime.cpu_settings import settle
from sgi_lab.runtime.device import tf32_settings
from sgi_lab.train.population import Population
from sgi_lab.train.precision import update_precision
from sgi_lab.train.sgi_loss import finetuning_settings, loss_weights_note
from sgi_lab.train.transfer import (
    Pretrained,
    Transfer,
    load_pretrained,
    model_args_for,
    transfer_pretrained,
)
from sgi_lab.train.update import lean_kernels, measure_update

__all__ = ["AgentRun", "build_population", "prepare_agents", "save_checkpoint", "write_transfer"]

log = logging.getLogger("sgi_lab.finetune")


class AgentRun:
    """What the loop keeps per agent besides the learner and the replay: run folder, epsilon
    draws, episode statistics, metrics."""

    def __init__(self, config: FinetuneConfig, run: FinetuneRun) -> None:
        self.config = config
        self.game = config.game
        self.run = run
        self.rng = np.random.default_rng(config.seed)
        self.checkpoint: dict[str, Any] | None = None
        self.pretrained: Pretrained | None = None
        self.transfer = Transfer()
        self.model_args: dict[str, Any] = {}
        self.first = True
        self.ep_return = self.ep_clipped = 0.0
        self.ep_length = 0
        self.metrics = None
        self.pending: list[str] = []
        self.cpu_choice: dict[str, Any] = {}

    def record(self, raw: float, clipped: float, ended: bool) -> dict[str, Any]:
        """One environment step's reward (raw and clipped); at the end of an episode, the
        episode's metrics as a row (else an empty one)."""
        self.first = False
        self.ep_return += raw
        self.ep_clipped += clipped
        self.ep_length += 1
        if not ended:
            return {}
        row = {
            "episode/return": self.ep_return,
            "episode/clipped_return": self.ep_clipped,
            "episode/length": self.ep_length,
        }
        self.first = True
        self.ep_return = self.ep_clipped = 0.0
        self.ep_length = 0
        return row

    def log(self, message: str, *args: Any) -> None:
        """Log a line, and write it to the run's log.txt once the run has started (lines logged
        while its inputs are checked wait, so a run that fails its checks leaves nothing)."""
        text = message % args if args else message
        log.info("%s: %s", self.run.path, text)
        self.pending.append(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")
        if self.run.started:
            try:
                with open(self.run.path / "log.txt", "a") as fh:
                    fh.writelines(self.pending)
            except OSError as exc:
                raise_if_disk_full(exc, self.run.path / "log.txt")
                raise
            self.pending.clear()


def prepare_agents(agents: list[AgentRun]) -> int:
    """Read each agent's checkpoint (at the newest step all agents have one for) or pretrained
    model and set its model arguments; returns the step the population starts at."""
    found = [{int(p.name[5:13]): p for p in a.run.checkpoints()} for a in agents]
    resumed = [bool(f) for f in found]
    if any(resumed) and not all(resumed):
        fresh = [str(a.run.path) for a, r in zip(agents, resumed, strict=True) if not r]
        raise ConfigError(
            "some agents of this population have checkpoints and others do not "
            f"({', '.join(fresh)} would start at step 0): a population trains in lockstep, "
            "so run those agents as their own population"
        )
    if all(resumed):
        common = sorted(set.intersection(*(set(f) for f in found)), reverse=True)
        errors: list[str] = []
        for step in common:  # newest first; a kill mid-checkpoint leaves an older full set
            try:
                ckpts = [load_checkpoint(f[step], "cpu", kind="finetune") for f in found]
            except CheckpointError as exc:
                errors.append(str(exc))
                continue
            for a, ckpt in zip(agents, ckpts, strict=True):
                a.checkpoint = ckpt
                a.model_args = dict(ckpt["model_args"])
                a.transfer = Transfer(loaded=tuple(ckpt["transfer_loaded"]))
                if errors:
                    a.log("newest checkpoints unreadable (%s); resuming at step %d", errors, step)
            return step
        raise CheckpointError(
            "the agents' checkpoints share no readable step"
            + (f" ({'; '.join(errors)})" if errors else "")
            + "; resume them as separate populations, or start over with --overwrite"
        )
    for a in agents:
        if a.config.pretrained_values != "loaded" and not a.config.pretrained:
            raise ConfigError(
                f"pretrained_values: {a.config.pretrained_values!r} needs a pretrained run (its "
                "tensors' names and learning-rate groups); this agent has none"
            )
        if a.config.pretrained:
            a.pretrained = load_pretrained(a.config.pretrained)
            a.log(
                "pretrained model: %s (step %d, game %s)",
                a.pretrained.path,
                a.pretrained.step,
                a.pretrained.game,
            )
            if a.pretrained.game and canonical_env_game(a.pretrained.game) != a.game:
                a.log("warning: pretrained on %s, finetuning on %s", a.pretrained.game, a.game)
        a.model_args = model_args_for(a.config, game_actions(a.game), a.pretrained)
    return 0


def build_population(
    agents: list[AgentRun], device: torch.device
) -> tuple[Population, PopulationReplay]:
    """The agents' batched learner and replays on ``device``, a resumed population's state
    restored (``prepare_agents`` first)."""
    models = [agent_model(a) for a in agents]
    settle_cpu_settings(agents, device)
    # Each agent's own loaded tensors: pretrained and fresh agents train side by side, each
    # at its own learning rates (Population.lr_factors).
    population = Population.build(
        [a.config for a in agents],
        models,
        loaded=[a.transfer.loaded for a in agents],
        device=device,
    )
    replay = population_replay(population, agents)
    for i, a in enumerate(agents):
        a.log(loss_weights_note(finetuning_settings(a.config)))  # what multiplies each term
        if a.checkpoint is None:
            start_spr_target(a, i, population)
        else:
            restore_agent(a, i, population, replay)
    return population, replay


def agent_model(a: AgentRun) -> SGIModel:
    """Agent ``a``'s online network: from its checkpoint, its pretrained model (recording the
    transfer) or fresh, seeded by its config."""
    torch.manual_seed(a.config.seed)
    model = SGIModel(**a.model_args)
    if a.checkpoint is not None:
        model.load_state_dict(a.checkpoint["model"])
    elif a.pretrained is not None:
        a.transfer = transfer_pretrained(model, a.pretrained, a.config.pretrained_values)
    else:
        a.transfer = Transfer(loaded=(), fresh=tuple(model.state_dict()))
    if a.config.scheme == "frozen" and not a.transfer.loaded:
        a.log("warning: scheme 'frozen' without a pretrained model freezes a random encoder")
    return model


def settle_cpu_settings(agents: list[AgentRun], device: torch.device) -> None:
    """ "auto" CPU precision and layout: the fastest measured on this machine for this
    workload, written into every agent's config."""
    first = agents[0].config
    workload = (
        f"finetune-update/{first.encoder}/ssl={first.ssl}/agents={len(agents)}"
        f"/batch={first.batch_size}/K={first.spr_steps}"
    )
    configs, args = [a.config for a in agents], [a.model_args for a in agents]
    _, choice = settle(
        first, device, workload, lambda bf16, cl: measure_update(configs, args, bf16, cl)
    )
    for a in agents:
        a.config = dataclasses.replace(
            a.config, cpu_amp=choice.bf16, channels_last=choice.channels_last
        )
        a.cpu_choice = choice.to_json()
        if choice.source != "explicit" or device.type == "cpu":
            a.log("cpu settings (%s): %s", choice.source, choice.to_json())


def population_replay(population: Population, agents: list[AgentRun]) -> PopulationReplay:
    """All agents' replays as one on the learner's device (frames never cross a GPU's bus
    again), sequences as long as the update reads (``rollout_steps``), goals with goal RL."""
    cfg = population.config
    return PopulationReplay(
        len(agents),
        cfg.steps,
        alpha=cfg.priority_alpha,
        K=cfg.rollout_steps,
        n_step=cfg.n_step,
        gamma=cfg.gamma,
        seeds=[a.config.seed for a in agents],
        goal_window=cfg.goal_window if cfg.uses_goal_rl else 0,
        device=population.device,
        reuse_buffers=population.device.type == "cpu",
        cuda_graphs=cfg.cuda_graphs,
        # The authors' env empties its frame stack at a life loss (docs/paper_vs_code.md row
        # 19): the replay's stacks start there too, so learning sees what acting saw.
        first_after_terminal=cfg.env_protocol == "rlpyt",
        spec=cfg.observation_spec,  # one for all agents (Population.build checks)
    )


def start_spr_target(a: AgentRun, i: int, population: Population) -> None:
    """A new agent's SPR target: the pretraining run's EMA target where the config asks
    (``spr_target_start``), else the copy of the online network the population made."""
    if a.pretrained is None or a.config.spr_target_start != "pretrained_target":
        return
    if a.pretrained.target_state is None:
        raise ConfigError(
            f"{a.pretrained.path} holds no EMA target network (written before "
            "sgi-lab saved one); set spr_target_start: online"
        )
    population.start_spr_target(i, a.pretrained.target_state)


def restore_agent(a: AgentRun, i: int, population: Population, replay: PopulationReplay) -> None:
    """A resumed agent's targets, Adam moments, replay and random streams, from its
    checkpoint (the weights are in its model already, `agent_model`)."""
    ckpt = a.checkpoint
    population.load_agent_state(i, "spr_target", ckpt["spr_target"])
    if population.q_target is not None and ckpt.get("q_target") is not None:
        population.load_agent_state(i, "q_target", ckpt["q_target"])
    population.load_agent_optimizer_state(i, ckpt["optimizer"])
    replay.load_state_dict(i, ckpt["replay"])
    if i == 0:
        torch.set_rng_state(ckpt["rng"]["torch"])
    if not restore_generator(population.generators[i], ckpt["rng"]["generator"]):
        a.log("resumed on another device type: the augmentation random stream is reseeded")
    a.rng.bit_generator.state = ckpt["rng"]["numpy"]
    population.updates = int(ckpt["updates"])
    a.log("resuming at step %d (the env starts a fresh episode)", int(ckpt["step"]))


def write_transfer(a: AgentRun, i: int, population: Population) -> None:
    """``transfer.json`` of agent ``i``: which tensors came from its pretrained model, its
    learning rate of each group its parameters fall in, the update's precision
    (`sgi_lab.train.precision.update_precision`: fp32, bf16-autocast or bf16-cast) and whether
    it took the lean kernels (`sgi_lab.train.update.lean_kernels`, under vmap only)."""
    groups = population.agent_lr_groups(i)
    info = {**a.transfer.to_json(), "lr_groups": groups, "scheme": a.config.scheme}
    info["update_precision"] = update_precision(population)
    info["lean_kernels"] = population.vmapped and lean_kernels(population)
    if population.device.type == "cuda":
        info["tf32"] = tf32_settings()  # as prepare_device set them
    if a.pretrained is not None:
        info.update(pretrained_step=a.pretrained.step, pretrained_game=a.pretrained.game)
    atomic_write_text(a.run.path / "transfer.json", json.dumps(info, indent=2))
    t = a.transfer
    a.log(
        "transfer: %d tensors loaded, %d fresh, %d ignored; lr groups %s",
        len(t.loaded),
        len(t.fresh),
        len(t.ignored),
        groups,
    )


def save_checkpoint(
    a: AgentRun, i: int, population: Population, replay: PopulationReplay, step: int
) -> None:
    """Agent ``i``'s checkpoint at ``step``: its weights, targets, Adam moments, replay and
    random streams."""
    a.run.save_checkpoint(
        step,
        {
            "model": population.agent_state(i),
            "spr_target": population.agent_state(i, "spr_target"),
            "q_target": (
                None if population.q_target is None else population.agent_state(i, "q_target")
            ),
            "optimizer": population.agent_optimizer_state(i),
            "replay": replay.state_dict(i),
            "rng": {
                "torch": torch.get_rng_state(),
                "generator": population.generators[i].get_state(),
                "numpy": a.rng.bit_generator.state,
            },
            "updates": population.updates,
            "config": to_dict(a.config),
            "model_args": a.model_args,
            "transfer_loaded": list(a.transfer.loaded),
            "game": a.game,
        },
        kind="finetune",
    )
