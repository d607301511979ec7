"""Online finetuning on Atari 100k: the environment loop of a population of agents.

`finetune_population` trains N agents (games x seeds) in lockstep: every step each agent acts in
its own environment (one batched forward for all), appends to its own prioritized replay, and
after ``learning_starts`` every agent takes ``updates_per_step`` updates of the batched learner
(`sgi_lab.train.population.Population`); the loop itself, and how ``env_overlap`` overlaps the
environments with the learner, is `sgi_lab.train.finetune_loop`. Each agent writes its own
ordinary run folder, through the run lifecycle of `sgi_lab.runs.folder.RunDir`: ``config.yaml``,
``status.json``, ``metrics.jsonl``, ``transfer.json``, ``log.txt``, ``checkpoints/``,
``model.pt`` and ``eval.json``. `finetune` runs one agent: a population of one, the same code
path.

Re-running into the same folders resumes every agent from its last checkpoint (all agents
checkpoint at the same steps; after a kill between two agents' checkpoints the population
resumes from the newest step all of them have). The Atari emulator cannot be checkpointed, so a
resumed agent starts a fresh episode; metrics rows logged after its checkpoint are dropped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import yaml

from sgi_lab.base.files import atomic_torch_save, atomic_write_text
from sgi_lab.base.threads import oversubscribed
from sgi_lab.config import ConfigError, FinetuneConfig, load_config, read_params, to_dict
from sgi_lab.envs import canonical_env_game
from sgi_lab.envs.games import UnknownGameError
from sgi_lab.metrics import score_meaning
from sgi_lab.runs.folder import FinetuneRun, run_name, slug
from sgi_lab.runs.stopping import Deadline, RunStopped, failure_reason, stop_on_signals
from sgi_lab.runtime.device import resolve_device
from sgi_lab.train.acting import greedy
from sgi_lab.train.capacity import max_agents as fitting
from sgi_lab.train.capacity import split_agents, split_population
from sgi_lab.train.evaluate import play_episodes
from sgi_lab.train.finetune_agents import (
    AgentRun,
    build_population,
    prepare_agents,
    write_transfer,
)
from sgi_lab.train.finetune_loop import Callback, beta_at, epsilon_at, train_agents
from sgi_lab.train.population import Population, check_compatible

__all__ = [
    "FinetuneRun",
    "beta_at",
    "epsilon_at",
    "finetune",
    "finetune_agents",
    "finetune_population",
    "population_configs",
    "population_folders",
    "read_agents",
]

log = logging.getLogger("sgi_lab.finetune")


def population_configs(
    base: FinetuneConfig, games: Sequence[str] = (), seeds: Sequence[int] = ()
) -> list[FinetuneConfig]:
    """One config per (game, seed) pair of ``games`` x ``seeds`` (each defaults to the base
    config's own), games outermost; ``{game}`` in ``pretrained`` is filled in per agent, so one
    pattern names each game's pretraining run (``outputs/runs/pretrain__sgi_m__{game}``; the game
    as run folders spell it, `slug`: ``minatar-breakout``).

    Raises:
        UnknownGameError: an unknown game. ConfigError: a repeated game or seed, or another
            ``{...}`` field in ``pretrained``.
    """
    games = [canonical_env_game(g) for g in (games or [base.game])]
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
            # the game as run folders name it (run_name): minatar/breakout -> minatar-breakout
            pretrained=None if pattern is None else pattern.replace("{game}", slug(game)),
        )
        for game in games
        for seed in seeds
    ]


def population_folders(root: str | Path, configs: Sequence[FinetuneConfig]) -> list[Path]:
    """The run folder of each agent: ``ROOT/<game>__s<seed>``; a population of one runs in
    ``ROOT`` itself (a single run's folder, as before populations)."""
    if len(configs) == 1:
        return [Path(root)]
    # slug: a MinAtar game's folder is minatar-breakout__s0, not a minatar/ sub-folder
    return [Path(root) / run_name(c.game, f"s{c.seed}") for c in configs]


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


def _population_limit(configs: Sequence[FinetuneConfig], max_agents: int | str) -> int:
    """The largest population for ``configs``: ``max_agents``, or with ``"auto"`` what the
    device's free memory holds (`sgi_lab.train.capacity.max_agents`; one agent alone is 1)."""
    if max_agents == "auto":
        if len(configs) == 1:
            return 1
        return fitting(configs[0], resolve_device(configs[0].device))
    if isinstance(max_agents, int) and not isinstance(max_agents, bool) and max_agents >= 1:
        return max_agents
    raise ConfigError(f"max_agents: a positive count or 'auto', got {max_agents!r}")


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

    configs, outs = list(configs), [Path(o) for o in outs]
    if len(configs) != len(outs):
        raise ValueError(f"{len(configs)} configs but {len(outs)} run folders")
    limit = _population_limit(configs, max_agents)
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


AGENT_KEYS = ("label", "params", "game", "seed", "pretrained", "out")


def read_agents(
    path: str | Path, overrides: dict[str, Any] | None = None
) -> tuple[list[FinetuneConfig], list[Path], list[str]]:
    """A shared population's agents file (``sgi-lab finetune --agents``; an experiment with
    ``share_populations`` writes one per population under ``params/``): ``agents:``, a list of
    ``{params, game, seed, out}`` with optional ``pretrained`` and ``label``, each agent its
    own params file. Returns each agent's config (its params file, then ``overrides`` for
    every agent, then its own game, seed and pretrained model), run folder and params name
    (the file's ``name``, as ``sgi-lab finetune --params`` records it). Relative paths are
    read from the working directory, as ``--params`` is.

    Raises:
        ConfigError: a malformed file, naming the agent and key; two agents in one folder.
        UnknownGameError: an agent's unknown game, naming the agent (with "did you mean").
    """
    try:
        document = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"--agents {path}: cannot read it ({exc})") from exc
    agents = document.get("agents") if isinstance(document, dict) else None
    if not isinstance(agents, list) or not agents:
        raise ConfigError(f"--agents {path}: expected a mapping with a non-empty list 'agents'")
    configs, outs, names = [], [], []
    name_of: dict[str, str] = {}
    for i, agent in enumerate(agents):
        where = f"--agents {path}: agents[{i}]"
        if not isinstance(agent, dict):
            raise ConfigError(f"{where}: expected a mapping, got {agent!r}")
        unknown = sorted(set(agent) - set(AGENT_KEYS))
        missing = [k for k in ("params", "game", "seed", "out") if agent.get(k) is None]
        if unknown or missing:
            raise ConfigError(
                f"{where}: "
                + "; ".join(
                    [f"unknown key(s) {unknown} (valid: {list(AGENT_KEYS)})"] * bool(unknown)
                    + [f"missing {missing}"] * bool(missing)
                )
            )
        own = {"game": agent["game"], "seed": agent["seed"], "pretrained": agent.get("pretrained")}
        try:
            configs.append(
                load_config(FinetuneConfig, agent["params"], {**(overrides or {}), **own})
            )
        except (ConfigError, UnknownGameError) as exc:  # the same kind, naming the agent
            raise type(exc)(f"{where}: {exc}") from exc
        if agent["params"] not in name_of:  # a shared population has few params files
            declared = read_params(agent["params"]).get("name")
            name_of[agent["params"]] = str(declared or Path(agent["params"]).stem)
        names.append(name_of[agent["params"]])
        outs.append(Path(agent["out"]))
    seen: dict[Path, int] = {}
    for i, out in enumerate(outs):
        first = seen.setdefault(out.resolve(), i)
        if first != i:
            raise ConfigError(
                f"--agents {path}: agents[{first}] and agents[{i}] share the folder {out}"
            )
    return configs, outs, names


