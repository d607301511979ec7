"""Online finetuning on Atari 100k: the environment loop of a population of agents.

`finetune_population` trains N agents (games x seeds) in lockstep: every step each agent acts in
its own environment (one batched forward for all), appends to its own prioritized replay, and
after ``learning_starts`` every agent takes ``updates_per_step`` updates of the batched learner
(`sgi_lab.train.agent.Population`). Each agent writes its own ordinary run folder, through the
run lifecycle of `sgi_lab.runs.RunDir`: ``config.yaml``, ``status.json``, ``metrics.jsonl``,
``transfer.json``, ``log.txt``, ``checkpoints/``, ``model.pt`` and ``eval.json``. `finetune` runs
one agent: a population of one, the same code path.

Re-running into the same folders resumes every agent from its last checkpoint (all agents
checkpoint at the same steps; after a kill between two agents' checkpoints the population
resumes from the newest step all of them have). The Atari emulator cannot be checkpointed, so a
resumed agent starts a fresh episode; metrics rows logged after its checkpoint are dropped.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from sgi_lab.config import ConfigError, FinetuneConfig, to_dict
from sgi_lab.data.population_replay import PopulationReplay
from sgi_lab.envs import canonical_game
from sgi_lab.envs import num_actions as game_actions
from sgi_lab.envs.pool import EnvPool
from sgi_lab.files import atomic_torch_save, atomic_write_text, raise_if_disk_full
from sgi_lab.nets import SGIModel
from sgi_lab.nets.cpu_settings import settle
from sgi_lab.nets.runtime import resolve_device
from sgi_lab.runs import (
    CheckpointError,
    Deadline,
    FinetuneRun,
    RunStopped,
    failure_reason,
    load_checkpoint,
    restore_generator,
    stop_on_signals,
)
from sgi_lab.train.acting import act, greedy
from sgi_lab.train.agent import Population, check_compatible
from sgi_lab.train.evaluate import play_episodes
from sgi_lab.train.transfer import (
    Pretrained,
    Transfer,
    load_pretrained,
    model_args_for,
    transfer_pretrained,
)
from sgi_lab.train.update import learn, measure_update

__all__ = [
    "FinetuneRun",
    "beta_at",
    "epsilon_at",
    "finetune",
    "finetune_population",
    "population_configs",
    "population_folders",
]

log = logging.getLogger("sgi_lab.finetune")

Callback = Callable[[int, Population], None]


def epsilon_at(step: int, config: FinetuneConfig) -> float:
    """Linear from eps_start to eps_end at eps_steps, then constant; the annealing starts at
    step 0, or with ``eps_from: learning_starts`` at learning_starts (rlpyt's schedule, which
    the reference uses: with its 2,000 and 2,001, epsilon is 1 until learning starts, then 0)."""
    start = config.learning_starts if config.eps_from == "learning_starts" else 0
    frac = min(1.0, max(0, step - start) / max(1, config.eps_steps - start))
    return config.eps_start + frac * (config.eps_end - config.eps_start)


def beta_at(step: int, config: FinetuneConfig) -> float:
    """Importance-sampling exponent: linear from priority_beta_start when learning starts to 1
    at the last step (rlpyt's schedule, which SPR uses)."""
    span = max(1, config.steps - config.learning_starts)
    frac = min(1.0, max(0.0, (step - config.learning_starts) / span))
    return config.priority_beta_start + frac * (1.0 - config.priority_beta_start)


def population_configs(
    base: FinetuneConfig, games: Sequence[str] = (), seeds: Sequence[int] = ()
) -> list[FinetuneConfig]:
    """One config per (game, seed) pair of ``games`` x ``seeds`` (each defaults to the base
    config's own), games outermost; ``{game}`` in ``pretrained`` is filled in per agent, so one
    pattern names each game's pretraining run (``outputs/runs/pretrain__sgi_m__{game}``).

    Raises:
        UnknownGameError: an unknown game. ConfigError: a repeated game or seed, or another
            ``{...}`` field in ``pretrained``.
    """
    games = [canonical_game(g) for g in (games or [base.game])]
    seeds = [int(s) for s in (seeds or [base.seed])]
    for what, items in (("games", games), ("seeds", seeds)):
        if len(set(items)) != len(items):
            raise ConfigError(f"{what}: repeated item in {items}")
    pattern = base.pretrained
    if pattern is not None and "{" in pattern.replace("{game}", ""):
        raise ConfigError(f"pretrained: only {{game}} may be filled in ({pattern})")
    return [
        dataclasses.replace(
            base,
            game=game,
            seed=seed,
            pretrained=None if pattern is None else pattern.replace("{game}", game),
        )
        for game in games
        for seed in seeds
    ]


def population_folders(root: str | Path, configs: Sequence[FinetuneConfig]) -> list[Path]:
    """The run folder of each agent: ``ROOT/<game>__s<seed>``; a population of one runs in
    ``ROOT`` itself (a single run's folder, as before populations)."""
    if len(configs) == 1:
        return [Path(root)]
    return [Path(root) / f"{c.game}__s{c.seed}" for c in configs]


def finetune(
    config: FinetuneConfig,
    out: str | Path,
    progress: bool = True,
    overwrite: bool = False,
    params: str | None = None,
    callback: Callback | None = None,
    stop: Deadline | None = None,
) -> FinetuneRun:
    """Finetune one agent on ``config.game`` for ``config.steps`` steps, then evaluate it.

    A population of one (`finetune_population`); see there for arguments and errors.

    Returns:
        The run folder, with ``.evaluation`` (eval.json) and ``.metrics()``.
    """
    return finetune_population([config], [out], progress, overwrite, params, callback, stop)[0]


class _Agent:
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


def finetune_in_parts(
    configs: Sequence[FinetuneConfig],
    outs: Sequence[str | Path],
    max_agents: int | str = "auto",
    progress: bool = True,
    overwrite: bool = False,
    params: str | None = None,
    callback: Callback | None = None,
    stop: Deadline | None = None,
) -> list[FinetuneRun]:
    """`finetune_population` for any number of agents: more than ``max_agents`` train as
    several populations, one after another, each some games x some seeds
    (`sgi_lab.train.capacity.split_population`) into its agents' own folders, so the result
    is the same set of run folders; a re-run skips the finished parts and resumes the rest.

    Args:
        configs: games x seeds, as `population_configs` gives them.
        outs: one run folder per config.
        max_agents: the largest population, or ``"auto"``: what the device's free memory holds
            (`sgi_lab.train.capacity.max_agents`).
        progress, overwrite, params, callback: as for `finetune_population`.
        stop: one deadline for all the parts (`finetune_population`).

    Returns:
        The runs, in the order of ``configs``.
    """
    from sgi_lab.train.capacity import max_agents as fitting
    from sgi_lab.train.capacity import split_population

    configs, outs = list(configs), [Path(o) for o in outs]
    if len(configs) != len(outs):
        raise ValueError(f"{len(configs)} configs but {len(outs)} run folders")
    if max_agents == "auto":
        limit = (
            len(configs)
            if len(configs) == 1
            else fitting(configs[0], resolve_device(configs[0].device))
        )
    elif isinstance(max_agents, int) and not isinstance(max_agents, bool) and max_agents >= 1:
        limit = max_agents
    else:
        raise ConfigError(f"max_agents: a positive count or 'auto', got {max_agents!r}")
    games = list(dict.fromkeys(c.game for c in configs))
    seeds = list(dict.fromkeys(c.seed for c in configs))
    index = {(c.game, c.seed): i for i, c in enumerate(configs)}
    if len(index) != len(configs) or len(index) != len(games) * len(seeds):
        raise ConfigError("configs must be games x seeds, each pair once (population_configs)")
    parts = split_population(games, seeds, limit)
    if len(parts) > 1:
        log.info(
            "%d agents as %d populations of at most %d, one after another",
            len(configs),
            len(parts),
            limit,
        )
    runs: list[FinetuneRun | None] = [None] * len(configs)
    for part_games, part_seeds in parts:
        members = [index[g, s] for g in part_games for s in part_seeds]
        done = finetune_population(
            [configs[i] for i in members],
            [outs[i] for i in members],
            progress=progress,
            overwrite=overwrite,
            params=params,
            callback=callback,
            stop=stop,
        )
        for i, run in zip(members, done, strict=True):
            runs[i] = run
    return runs  # type: ignore[return-value]


def finetune_population(
    configs: Sequence[FinetuneConfig],
    outs: Sequence[str | Path],
    progress: bool = True,
    overwrite: bool = False,
    params: str | None = None,
    callback: Callback | None = None,
    stop: Deadline | None = None,
) -> list[FinetuneRun]:
    """Finetune N agents in lockstep as one batched learner, then evaluate each.

    Args:
        configs: one config per agent; they may differ only in `sgi_lab.train.agent.POPULATION_KEYS` (game, seed,
            pretrained).
        outs: one run folder per agent; unfinished runs there are resumed, finished ones
            returned as they are.
        progress: tqdm bars.
        overwrite: start every run over (only ever runs of ours; see `RunDir.open`).
        params: name of the params file the configs came from (recorded in status.json).
        callback: called as ``callback(step, population)`` after every environment step (and
            after that step's checkpoint); notebooks use it for live plots.
        stop: a `sgi_lab.runs.Deadline` (a first SIGINT, Ctrl-C or a notebook's interrupt,
            asks it to stop; a second interrupts at once). Once it passes, every agent
            checkpoints at the current step and `RunStopped` is raised; the runs are marked
            failed with that reason and the same call resumes them. The evaluation (100
            episodes per agent, all at once) is not split: it starts only while at least half
            of the time limit is left (else the run stops before it, checkpointed at its last
            step, and the next call evaluates), then runs to its end; only a stop request
            interrupts it, and the next call plays it again from the start.

    Returns:
        The run folders, in the order of ``configs``.

    Raises:
        UnknownGameError: an unknown game (lists the valid ones).
        ConfigError: configs that may not share a population, or a folder holding a run with
            another config (a config's own settings are checked as it is built, `validate`).
        RunFolderError: a folder that is not a finetuning run of ours.
        PretrainedMismatchError: a pretrained model does not fit (encoder or shapes).
        CheckpointError: a truncated or foreign checkpoint or pretrained model, or an
            unfinished pretraining run.
        FloatingPointError: a loss became NaN or infinite (status "failed").
        RunStopped: ``stop`` passed; checkpointed, resumable.
    """
    configs = list(configs)  # FinetuneConfig canonicalises its game itself
    if len(configs) != len(outs) or not configs:
        raise ValueError("finetune_population needs one run folder per config, at least one")
    try:
        check_compatible(configs)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    outs = [Path(o) for o in outs]
    if len({o.resolve() for o in outs}) != len(outs):
        raise ConfigError("every agent of a population needs its own run folder")
    runs = [
        FinetuneRun.open(out, "finetune", to_dict(c), overwrite=overwrite)
        for c, out in zip(configs, outs, strict=True)
    ]
    todo = [i for i, r in enumerate(runs) if not r.finished]
    for r in runs:
        if r.finished:
            log.info("%s: finished already, returning its results", r.path)
    if not todo:
        return runs
    agents = [_Agent(configs[i], runs[i]) for i in todo]
    threads = torch.get_num_threads()
    if configs[0].threads > 0:
        torch.set_num_threads(configs[0].threads)
    cores = os.cpu_count() or 1
    if configs[0].env_workers and torch.get_num_threads() + configs[0].env_workers > cores:
        warnings.warn(
            f"{torch.get_num_threads()} learner threads + {configs[0].env_workers} env_workers "
            f"oversubscribe {cores} cores; lower env_workers or set threads",
            stacklevel=2,
        )
    try:
        device = resolve_device(configs[0].device)
        step = _prepare(agents)
        population, replay = _build(agents, device)
        for a in agents:
            launch = {"params": params, "game": a.game, "seed": a.config.seed}
            if a.checkpoint is None:
                launch["pretrained"] = a.config.pretrained
                launch["pretrain_params"] = a.pretrained.params if a.pretrained else None
            a.run.start(step, population=len(agents), cpu_settings=a.cpu_choice, **launch)
            a.log("started at step %d in a population of %d", step, len(agents))
            if a.checkpoint is None:
                _write_transfer(a, population)
        # A first Ctrl-C (or a notebook's interrupt) stops at the next step, checkpointed.
        stop = stop if stop is not None else Deadline()
        with stop_on_signals(stop, signal.SIGINT):
            _train_and_evaluate(agents, population, replay, step, progress, callback, stop)
    except BaseException as exc:
        for a in agents:
            if a.run.started:
                a.run.fail(failure_reason(exc))
        raise
    finally:
        torch.set_num_threads(threads)
        for a in agents:
            if a.metrics is not None:
                a.metrics.close()
    return runs


# -- building the population: fresh, pretrained or resumed -------------------------------------


def _prepare(agents: list[_Agent]) -> int:
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
        if a.config.pretrained:
            a.pretrained = load_pretrained(a.config.pretrained)
            a.log(
                "pretrained model: %s (step %d, game %s)",
                a.pretrained.path,
                a.pretrained.step,
                a.pretrained.game,
            )
            if a.pretrained.game and canonical_game(a.pretrained.game) != a.game:
                a.log("warning: pretrained on %s, finetuning on %s", a.pretrained.game, a.game)
        a.model_args = model_args_for(a.config, game_actions(a.game), a.pretrained)
    return 0


def _build(agents: list[_Agent], device: torch.device) -> tuple[Population, PopulationReplay]:
    models = []
    for a in agents:
        torch.manual_seed(a.config.seed)
        model = SGIModel(**a.model_args)
        if a.checkpoint is not None:
            model.load_state_dict(a.checkpoint["model"])
        elif a.pretrained is not None:
            a.transfer = transfer_pretrained(model, a.pretrained)
        else:
            a.transfer = Transfer(loaded=(), fresh=tuple(model.state_dict()))
        if a.config.scheme == "frozen" and not a.transfer.loaded:
            a.log("warning: scheme 'frozen' without a pretrained model freezes a random encoder")
        models.append(model)
    loaded = {a.transfer.loaded for a in agents}
    if len(loaded) > 1:
        raise ConfigError(
            "the agents' pretrained models provide different tensors; a population shares "
            "one set of learning-rate groups (pretrain every game with the same params)"
        )
    # "auto" CPU precision and layout: the fastest measured on this machine for this workload.
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
    population = Population.build(
        [a.config for a in agents], models, loaded=loaded.pop(), device=device
    )
    cfg = population.config
    # All agents' replays as one on the learner's device (frames never cross a GPU's bus again).
    replay = PopulationReplay(
        len(agents),
        cfg.steps,
        alpha=cfg.priority_alpha,
        K=cfg.spr_steps if cfg.ssl != "none" else 0,
        n_step=cfg.n_step,
        gamma=cfg.gamma,
        seeds=[a.config.seed for a in agents],
        goal_window=cfg.goal_window if cfg.ssl == "all" else 0,
        device=population.device,
        reuse_buffers=population.device.type == "cpu",
        cuda_graphs=cfg.cuda_graphs,
        # The authors' env empties its frame stack at a life loss (docs/paper_vs_code.md row
        # 19): the replay's stacks start there too, so learning sees what acting saw.
        first_after_terminal=cfg.env_protocol == "rlpyt",
    )
    for i, a in enumerate(agents):
        if a.checkpoint is None:
            if a.pretrained is not None and a.config.spr_target_start == "pretrained_target":
                if a.pretrained.target_state is None:
                    raise ConfigError(
                        f"{a.pretrained.path} holds no EMA target network (written before "
                        "sgi-lab saved one); set spr_target_start: online"
                    )
                population.start_spr_target(i, a.pretrained.target_state)
            continue
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
    return population, replay


def _write_transfer(a: _Agent, population: Population) -> None:
    groups = {g["name"]: g["lr"] for g in population.optimizer.param_groups}
    info = {**a.transfer.to_json(), "lr_groups": groups, "scheme": a.config.scheme}
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


# -- the loop ----------------------------------------------------------------------------------


class _Window:
    """Running sums of per-agent update stats between metrics rows (device tensors, synced at
    log time)."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.updates = 0
        self.steps = 0
        self.start = time.perf_counter()

    def add(self, stats: dict[str, torch.Tensor]) -> None:
        for k, v in stats.items():
            self.sums[k] = self.sums[k] + v if k in self.sums else v.clone()
        self.updates += 1

    def rows(self, n: int) -> list[dict[str, float]]:
        seconds = max(time.perf_counter() - self.start, 1e-9)
        means = {k: (v / self.updates).tolist() for k, v in self.sums.items()}
        for k, v in means.items():
            bad = [i for i, x in enumerate(v) if not np.isfinite(x)]
            if bad and k == "losses/total":
                raise FloatingPointError(f"non-finite loss for agent(s) {bad}")
        rows = []
        for i in range(n):
            row = {k: v[i] for k, v in means.items()}
            row["charts/sps"] = self.steps / seconds
            row["charts/ups"] = self.updates / seconds
            rows.append(row)
        return rows


def _checkpoint(
    a: _Agent, i: int, population: Population, replay: PopulationReplay, step: int
) -> None:
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


def _train_and_evaluate(
    agents: list[_Agent],
    population: Population,
    replay: PopulationReplay,
    step: int,
    progress: bool,
    callback: Callback | None,
    stop: Deadline | None = None,
) -> None:
    cfg = population.config
    n = len(agents)
    for a in agents:
        a.metrics = a.run.metrics_logger(resume_step=step if a.checkpoint is not None else None)
    # A resumed run cannot restore the emulator: new seed, fresh episode.
    pool = EnvPool(
        [a.game for a in agents],
        [a.config.seed + step for a in agents],
        train=True,
        workers=cfg.env_workers,
        preprocessing=cfg.env_protocol,
    )
    obs = pool.reset()
    window = _Window()
    label = agents[0].game if n == 1 else f"{n} agents"
    bar = tqdm(
        total=cfg.steps, initial=step, desc=f"finetune {label}", disable=not progress, unit="step"
    )
    postfix: dict[str, str] = {}
    try:
        while step < cfg.steps:
            rows: list[dict[str, Any]] = [{} for _ in agents]
            eps = epsilon_at(step, cfg)
            actions = act(population, obs, [eps] * n, [a.rng for a in agents])
            # Environments whose episode ended come back already reset (EnvPool).
            next_obs, rewards, terminated, truncated, raw, terminal = pool.step(actions)
            replay.append(obs[:, -1], actions, raw, terminal, [a.first for a in agents])
            for i, (a, row) in enumerate(zip(agents, rows, strict=True)):
                a.first = False
                a.ep_return += float(raw[i])
                a.ep_clipped += float(rewards[i])
                a.ep_length += 1
                if terminated[i] or truncated[i]:
                    row.update(
                        {
                            "episode/return": a.ep_return,
                            "episode/clipped_return": a.ep_clipped,
                            "episode/length": a.ep_length,
                        }
                    )
                    a.first = True
                    a.ep_return = a.ep_clipped = 0.0
                    a.ep_length = 0
            obs = next_obs
            step += 1
            window.steps += 1

            if step >= cfg.learning_starts and replay.ready():
                beta = beta_at(step, cfg)
                for _ in range(cfg.updates_per_step):
                    window.add(learn(population, replay, cfg.batch_size, beta))

            if step % cfg.log_every == 0 or step == cfg.steps:
                for row, stats in zip(rows, window.rows(n), strict=True):
                    row.update(stats)
                    row["charts/epsilon"] = eps
                    row["charts/beta"] = beta_at(step, cfg)
                    row["charts/updates"] = population.updates
                window = _Window()
            for a, row in zip(agents, rows, strict=True):
                if row:
                    a.metrics.log(step, **row)
            if step % cfg.checkpoint_every == 0 or step == cfg.steps:
                for i, a in enumerate(agents):
                    _checkpoint(a, i, population, replay, step)
                for a in agents:
                    a.run.set_status("running", step=step)
            bar.update(1)
            sps = [r["charts/sps"] for r in rows if "charts/sps" in r]
            returns = [r["episode/return"] for r in rows if "episode/return" in r]
            if sps:
                postfix["agent-steps/s"] = f"{sps[0] * n:.1f}"
            if returns:
                postfix["return"] = f"{np.mean(returns):.0f}"
            if sps or returns:
                bar.set_postfix(postfix, refresh=False)
            if callback is not None:
                callback(step, population)
            why = stop.reason() if stop is not None and step < cfg.steps else None
            if why:
                if step % cfg.checkpoint_every:
                    for i, a in enumerate(agents):
                        _checkpoint(a, i, population, replay, step)
                raise RunStopped(step, why)
    finally:
        bar.close()
        pool.close()
    if stop is not None:
        why = stop.requested
        if why is None and stop.seconds is not None and stop.left() < stop.seconds / 2:
            why = "less than half of the time limit is left for the evaluation"
        if why:
            raise RunStopped(step, why)

    for i, a in enumerate(agents):
        payload = {
            "format": "sgi-lab",
            "kind": "finetuned_model",
            "step": step,
            "model": population.agent_state(i),
            "model_args": a.model_args,
            "config": to_dict(a.config),
            "game": a.game,
        }
        atomic_torch_save(payload, a.run.path / "model.pt")
    # Every agent's evaluation episodes at once, one batched forward per environment step.
    results = play_episodes(
        lambda obs: greedy(population, obs),
        [a.game for a in agents],
        [a.model_args["num_actions"] for a in agents],
        episodes=cfg.eval_episodes,
        eps=cfg.eval_eps,
        num_envs=cfg.eval_envs,
        seeds=[a.config.seed + 10_000 for a in agents],
        max_frames=cfg.eval_max_frames,
        progress=progress,
        stop=stop,
        env_protocol=cfg.env_protocol,
    )
    for a, result in zip(agents, results, strict=True):
        result["step"] = step
        atomic_write_text(a.run.path / "eval.json", json.dumps(result, indent=2))
        a.log(
            "evaluation: %d episodes, mean %.2f (HNS %.3f)",
            result["episodes"],
            result["mean"],
            result["hns"],
        )
        a.run.finish(step, eval_mean=result["mean"], eval_hns=result["hns"])