def finetune_agents(
    configs: Sequence[FinetuneConfig],
    outs: Sequence[str | Path],
    params: Sequence[str | None],
    max_agents: int | str = "auto",
    progress: bool = True,
    overwrite: bool = False,
    stop: Deadline | None = None,
) -> list[FinetuneRun]:
    """`finetune_population` for any list of agents (`read_agents`: not games x seeds; each
    agent its own params), more than ``max_agents`` as consecutive populations
    (`sgi_lab.train.capacity.split_agents`), one after another, into the agents' own
    folders; ``"auto"``: as many as the device's free memory holds. A re-run skips the
    finished agents and resumes the rest. Returns the runs in the order of ``configs``."""
    configs, outs, params = list(configs), [Path(o) for o in outs], list(params)
    if not len(configs) == len(outs) == len(params):
        raise ValueError(f"{len(configs)} configs, {len(outs)} run folders, {len(params)} names")
    limit = _population_limit(configs, max_agents)
    parts = split_agents(list(range(len(configs))), limit)
    if len(parts) > 1:
        log.info("%d agents as %d populations of at most %d", len(configs), len(parts), limit)
    runs: list[FinetuneRun] = []
    for members in parts:
        runs += finetune_population(
            [configs[i] for i in members],
            [outs[i] for i in members],
            progress=progress,
            overwrite=overwrite,
            params=[params[i] for i in members],
            stop=stop,
        )
    return runs


def finetune_population(
    configs: Sequence[FinetuneConfig],
    outs: Sequence[str | Path],
    progress: bool = True,
    overwrite: bool = False,
    params: str | Sequence[str | None] | None = None,
    callback: Callback | None = None,
    stop: Deadline | None = None,
) -> list[FinetuneRun]:
    """Finetune N agents in lockstep as one batched learner, then evaluate each.

    Args:
        configs: one config per agent; they may differ only in
            `sgi_lab.train.population.POPULATION_KEYS` (game, seed, pretrained model and the
            learning rates of its layers: a pretrained agent beside one from scratch).
        outs: one run folder per agent; unfinished runs there are resumed, finished ones
            returned as they are.
        progress: tqdm bars.
        overwrite: start every run over (only ever runs of ours; see `RunDir.open`).
        params: name of the params file the configs came from (recorded in status.json), or
            one name per agent.
        callback: called as ``callback(step, population)`` after every environment step (and
            after that step's checkpoint); notebooks use it for live plots.
        stop: a `sgi_lab.runs.stopping.Deadline` (a first SIGINT, Ctrl-C or a notebook's interrupt,
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
    names = [params] * len(configs) if params is None or isinstance(params, str) else list(params)
    if len(names) != len(configs):
        raise ValueError(f"params: {len(names)} names for {len(configs)} agents")
    runs = _open_runs(configs, outs, overwrite)
    todo = [i for i, r in enumerate(runs) if not r.finished]
    for r in runs:
        if r.finished:
            log.info("%s: finished already, returning its results", r.path)
    if not todo:
        return runs
    agents = [AgentRun(configs[i], runs[i]) for i in todo]
    try:
        with learner_threads(configs[0]):
            device = resolve_device(configs[0].device)
            step = prepare_agents(agents)
            population, replay = build_population(agents, device)
            _start(agents, population, step, [names[i] for i in todo])
            # A first Ctrl-C (or a notebook's interrupt) stops at the next step, checkpointed.
            stop = stop if stop is not None else Deadline()
            with stop_on_signals(stop, signal.SIGINT):
                step = train_agents(agents, population, replay, step, progress, callback, stop)
                _stop_before_evaluation(stop, step)
                _save_models(agents, population, step)
                _evaluate(agents, population, step, progress, stop)
    except BaseException as exc:
        for a in agents:
            if a.run.started:
                a.run.fail(failure_reason(exc))
        raise
    finally:
        for a in agents:
            if a.metrics is not None:
                a.metrics.close()
    return runs


def _open_runs(
    configs: Sequence[FinetuneConfig], outs: Sequence[str | Path], overwrite: bool
) -> list[FinetuneRun]:
    """Each agent's run folder, opened (created, resumed or finished); the configs checked to
    share one population."""
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
    return [
        FinetuneRun.open(out, "finetune", to_dict(c), overwrite=overwrite)
        for c, out in zip(configs, outs, strict=True)
    ]


@contextlib.contextmanager
def learner_threads(config: FinetuneConfig) -> Iterator[None]:
    """The learner's torch threads (``threads``, else as they are) for the run, given back after;
    a warning when they and ``env_workers`` oversubscribe the cores."""
    threads = torch.get_num_threads()
    if config.threads > 0:
        torch.set_num_threads(config.threads)
    if config.env_workers and oversubscribed(torch.get_num_threads(), extra=config.env_workers):
        warnings.warn(
            f"{torch.get_num_threads()} learner threads + {config.env_workers} env_workers "
            f"oversubscribe {os.cpu_count()} cores; lower env_workers or set threads",
            stacklevel=3,
        )
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _start(
    agents: list[AgentRun], population: Population, step: int, names: Sequence[str | None]
) -> None:
    """Mark every agent's run started (what it was launched with: ``names``, its params file)
    and write its transfer.json."""
    for i, a in enumerate(agents):
        launch = {
            "params": names[i],
            "game": a.game,
            "seed": a.config.seed,
            "env_protocol": a.config.env_protocol,  # the family's env: dopamine, rlpyt, minatar
        }
        if a.checkpoint is None:
            launch["pretrained"] = a.config.pretrained
            launch["pretrain_params"] = a.pretrained.params if a.pretrained else None
        a.run.start(step, population=len(agents), cpu_settings=a.cpu_choice, **launch)
        a.log("started at step %d in a population of %d", step, len(agents))
        if a.checkpoint is None:
            write_transfer(a, i, population)


def _stop_before_evaluation(stop: Deadline, step: int) -> None:
    """Raise `RunStopped` when a stop was asked for, or when less than half of the time limit
    is left for the evaluation (which is not split; the next call evaluates)."""
    why = stop.requested
    if why is None and stop.seconds is not None and stop.left() < stop.seconds / 2:
        why = "less than half of the time limit is left for the evaluation"
    if why:
        raise RunStopped(step, why)


def _save_models(agents: list[AgentRun], population: Population, step: int) -> None:
    """Each agent's ``model.pt``."""
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


def _evaluate(
    agents: list[AgentRun], population: Population, step: int, progress: bool, stop: Deadline
) -> None:
    """Every agent's evaluation episodes at once (one batched forward per environment step);
    ``eval.json`` and the run marked finished."""
    cfg = population.config
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
        env_options=cfg.env_options,
    )
    for a, result in zip(agents, results, strict=True):
        result["step"] = step
        atomic_write_text(a.run.path / "eval.json", json.dumps(result, indent=2))
        a.log(
            "evaluation: %d episodes, mean %.2f (%s %.3f; %s)",
            *(result[k] for k in ("episodes", "mean", "normalization", "normalized_score")),
            score_meaning(result["normalization"]),
        )
        a.run.finish(step, eval_mean=result["mean"], eval_hns=result["hns"])
