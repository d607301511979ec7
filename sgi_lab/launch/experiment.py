"""Experiments: a table of the paper as a file, run as a task graph, locally or on Ray.

An experiment file (``params/experiments/*.yaml``, validated by `load_experiment`) declares the
games, the seeds, a data source per name, the pretraining and the finetuning configurations.
`expand` turns it into a graph of tasks, each an ordinary run folder under the experiment
folder (its layout: README.md, "Experiments"). A task runs when its inputs are complete; a finished task is skipped when the experiment runs
again (an interrupted experiment resumes: unfinished runs resume from their checkpoints); a
failed task is retried, then reported with its log while independent branches go on. Every
task but the report is a subprocess running the ``sgi-lab`` CLI (memory is isolated and the
command in ``experiment.json`` reproduces it by hand). The local executor runs ``max_parallel``
of them, each with ``cpu_count // max_parallel`` torch threads; the Ray executor sends them to
a Ray cluster as tasks with resource requests (``num_cpus``, fractional ``num_gpus``). Workers
write the run folders in place (a shared filesystem), or, with ``storage=URI`` (``--storage``),
in a scratch folder synced with an object store (`sgi_lab.launch.storage`).

``sgi-lab experiment FILE --out DIR --dry-run`` prints the graph and its cost at the speeds
measured in ``benchmarks/README.md`` (`SPEEDS`).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import subprocess
import sys
import threading
import time
import typing
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from sgi_lab.config import ConfigError, check_value, load_yaml_mapping
from sgi_lab.files import LOCK_WAIT_ENV, atomic_write_text
from sgi_lab.launch.storage import RunStorage, run_in_scratch
from sgi_lab.runs import read_status, run_name

__all__ = [
    "EXECUTORS",
    "SPEEDS",
    "DataSpec",
    "Experiment",
    "FinetuneSpec",
    "Graph",
    "PretrainSpec",
    "ProbeSpec",
    "Speed",
    "Task",
    "add_experiment_parser",
    "estimate_cost",
    "expand",
    "format_plan",
    "load_experiment",
    "main_experiment",
    "run_experiment",
    "pull_results",
    "run_graph",
    "storage_plan",
    "stored_task_done",
    "task_done",
    "write_report",
]

EXECUTORS = ("local", "ray")
EXPERIMENT_FILE = "experiment.yaml"
STATE_FILE = "experiment.json"
NO_PRETRAINING = "none"
PROBE_KEYS = ("store", "split_seed", "max_frames", "random_baseline_seed")
KINDS = ("data", "pretrain", "finetune", "probe", "report")


# -- the experiment file ------------------------------------------------------------------------


def F(default: Any, doc: str) -> Any:  # noqa: N802 - reads like a declaration
    """A dataclass field with a default (copied when mutable) and a one-line doc."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


REQUIRED = dataclasses.MISSING


@dataclass(frozen=True)
class DataSpec:
    """One dataset per game: collected, imported or found in a folder (paper Sec. 3)."""

    source: Literal["random", "exploratory", "dqn_replay", "folder"] = F(
        "random",
        "random: the Random collector; exploratory: the IDF agent (SGI-E); "
        "dqn_replay: import Dopamine checkpoints (Weak, Mixed); folder: an existing store",
    )
    steps: int = F(6_000_000, "random/exploratory: transitions collected per game")
    seed: int = F(0, "random/exploratory: collection seed")
    params: str | None = F(None, "exploratory: params/collect file (default: Burda et al.'s)")
    set: dict[str, Any] = F({}, "exploratory: overrides of the params file's config")
    src: str | None = F(
        None,
        "dqn_replay: the replay_logs folder; folder: the store; {game} and {PARAMETER} are "
        "filled in (a null parameter drops every branch that needs this data)",
    )
    checkpoints: list[int] = F([], "dqn_replay: checkpoint numbers, in order")
    runs: list[int] = F(
        [], "dqn_replay: DQN runs filled in for {run} in src, imported one after another"
    )
    samples: int | None = F(None, "dqn_replay: transitions taken from each checkpoint")


@dataclass(frozen=True)
class PretrainSpec:
    """A pretraining configuration, run once per game on that game's dataset."""

    name: str = F(REQUIRED, "label, recorded as the run's params name (sgi_m, sgi_w, s_g...)")
    params: str = F(REQUIRED, "params/pretrain file")
    data: str = F(REQUIRED, "name of a data source of this experiment")
    set: dict[str, Any] = F({}, "overrides of the params file's config (steps, encoder...)")


@dataclass(frozen=True)
class FinetuneSpec:
    """A finetuning configuration, run from each named pretraining config (or from scratch)."""

    name: str = F(REQUIRED, "label, recorded as the runs' params name (reduced_lr, naive...)")
    params: str = F(REQUIRED, "params/finetune file")
    pretrain: list[str] = F(
        [NO_PRETRAINING], f"pretraining configs to start from; '{NO_PRETRAINING}': from scratch"
    )
    set: dict[str, Any] = F(
        {}, "overrides of the params file's config (the encoder follows the pretraining config)"
    )


@dataclass(frozen=True)
class ProbeSpec:
    """Linear probes (`sgi_lab.probes`) of each named pretraining config's runs, or of random
    encoders, on a data source's store of every game (it must hold RAM)."""

    name: str = F(REQUIRED, "label of the probe configuration")
    data: str = F(REQUIRED, "name of the data source probed (a store with RAM per game)")
    pretrain: list[str] = F(
        [], f"pretraining configs whose runs are probed; '{NO_PRETRAINING}': random encoders"
    )
    seeds: list[int] = F([0], f"'{NO_PRETRAINING}': the random encoders' initialization seeds")
    encoder: Literal["nature", "resnet", "resnet_l"] = F(
        "nature", f"'{NO_PRETRAINING}': the random encoders' architecture"
    )
    max_frames: int | None = F(None, "rows of the store used at most (null: all)")
    split_seed: int = F(0, "seeds the episode split (the same for every encoder)")
    random_baseline: bool = F(
        False, "also probe a random encoder on each run's split (probes.json random_init)"
    )


@dataclass(frozen=True)
class Experiment:
    """A table of the paper: data -> pretraining per game -> finetuning populations -> report."""

    name: str = F(REQUIRED, "experiment name")
    description: str = F("", "one line: what the experiment reproduces")
    table: str | None = F(None, "the paper table it reproduces (tab:HNS, tab:controls_hns...)")
    games: list[str] = F(["all"], "Atari 100k games; ['all']: the 26")
    seeds: list[int] = F([0], "finetuning seeds (each game x seed is one agent)")
    parameters: dict[str, Any] = F({}, "values given with --param KEY=VALUE (null: not given)")
    data: dict[str, DataSpec] = F({}, "data sources by name")
    pretrain: list[PretrainSpec] = F([], "pretraining configurations")
    finetune: list[FinetuneSpec] = F([], "finetuning configurations (at least one, or a probe)")
    probe: list[ProbeSpec] = F([], "linear-probe configurations (sgi-lab probe)")
    resources: dict[str, dict[str, float]] = F(
        {}, "Ray resources per task kind: {pretrain: {num_cpus: 2, num_gpus: 0.5}, ...}"
    )
    max_agents: int | None = F(
        None,
        "agents per finetuning population: games x seeds beyond it become several tasks (each "
        "some games x some seeds, run in parallel where resources allow); null: one task each, "
        "which trains as many agents at a time as the device's memory holds (--max-agents auto)",
    )


RESOURCE_KEYS = ("num_cpus", "num_gpus")
DEFAULT_RESOURCES = {kind: {"num_cpus": 1.0, "num_gpus": 0.0} for kind in KINDS}


def _build(cls: type, values: Any, where: str) -> Any:
    """Build frozen ``cls`` from a mapping: unknown keys, missing ones and wrong types are
    refused naming the key (``where`` prefixes it: ``pretrain[1].params``)."""
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a mapping, got {values!r}")
    prefix = f"{where}." if where else ""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown key(s) {[prefix + k for k in unknown]} in {cls.__name__}; "
            f"valid keys: {sorted(fields)}"
        )
    hints = typing.get_type_hints(cls)
    checked = {}
    for name, f in fields.items():
        if name in values:
            checked[name] = check_value(prefix + name, values[name], hints[name], _build)
        elif f.default is REQUIRED and f.default_factory is REQUIRED:
            raise ConfigError(f"{prefix}{name}: required ({f.metadata.get('doc', '')})")
    return cls(**checked)


def _resolve_file(path: str, experiment_file: Path | None) -> Path:
    """A params path as written in an experiment file: relative to the working directory, else
    to the project holding the experiment file (``params/experiments/x.yaml`` -> its root)."""
    candidate = Path(path)
    if candidate.is_absolute() or candidate.exists() or experiment_file is None:
        return candidate.resolve()
    for folder in experiment_file.resolve().parents:
        if (folder / candidate).exists():
            return (folder / candidate).resolve()
    return candidate.resolve()


def load_experiment(
    path: str | os.PathLike, parameters: dict[str, Any] | None = None
) -> Experiment:
    """Read and validate an experiment file; ``parameters`` fill its ``parameters`` mapping.

    Raises:
        ConfigError: an unknown or missing key, a wrong type, an unknown game, a parameter the
            file does not declare, a duplicate name, or a reference to an unknown data source
            or pretraining config (the message names the key).
    """
    from sgi_lab.envs.games import ATARI_100K_GAMES, UnknownGameError, canonical_game

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: experiment file not found")
    raw = load_yaml_mapping(path)
    try:
        experiment = _build(Experiment, raw, "")
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    undeclared = sorted(set(parameters or {}) - set(experiment.parameters))
    if undeclared:
        raise ConfigError(
            f"{path}: --param {undeclared} not declared by the experiment; it takes "
            f"{sorted(experiment.parameters) or 'none'}"
        )
    try:
        games = list(ATARI_100K_GAMES) if experiment.games == ["all"] else experiment.games
        games = [canonical_game(g) for g in games]
    except UnknownGameError as exc:
        raise ConfigError(f"{path}: games: {exc}") from None
    experiment = dataclasses.replace(
        experiment,
        games=games,
        parameters={**experiment.parameters, **(parameters or {})},
        pretrain=[
            dataclasses.replace(p, params=str(_resolve_file(p.params, path)))
            for p in experiment.pretrain
        ],
        finetune=[
            dataclasses.replace(f, params=str(_resolve_file(f.params, path)))
            for f in experiment.finetune
        ],
        data={
            k: d
            if not d.params
            else dataclasses.replace(d, params=str(_resolve_file(d.params, path)))
            for k, d in experiment.data.items()
        },
    )
    _check_references(experiment, path)
    _check_sets(experiment, path)
    return experiment


def _check_sets(experiment: Experiment, path: Path) -> None:
    """Each ``set:`` override on its own against its stage's config, so a bad key or value is
    blamed on the experiment file and its entry (``exp.yaml: pretrain[0].set.bogus: ...``),
    not on the params file it overrides."""
    from sgi_lab.config import (
        ExploreConfig,
        FinetuneConfig,
        PretrainConfig,
        check_key_value,
    )

    entries = [(f"pretrain[{i}]", PretrainConfig, s.set) for i, s in enumerate(experiment.pretrain)]
    entries += [
        (f"finetune[{i}]", FinetuneConfig, s.set) for i, s in enumerate(experiment.finetune)
    ]
    entries += [
        (f"data.{name}", ExploreConfig, s.set)
        for name, s in experiment.data.items()
        if s.source == "exploratory"
    ]
    for where, cls, overrides in entries:
        known = {f.name for f in dataclasses.fields(cls)}
        for key, value in overrides.items():
            if key not in known:
                raise ConfigError(
                    f"{path}: {where}.set.{key}: unknown key for {cls.__name__} "
                    f"(valid keys: {sorted(known)})"
                )
            try:  # its type and range; checks across keys run when the stage's config is built
                check_key_value(cls, key, value)
            except ConfigError as exc:
                problem = str(exc).removeprefix(f"{key}: ")
                raise ConfigError(f"{path}: {where}.set.{key}: {problem}") from None


def _check_references(experiment: Experiment, path: Path) -> None:
    def duplicates(items: Sequence[Any]) -> list[Any]:
        return sorted({x for x in items if list(items).count(x) > 1}, key=str)

    for what, items in (("games", experiment.games), ("seeds", experiment.seeds)):
        if not items or duplicates(items):
            raise ConfigError(f"{path}: {what}: empty, or repeated items {duplicates(items)}")
    if not experiment.finetune and not experiment.probe:
        raise ConfigError(f"{path}: finetune: at least one finetuning (or probe) configuration")
    if experiment.max_agents is not None and experiment.max_agents < 1:
        raise ConfigError(f"{path}: max_agents: at least 1, or null, got {experiment.max_agents}")
    names = [p.name for p in experiment.pretrain]
    if duplicates(names) or NO_PRETRAINING in names:
        raise ConfigError(f"{path}: pretrain: repeated or reserved names {duplicates(names)}")
    for i, spec in enumerate(experiment.pretrain):
        if spec.data not in experiment.data:
            raise ConfigError(
                f"{path}: pretrain[{i}].data: {spec.data!r} is not one of the data sources "
                f"{sorted(experiment.data)}"
            )
    pairs = [(f.name, p) for f in experiment.finetune for p in f.pretrain]
    if duplicates(pairs):
        raise ConfigError(f"{path}: finetune: (name, pretrain) pairs repeat {duplicates(pairs)}")
    for i, spec in enumerate(experiment.finetune):
        for name in spec.pretrain:
            if name != NO_PRETRAINING and name not in names:
                raise ConfigError(
                    f"{path}: finetune[{i}].pretrain: {name!r} is not one of {names} "
                    f"(or '{NO_PRETRAINING}')"
                )
    probe_names = [p.name for p in experiment.probe]
    if duplicates(probe_names):
        raise ConfigError(f"{path}: probe: repeated names {duplicates(probe_names)}")
    for i, spec in enumerate(experiment.probe):
        if spec.data not in experiment.data:
            raise ConfigError(
                f"{path}: probe[{i}].data: {spec.data!r} is not one of the data sources "
                f"{sorted(experiment.data)}"
            )
        for name in spec.pretrain:
            if name != NO_PRETRAINING and name not in names:
                raise ConfigError(
                    f"{path}: probe[{i}].pretrain: {name!r} is not one of {names} "
                    f"(or '{NO_PRETRAINING}')"
                )
    for kind, request in experiment.resources.items():
        if kind not in KINDS or set(request) - set(RESOURCE_KEYS):
            raise ConfigError(
                f"{path}: resources.{kind}: kinds are {list(KINDS)}, keys {list(RESOURCE_KEYS)}"
            )
    for name, spec in experiment.data.items():
        needs = {"dqn_replay": "src", "folder": "src"}.get(spec.source)
        if needs and not spec.src:
            raise ConfigError(f"{path}: data.{name}.src: required for source {spec.source!r}")
        if spec.source == "dqn_replay" and not spec.checkpoints:
            raise ConfigError(f"{path}: data.{name}.checkpoints: required for dqn_replay")
        names_run = "{run}" in (spec.src or "")
        if spec.runs and (not names_run or len(set(spec.runs)) != len(spec.runs)):
            raise ConfigError(
                f"{path}: data.{name}.runs: distinct runs, with {{run}} in src ({spec.src})"
            )
        if names_run and not spec.runs:
            raise ConfigError(f"{path}: data.{name}.runs: required, src names {{run}}")


# -- speeds and cost ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Speed:
    """One measured speed from ``benchmarks/README.md``."""

    stage: str  # collect_random, collect_exploratory, pretrain, finetune
    encoder: str | None  # the encoder for pretrain/finetune
    machine: str  # key of MACHINES
    rate: float  # per second: agent steps (collection, finetuning, one agent) or samples
    source: str  # where the figure is in benchmarks/README.md


MACHINES = {
    "h100": "one NVIDIA H100 (bf16, channels-last)",
    "cpu": "the 2-core development CPU (2 torch threads)",
}

SPEEDS: tuple[Speed, ...] = (
    Speed("collect_random", None, "cpu", 2250.0, "Foundation: Random collection, one core"),
    Speed("collect_random", None, "h100", 2250.0, "Foundation: Random collection, one core"),
    Speed("collect_exploratory", None, "cpu", 84.0, "Exploratory collection: 8 envs, one thread"),
    Speed("pretrain", "nature", "h100", 8673.0, "Pretraining speed: H100, samples/s"),
    Speed("pretrain", "resnet", "h100", 3929.0, "Pretraining speed: H100, samples/s"),
    Speed("pretrain", "resnet_l", "h100", 2872.0, "Pretraining speed: H100, samples/s"),
    Speed("pretrain", "nature", "cpu", 375.0, "Pretraining speed: two threads, samples/s"),
    Speed("pretrain", "resnet", "cpu", 134.7, "Pretraining speed: two threads, samples/s"),
    Speed("pretrain", "resnet_l", "cpu", 19.0, "Pretraining speed: one thread, busy machine"),
    Speed("finetune", "nature", "h100", 18.3, "Finetuning: whole loop on an H100, env steps/s"),
    Speed("finetune", "resnet", "h100", 10.1, "Finetuning: whole loop on an H100, env steps/s"),
    Speed("finetune", "nature", "cpu", 5.24, "Finetuning: whole loop, 2 threads, session 4"),
    Speed("finetune", "resnet", "cpu", 1.91, "Finetuning: whole loop, 2 threads, session 4"),
    Speed("probe", "nature", "cpu", 400.0, "Probe speed: frames/s, busy 2-core machine"),
)
"""Measured speeds (benchmarks/README.md). Finetuning rates are one agent's; a population on a
GPU batches its agents, so its figure is an upper bound on the time. No figure: DQN Replay
imports, exploratory collection on a GPU box, ResNet-L finetuning (reported as unknown)."""


def _speed(stage: str, encoder: str | None, machine: str) -> float | None:
    for s in SPEEDS:
        if s.stage == stage and s.encoder == encoder and s.machine == machine:
            return s.rate
    return None


# -- the graph ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    """One node of the graph: a run folder and the command that fills it."""

    id: str  # data/random__Pong, pretrain/sgi_m__Pong, finetune/reduced_lr@sgi_m, report
    kind: str  # data, pretrain, finetune, report
    folder: Path  # the run folder (the store, for data)
    deps: tuple[str, ...]  # ids of the tasks whose folders it reads
    argv: tuple[str, ...]  # the sgi-lab command line (after `sgi-lab`); () for the report
    stage: str = ""  # the cost stage (collect_random, pretrain, finetune...)
    encoder: str | None = None
    steps: int = 0  # agent steps: collected, or finetuned over every agent
    samples: int = 0  # pretraining samples (steps x batch)
    agents: tuple[tuple[str, int], ...] = ()  # finetune: the population's (game, seed) pairs
    agent_folders: tuple[Path, ...] = ()  # finetune: one run folder per agent
    resources: dict[str, float] = field(default_factory=dict)
    probe: dict[str, Any] = field(default_factory=dict)  # probe: store, settings, objective


@dataclass(frozen=True)
class Graph:
    """An experiment expanded: tasks in dependency order, and what writing it needs."""

    experiment: Experiment
    out: Path
    tasks: tuple[Task, ...]
    params_files: dict[str, dict[str, Any]]  # path -> params payload, written when it runs
    dropped: tuple[str, ...] = ()  # branches left out (a data parameter not given)

    def task(self, task_id: str) -> Task:
        return next(t for t in self.tasks if t.id == task_id)

    def counts(self) -> dict[str, int]:
        return {kind: sum(t.kind == kind for t in self.tasks) for kind in KINDS}


def _fill(text: str, values: dict[str, Any]) -> str:
    class Keep(dict):
        def __missing__(self, key: str) -> str:
            return "{" + key + "}"

    return text.format_map(Keep({k: v for k, v in values.items()}))


def _data_task(name: str, spec: DataSpec, game: str, out: Path, experiment: Experiment) -> Task:
    folder = out / "data" / run_name(name, game)
    values = {**experiment.parameters, "game": game}
    common = ("--game", game, "--out", str(folder), "--no-progress")
    if spec.source == "random":
        argv = ("collect", "random", "--steps", str(spec.steps), "--seed", str(spec.seed), *common)
        steps, stage = spec.steps, "collect_random"
    elif spec.source == "exploratory":
        extra = ("--params", spec.params) if spec.params else ()
        sets = tuple(x for k, v in spec.set.items() for x in ("--set", f"{k}={_yaml_value(v)}"))
        argv = ("collect", "exploratory", "--steps", str(spec.steps), "--seed", str(spec.seed))
        argv = (*argv, *extra, *sets, *common)
        steps, stage = spec.steps, "collect_exploratory"
    else:  # dqn_replay
        runs: list[int | None] = list(spec.runs) or [None]
        srcs = tuple(
            _fill(spec.src or "", values if r is None else {**values, "run": r}) for r in runs
        )
        argv = ("import", "dqn-replay", "--src", *srcs, "--checkpoints")
        argv = (*argv, ",".join(map(str, spec.checkpoints)))
        if spec.samples is not None:
            argv = (*argv, "--samples", str(spec.samples))
        argv = (*argv, *common)
        per = spec.samples or 1_000_000
        steps, stage = per * len(spec.checkpoints) * len(runs), "import_dqn_replay"
    return Task(
        id=f"data/{folder.name}",
        kind="data",
        folder=folder,
        deps=(),
        argv=argv,
        stage=stage,
        steps=steps,
        resources=_resources(experiment, "data"),
    )


def _yaml_value(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def _resources(experiment: Experiment, kind: str) -> dict[str, float]:
    return {**DEFAULT_RESOURCES[kind], **experiment.resources.get(kind, {})}


def _needs_missing(spec: DataSpec, parameters: dict[str, Any]) -> list[str]:
    """The parameters a data source names in ``src`` that were not given (null)."""
    import string

    names = [
        f
        for _, f, _, _ in string.Formatter().parse(spec.src or "")
        if f and f not in ("game", "run")
    ]
    return [n for n in names if parameters.get(n) is None]


def expand(experiment: Experiment, out: str | os.PathLike) -> Graph:
    """The experiment's task graph under folder ``out`` (nothing is written).

    Dataset per (data source, game) -> pretraining per (config, game) -> one finetuning task
    per (finetuning config, pretraining config) training every game x seed as a population ->
    one report. A data source whose ``src`` names a parameter that was not given is dropped
    with every branch that needs it (listed in ``Graph.dropped``).

    Raises:
        ConfigError: a params file is missing or malformed, an override names an unknown key
            or has a wrong type (the messages name the key).
    """
    from sgi_lab.config import FinetuneConfig, PretrainConfig, load_config, read_params, to_dict
    from sgi_lab.train.capacity import split_population
    from sgi_lab.train.finetune import population_configs, population_folders

    out = Path(out).resolve()
    tasks: list[Task] = []
    params_files: dict[str, dict[str, Any]] = {}
    dropped: list[str] = []
    missing = {
        name: needs
        for name, spec in experiment.data.items()
        if (needs := _needs_missing(spec, experiment.parameters))
    }
    for name, needs in missing.items():
        dropped.append(
            f"data {name!r} and the branches on it: give --param "
            + " --param ".join(f"{n}=..." for n in needs)
        )
    used = {p.data for p in [*experiment.pretrain, *experiment.probe] if p.data not in missing}
    data_tasks: dict[tuple[str, str], Task | Path] = {}
    for name in (n for n in experiment.data if n in used):
        spec = experiment.data[name]
        for game in experiment.games:
            if spec.source == "folder":
                data_tasks[name, game] = Path(
                    _fill(spec.src or "", {**experiment.parameters, "game": game})
                )
                continue
            task = _data_task(name, spec, game, out, experiment)
            data_tasks[name, game] = task
            tasks.append(task)

    pretrain_configs: dict[str, Any] = {}
    for spec in experiment.pretrain:
        if spec.data in missing:
            continue
        config = load_config(PretrainConfig, spec.params, spec.set)
        meta = read_params(spec.params)
        pretrain_configs[spec.name] = config
        params_path = out / "params" / f"pretrain__{spec.name}.yaml"
        params_files[str(params_path)] = {
            "name": spec.name,
            "description": meta.get("description", ""),
            "config": to_dict(config),
        }
        for game in experiment.games:
            source = data_tasks[spec.data, game]
            data = source.folder if isinstance(source, Task) else source
            folder = out / "pretrain" / run_name(spec.name, game)
            argv = ("pretrain", "--params", str(params_path), "--data", str(data))
            tasks.append(
                Task(
                    id=f"pretrain/{folder.name}",
                    kind="pretrain",
                    folder=folder,
                    deps=(source.id,) if isinstance(source, Task) else (),
                    argv=(*argv, "--out", str(folder), "--no-progress"),
                    stage="pretrain",
                    encoder=config.encoder,
                    samples=config.steps * config.batch_size,
                    resources=_resources(experiment, "pretrain"),
                )
            )

    for spec in experiment.finetune:
        meta = read_params(spec.params)
        for base in spec.pretrain:
            scratch = base == NO_PRETRAINING
            if not scratch and base not in pretrain_configs:
                dropped.append(f"finetune {spec.name}@{base} (its pretraining was dropped)")
                continue
            overrides = dict(spec.set)
            if not scratch and "encoder" not in overrides:
                overrides["encoder"] = pretrain_configs[base].encoder
            overrides["pretrained"] = None
            config = load_config(FinetuneConfig, spec.params, overrides)
            label = spec.name if scratch else f"{spec.name}__{base}"
            params_path = out / "params" / f"finetune__{run_name(label)}.yaml"
            params_files[str(params_path)] = {
                "name": spec.name,
                "description": meta.get("description", ""),
                "config": to_dict(config),
            }
            folder = out / "finetune" / run_name(label)
            pattern = None if scratch else str(out / "pretrain" / f"{base}__{{game}}")
            configs = population_configs(
                dataclasses.replace(config, pretrained=pattern),
                experiment.games,
                experiment.seeds,
            )
            folder_of = dict(
                zip(
                    ((c.game, c.seed) for c in configs),
                    population_folders(folder, configs),
                    strict=True,
                )
            )
            parts = (
                [(list(experiment.games), list(experiment.seeds))]
                if experiment.max_agents is None
                else split_population(experiment.games, experiment.seeds, experiment.max_agents)
            )
            for k, (games, seeds) in enumerate(parts):
                part = [c for c in configs if c.game in games and c.seed in seeds]
                folders = tuple(folder_of[c.game, c.seed] for c in part)
                # A part of one agent writes its run folder directly (a population of one runs
                # in its --out), the same folder the whole population would give it.
                out_folder = folders[0] if len(part) == 1 else folder
                argv = ["finetune", "--params", str(params_path)]
                argv += ["--game", ",".join(games)]
                argv += ["--seed", ",".join(map(str, seeds))]
                if pattern:
                    argv += ["--pretrained", pattern]
                argv += ["--out", str(out_folder), "--no-progress"]
                deps = () if scratch else tuple(f"pretrain/{run_name(base, g)}" for g in games)
                suffix = f"/part{k + 1}of{len(parts)}" if len(parts) > 1 else ""
                tasks.append(
                    Task(
                        id=f"finetune/{folder.name}{suffix}",
                        kind="finetune",
                        folder=folder,
                        deps=deps,
                        argv=tuple(argv),
                        stage="finetune",
                        encoder=config.encoder,
                        steps=config.steps * len(part),
                        agents=tuple((c.game, c.seed) for c in part),
                        agent_folders=folders,
                        resources=_resources(experiment, "finetune"),
                    )
                )
    # Each probe right after its inputs: an experiment cut short has probed what it pretrained.
    for probe in _probe_tasks(experiment, out, data_tasks, pretrain_configs, missing, dropped):
        after = [i for i, t in enumerate(tasks) if t.id in probe.deps]
        at = max(after) + 1 if after else 0
        while at < len(tasks) and tasks[at].kind == "probe":
            at += 1
        tasks.insert(at, probe)
    finetunes = tuple(t.id for t in tasks if t.kind in ("finetune", "probe"))
    tasks.append(
        Task(
            id="report",
            kind="report",
            folder=out,
            deps=finetunes,
            argv=(),
            resources=_resources(experiment, "report"),
        )
    )
    return Graph(experiment, out, tuple(tasks), params_files, tuple(dropped))


def _probe_tasks(
    experiment: Experiment,
    out: Path,
    data_tasks: dict[tuple[str, str], Task | Path],
    pretrain_configs: dict[str, Any],
    missing: dict[str, list[str]],
    dropped: list[str],
) -> list[Task]:
    """One probe task per (probe config, pretraining config or random seed, game): ``sgi-lab
    probe`` of the pretraining run (its probes.json) or of a random encoder (a folder under
    ``probes/``), on the data source's store of that game."""
    tasks = []
    for spec in experiment.probe:
        if spec.data in missing:
            dropped.append(f"probe {spec.name} (its data {spec.data!r} was dropped)")
            continue
        options = ["--split-seed", str(spec.split_seed), "--no-progress"]
        if spec.max_frames is not None:
            options += ["--max-frames", str(spec.max_frames)]
        if not spec.random_baseline:
            options.append("--no-random-baseline")
        for base in spec.pretrain:
            if base != NO_PRETRAINING and base not in pretrain_configs:
                dropped.append(f"probe {spec.name}@{base} (its pretraining was dropped)")
                continue
            for game in experiment.games:
                source = data_tasks[spec.data, game]
                store = source.folder if isinstance(source, Task) else source
                data_deps = (source.id,) if isinstance(source, Task) else ()
                key = {
                    "store": str(store),
                    "split_seed": spec.split_seed,
                    "max_frames": spec.max_frames,
                    "random_baseline_seed": 0 if spec.random_baseline else None,
                }
                if base == NO_PRETRAINING:
                    encoders = [
                        (
                            out / "probes" / run_name(spec.name, "random_init", f"s{seed}", game),
                            ("--random-init", spec.encoder, "--seed", str(seed)),
                            (),
                            spec.encoder,
                            seed,
                        )
                        for seed in spec.seeds
                    ]
                else:
                    folder = out / "pretrain" / run_name(base, game)
                    config = pretrain_configs[base]
                    encoders = [(folder, (), (f"pretrain/{folder.name}",), config.encoder, None)]
                for folder, how, deps, encoder, seed in encoders:
                    if how:
                        argv = ("probe", *how, "--out", str(folder))
                    else:
                        argv = ("probe", str(folder))
                    label = base if seed is None else f"{base}__s{seed}"
                    tasks.append(
                        Task(
                            id=f"probe/{run_name(spec.name, label, game)}",
                            kind="probe",
                            folder=folder,
                            deps=(*deps, *data_deps),
                            argv=(*argv, "--data", str(store), *options),
                            stage="probe",
                            encoder=encoder,
                            steps=spec.max_frames or getattr(source, "steps", 0),
                            resources=_resources(experiment, "probe"),
                            probe={**key, "objective": base, "seed": seed, "game": game},
                        )
                    )
    return tasks


def estimate_cost(graph: Graph) -> dict[str, Any]:
    """Runs, agent steps, pretraining samples and hours per stage on each machine of `MACHINES`.

    Returns:
        ``{"stages": {stage: {tasks, runs, steps, samples, hours: {machine: h}, unmeasured}},
        "total": {...}, "unknown": [stage/encoder without a measured speed]}``. Hours are one
        process's (or one GPU's) time per task, summed over tasks (divide by the tasks that run
        at once); tasks without a measured speed count 0 and put their machine in
        ``unmeasured``.
    """
    stages: dict[str, dict[str, Any]] = {}
    unknown: set[str] = set()
    for task in graph.tasks:
        if task.kind == "report":
            continue
        row = stages.setdefault(
            task.stage,
            {
                "tasks": 0,
                "runs": 0,
                "steps": 0,
                "samples": 0,
                "hours": dict.fromkeys(MACHINES, 0.0),
            },
        )
        row["tasks"] += 1
        row["runs"] += len(task.agents) or 1
        row["steps"] += task.steps
        row["samples"] += task.samples
        work = task.samples if task.stage == "pretrain" else task.steps
        for machine in MACHINES:
            rate = _speed(task.stage, task.encoder, machine)
            if rate is None:
                unknown.add(f"{task.stage}" + (f"/{task.encoder}" if task.encoder else ""))
                row.setdefault("unmeasured", set()).add(machine)
            else:
                row["hours"][machine] += work / rate / 3600
    total = {
        "tasks": len(graph.tasks),
        "runs": sum(r["runs"] for r in stages.values()),
        "steps": sum(r["steps"] for r in stages.values()),
        "samples": sum(r["samples"] for r in stages.values()),
        "hours": {m: sum(r["hours"][m] for r in stages.values()) for m in MACHINES},
        "unmeasured": set().union(*(r.get("unmeasured", set()) for r in stages.values())),
    }
    return {"stages": stages, "total": total, "unknown": sorted(unknown)}


def _fmt_count(n: float) -> str:
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:.0f}"


def _population_gb(graph: Graph, task: Task) -> float | None:
    """Estimated memory of a finetuning task's agents trained as one population
    (`sgi_lab.train.capacity.agent_bytes` of its resolved config), or None."""
    from sgi_lab.config import FinetuneConfig, build_config
    from sgi_lab.train.capacity import agent_bytes

    argv = list(task.argv)
    if "--params" not in argv:
        return None
    resolved = graph.params_files.get(argv[argv.index("--params") + 1])
    if resolved is None:
        return None
    config = build_config(FinetuneConfig, resolved["config"])
    return agent_bytes(config)["total"] * len(task.agents) / 1e9


def format_plan(graph: Graph) -> str:
    """The graph (one line per task, with its inputs and command) and its estimated cost."""
    e = graph.experiment
    lines = [
        f"experiment {e.name}" + (f" ({e.table})" if e.table else "") + f": {e.description}",
        f"folder {graph.out}",
        f"{len(e.games)} games x {len(e.seeds)} seeds; tasks: "
        + ", ".join(f"{n} {k}" for k, n in graph.counts().items() if n or k != "probe"),
        "",
    ]
    for task in graph.tasks:
        extra = ""
        if task.agents:
            memory = _population_gb(graph, task)
            extra = f"  [{len(task.agents)} agents" + (
                f", ~{memory:.0f} GB as one population]" if memory is not None else "]"
            )
        lines.append(f"{task.id}{extra}")
        if task.deps:
            shown = ", ".join(task.deps[:4]) + (
                f" +{len(task.deps) - 4}" if len(task.deps) > 4 else ""
            )
            lines.append(f"    after {shown}")
        if task.argv:
            lines.append("    sgi-lab " + " ".join(_quote(a) for a in task.argv))
    for note in graph.dropped:
        lines.append(f"dropped: {note}")
    cost = estimate_cost(graph)
    lines += ["", "estimated cost (speeds: benchmarks/README.md; sgi_lab.launch.experiment.SPEEDS)"]
    header = f"{'stage':<20}{'tasks':>6}{'runs':>7}{'agent-steps':>13}{'samples':>10}"
    header += "".join(f"{m + ' h':>12}" for m in MACHINES)
    lines.append(header)

    def hours(row: dict[str, Any], machine: str) -> str:
        h = row["hours"][machine]
        if machine not in row.get("unmeasured", ()):
            return f"{h:>12.1f}"
        return f"{'?':>12}" if h == 0 else f"{f'{h:.1f}+?':>12}"

    for stage, row in [*cost["stages"].items(), ("total", cost["total"])]:
        line = f"{stage:<20}{row.get('tasks', 0):>6}{row['runs']:>7}"
        line += f"{_fmt_count(row['steps']):>13}{_fmt_count(row['samples']):>10}"
        line += "".join(hours(row, m) for m in MACHINES)
        lines.append(line)
    for machine, what in MACHINES.items():
        lines.append(f"  {machine}: {what}")
    lines.append(
        "  hours are summed over tasks (one process or GPU each); finetuning uses one agent's "
        "rate per agent (a batched population is faster)"
    )
    if cost["unknown"]:
        lines.append(f"  ?: no measured speed for {', '.join(cost['unknown'])} (counted as 0)")
    return "\n".join(lines)


def _quote(arg: str) -> str:
    return f"'{arg}'" if any(c in arg for c in " {}*?$") else arg


# -- state of a task ----------------------------------------------------------------------------


def check_experiment_folder(out: str | os.PathLike, name: str) -> None:
    """Refuse ``out`` unless it is missing, empty, or an experiment folder of ours for the
    experiment ``name`` (its ``experiment.json``), before anything in it is written.

    Raises:
        RunFolderError: naming the folder and why (a user's own files, another experiment).
    """
    from sgi_lab.files import LOCK_FILE, RunFolderError, read_mapping

    out = Path(out)
    if not out.exists():
        return
    if not out.is_dir():
        raise RunFolderError(f"{out}: exists and is not a folder; refusing to write there")
    if all(p.name == LOCK_FILE for p in out.iterdir()):
        return
    state = read_mapping(out / STATE_FILE)
    if not isinstance(state.get("tasks"), dict) or "name" not in state:
        raise RunFolderError(
            f"{out}: not empty and not an sgi-lab experiment folder (no {STATE_FILE} of ours); "
            "refusing to write an experiment into it: choose another --out"
        )
    if state["name"] != name:
        raise RunFolderError(
            f"{out}: holds experiment {state['name']!r}, not {name!r}; refusing to write into "
            "it: choose another --out"
        )


def task_done(task: Task) -> bool:
    """Whether a task's folder holds its complete result (then it is skipped)."""
    if task.kind == "data":
        from sgi_lab.data.store import read_manifest

        return task.folder.is_dir() and read_manifest(task.folder) is not None
    if task.kind == "pretrain":
        status = read_status(task.folder) or {}
        return status.get("state") == "finished" and (task.folder / "model.pt").exists()
    if task.kind == "finetune":
        return all(
            (read_status(f) or {}).get("state") == "finished"
            and (f / "eval.json").exists()
            and (f / "model.pt").exists()
            for f in task.agent_folders
        )
    if task.kind == "probe":
        from sgi_lab.probes.core import probe_done

        return probe_done(task.folder, **{k: task.probe[k] for k in PROBE_KEYS})
    return (task.folder / "report.html").exists() and (task.folder / "results.csv").exists()


def _name(graph: Graph, path: str | os.PathLike) -> str:
    """A path under the experiment folder as a storage name (``pretrain/sgi_r__Pong``)."""
    return Path(path).relative_to(graph.out).as_posix()


def stored_task_done(graph: Graph, task: Task, storage: RunStorage) -> bool:
    """`task_done` for run folders kept in a storage URI (the report is always local)."""
    name = _name(graph, task.folder)

    def finished(folder: str, result: str) -> bool:
        status = storage.read_json(f"{folder}/status.json") or {}
        return status.get("state") == "finished" and storage.exists(f"{folder}/{result}")

    if task.kind == "data":
        return storage.read_json(f"{name}/manifest.json") is not None
    if task.kind == "pretrain":
        return finished(name, "model.pt")
    if task.kind == "finetune":
        return all(finished(_name(graph, f), "eval.json") for f in task.agent_folders)
    if task.kind == "probe":
        return storage.read_json(f"{name}/probes.json") is not None
    return task_done(task)


def storage_plan(graph: Graph, task: Task, uri: str) -> dict[str, Any]:
    """What a worker pulls and pushes for ``task`` (`run_in_scratch`'s ``plan``): the params
    files, the folders of its inputs (a pretraining run without its checkpoints), its own folder
    (to resume) and its log."""
    from sgi_lab.data.store import PARTIAL_SUFFIX

    name = _name(graph, task.folder)
    inputs: list[tuple[str, tuple[str, ...]]] = [("params", ())]
    for dep in map(graph.task, task.deps):
        inputs.append(
            (_name(graph, dep.folder), ("checkpoints",) if dep.kind == "pretrain" else ())
        )
    if task.kind == "data":
        outputs = [name, name + PARTIAL_SUFFIX]
    elif task.kind == "finetune":  # its agents' run folders: parts of one population share a folder
        outputs = [_name(graph, f) for f in task.agent_folders]
    else:
        outputs = [name]
    return {
        "uri": uri,
        "out": str(graph.out),
        "task": task.id,
        "inputs": inputs,
        "outputs": outputs,
        "log": _name(graph, _log_path(graph, task)),
    }


def pull_results(graph: Graph, storage: RunStorage) -> None:
    """Mirror what the report reads from a storage URI into the experiment folder: the
    finetuning runs (without their checkpoints) and the logs."""
    kinds = ("finetune", "probe")
    for name in dict.fromkeys(_name(graph, t.folder) for t in graph.tasks if t.kind in kinds):
        storage.pull(name, graph.out / name, exclude=("checkpoints",))
    storage.pull("logs", graph.out / "logs")


def _report_stale(graph: Graph) -> bool:
    report = graph.out / "report.html"
    if not report.exists():
        return True
    newest = 0.0
    for task in graph.tasks:
        results = [f / "eval.json" for f in task.agent_folders]
        if task.kind == "probe":
            results.append(task.folder / "probes.json")
        for path in results:
            if path.exists():
                newest = max(newest, path.stat().st_mtime)
    return newest > report.stat().st_mtime


# -- running one command ------------------------------------------------------------------------


def _task_env(threads: int, memory_share: float = 1.0) -> dict[str, str]:
    from sgi_lab.train.capacity import MEMORY_SHARE_ENV

    env = dict(os.environ)
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[key] = str(threads)
    env.setdefault("PYTHONUNBUFFERED", "1")
    # The task dies with this driver (`die_with_driver`), and waits for the folder's lock a
    # task process left by a killed driver holds while it stops at its next checkpoint.
    env[DRIVER_PID_ENV] = str(os.getpid())
    env.setdefault(LOCK_WAIT_ENV, "300")
    # The part of the device's free memory a task may plan for (`sgi_lab.train.capacity`):
    # tasks sharing a machine must not each size their populations to all of it.
    env[MEMORY_SHARE_ENV] = f"{min(max(memory_share, 0.01), 1.0):.4g}"
    return env


DRIVER_PID_ENV = "SGI_LAB_DRIVER_PID"


def die_with_driver() -> None:
    """In a task process the experiment driver started (``SGI_LAB_DRIVER_PID`` set): receive
    SIGTERM when the driver dies, however it dies (Linux ``PR_SET_PDEATHSIG``; a finetuning or
    pretraining task then checkpoints and stops), and end at once if it is already gone.
    Elsewhere nothing happens."""
    driver = os.environ.pop(DRIVER_PID_ENV, None)  # not for this process's own children
    if not driver or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != driver:
        os.kill(os.getpid(), signal.SIGTERM)  # the driver died before the signal was armed


_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()


def run_command(
    argv: Sequence[str],
    log: str,
    threads: int,
    cwd: str | None = None,
    memory_share: float = 1.0,
) -> dict:
    """Run ``sgi-lab ARGV`` in a subprocess with ``threads`` torch threads and ``memory_share``
    of the free memory to plan populations for, appending its output to ``log``; never raises.
    Returns ``{returncode, seconds, tail}`` (the log's last lines)."""
    command = [sys.executable, "-m", "sgi_lab.launch.cli", *argv]
    started = time.time()
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as fh:
        fh.write(f"\n== {time.strftime('%Y-%m-%dT%H:%M:%S')} sgi-lab {' '.join(argv)}\n")
        fh.flush()
        try:
            proc = subprocess.Popen(
                command,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=_task_env(threads, memory_share),
                cwd=cwd if cwd and Path(cwd).is_dir() else None,
            )
        except OSError as exc:
            fh.write(f"could not start: {exc}\n")
            return {"returncode": -1, "seconds": 0.0, "tail": str(exc)}
        with _LIVE_LOCK:
            _LIVE.add(proc)
        try:
            returncode = proc.wait()
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(proc)
    return {"returncode": returncode, "seconds": time.time() - started, "tail": _tail(log)}


def _tail(log: str, lines: int = 15) -> str:
    try:
        text = Path(log).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


def _stop_children() -> None:
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


# -- executors ----------------------------------------------------------------------------------


class LocalExecutor:
    """At most ``max_parallel`` task processes at a time on this machine."""

    def __init__(self, max_parallel: int, threads: int) -> None:
        self.capacity = max_parallel
        self.threads = threads
        self.pool = ThreadPoolExecutor(max_workers=max_parallel)

    def submit(self, task: Task, log: str, cwd: str, plan: dict | None = None) -> Future:
        # Up to max_parallel tasks share this machine's memory (and GPU).
        run = functools.partial(run_command, memory_share=1.0 / self.capacity)
        if plan is not None:
            return self.pool.submit(run_in_scratch, task.argv, self.threads, cwd, plan, run)
        return self.pool.submit(run, task.argv, log, self.threads, cwd)

    def wait(self, handles: list[Any], timeout: float) -> list[Any]:
        done, _ = wait_futures(handles, timeout=timeout, return_when=FIRST_COMPLETED)
        return list(done)

    @staticmethod
    def result(handle: Future) -> dict:
        return handle.result()

    def check(self, task: Task) -> str | None:
        return None

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _ray_memory_share(resources: dict[str, float]) -> float:
    """A Ray task's part of its node's memory: its GPU fraction (a task holding part of a GPU
    shares it), all of it with a whole GPU, else its CPUs over the node's."""
    gpus = float(resources.get("num_gpus", 0) or 0)
    if gpus > 0:
        return min(gpus, 1.0)
    return min(1.0, float(resources.get("num_cpus", 1) or 1) / (os.cpu_count() or 1))


def _ray_run_command(
    argv: Sequence[str], log: str, threads: int, cwd: str | None, resources: dict | None = None
) -> dict:
    return run_command(argv, log, threads, cwd, _ray_memory_share(resources or {}))


def _ray_run_in_scratch(
    argv: Sequence[str], threads: int, cwd: str | None, plan: dict, resources: dict | None = None
) -> dict:
    run = functools.partial(run_command, memory_share=_ray_memory_share(resources or {}))
    return run_in_scratch(argv, threads, cwd, plan, run)


# Since Ray 2.59 `ray start --head` turns token authentication on by itself when it finds a token
# (~/.ray/auth_token, RAY_AUTH_TOKEN[_PATH]); a driver joining by address does not (by design),
# and is refused with InvalidAuthToken until RAY_AUTH_MODE says so.
RAY_AUTH_HINT = (
    "If the cluster uses token authentication (`ray start` turns it on when ~/.ray/auth_token "
    "exists), set RAY_AUTH_MODE=token here too (and RAY_AUTH_TOKEN when the token is not in "
    "~/.ray/auth_token); see https://docs.ray.io/en/latest/ray-security/token-auth.html"
)


# `ray.init` arguments that start a private local cluster: always a new one, and no dashboard
# (its HTTP server would be one more listener). Ray 2.60 binds its gRPC servers (GCS, raylet,
# workers) to every interface and re-resolves a 127.0.0.1 node address to a routable one, with
# no setting to keep them on the loopback interface; what guards them is Ray's token
# authentication, on by default for a new local cluster since Ray 2.5x (a peer without the
# token, kept in ~/.ray/auth_token, is refused). RAY_AUTH_MODE=disabled turns it off.
LOCAL_RAY = {"address": "local", "include_dashboard": False}


def local_ray(ray: Any, **kwargs: Any) -> None:
    """Start a private local Ray cluster (`LOCAL_RAY`)."""
    ray.init(**LOCAL_RAY, **kwargs)


class RayExecutor:
    """Tasks on a Ray cluster (`ray.remote` with ``num_cpus``/``num_gpus`` per task kind).

    Run folders are written by the workers: every node must see the experiment folder at the
    same path (a shared filesystem), or the run folders go through a storage URI (``--storage``:
    each task pulls its inputs into a scratch folder and pushes its run folder back).
    """

    def __init__(self, address: str | None = None) -> None:
        try:
            import ray
        except ImportError as exc:
            raise ImportError(
                "--executor ray needs Ray, an optional extra: pip install 'sgi-lab[sweep]' "
                "(or pip install 'ray[default]'; or use --executor local)"
            ) from exc
        self.ray = ray
        if not ray.is_initialized():
            # Without an address: a private cluster of this machine (`local_ray`).
            try:
                if address:
                    ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
                else:
                    local_ray(ray, ignore_reinit_error=True, log_to_driver=False)
            except ConnectionError as exc:
                raise ConnectionError(f"{exc}. {RAY_AUTH_HINT}") from exc
        self.remote = ray.remote(_ray_run_command)
        self.remote_in_scratch = ray.remote(_ray_run_in_scratch)
        self.capacity = 10**9  # Ray queues by resources
        self.cluster = ray.cluster_resources()

    def check(self, task: Task) -> str | None:
        """Why the cluster can never run ``task`` (a resource it lacks), or None."""
        for key, ray_key in (("num_cpus", "CPU"), ("num_gpus", "GPU")):
            want = float(task.resources.get(key, 0) or 0)
            have = float(self.cluster.get(ray_key, 0))
            if want > have:
                return (
                    f"asks for {key}={want:g} but the Ray cluster has {have:g} {ray_key}; "
                    f"change the experiment's resources.{task.kind}.{key}"
                )
        return None

    def submit(self, task: Task, log: str, cwd: str, plan: dict | None = None) -> Any:
        threads = max(1, int(task.resources.get("num_cpus", 1) or 1))
        options = {k: float(task.resources.get(k, 0) or 0) for k in RESOURCE_KEYS}
        if plan is not None:
            remote = self.remote_in_scratch.options(**options, max_retries=0)
            return remote.remote(task.argv, threads, cwd, plan, options)
        remote = self.remote.options(**options, max_retries=0)
        return remote.remote(task.argv, log, threads, cwd, options)

    def wait(self, handles: list[Any], timeout: float) -> list[Any]:
        done, _ = self.ray.wait(handles, num_returns=1, timeout=timeout)
        return done

    def result(self, handle: Any) -> dict:
        try:
            return self.ray.get(handle)
        except Exception as exc:  # a worker that died, an object lost with its node
            return {"returncode": -1, "seconds": 0.0, "tail": f"{type(exc).__name__}: {exc}"}

    def close(self) -> None:
        pass


# -- the scheduler ------------------------------------------------------------------------------


def _threads_per_task(max_parallel: int) -> int:
    cores = os.cpu_count() or 1
    return max(1, cores // max(1, max_parallel))


def _oversubscription(graph: Graph, max_parallel: int) -> list[str]:
    """Warnings when the settings ask for more threads than the machine has cores."""
    cores = os.cpu_count() or 1
    notes = []
    if max_parallel > cores:
        notes.append(
            f"--max-parallel {max_parallel} runs more processes than the {cores} cores "
            "(each still gets one torch thread)"
        )
    for path, payload in graph.params_files.items():
        threads = int(payload.get("config", {}).get("threads", 0) or 0)
        if threads and threads * max_parallel > cores:
            notes.append(
                f"{Path(path).name} sets threads={threads}: {max_parallel} processes x {threads} "
                f"threads > {cores} cores"
            )
    share = _threads_per_task(max_parallel)
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if key in os.environ and os.environ[key] != str(share):
            notes.append(f"{key}={os.environ[key]} is replaced per task by {share}")
    return notes


def _log_path(graph: Graph, task: Task) -> Path:
    return graph.out / "logs" / (task.id.replace("/", "__") + ".log")


class _Progress:
    """A tqdm bar over tasks with pending / running / done / failed counts."""

    def __init__(self, total: int, enabled: bool) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, desc="tasks", unit="task", disable=not enabled, leave=True)
        self.enabled = enabled

    def update(self, states: dict[str, str]) -> None:
        counts = {s: sum(v == s for v in states.values()) for s in STATES}
        settled = counts["done"] + counts["failed"] + counts["blocked"]
        self.bar.n = settled
        self.bar.set_postfix_str(
            " ".join(f"{s} {counts[s]}" for s in STATES if counts[s] or s != "blocked"),
            refresh=True,
        )

    def write(self, line: str) -> None:
        if self.enabled:
            self.bar.write(line)

    def close(self) -> None:
        self.bar.close()


STATES = ("pending", "running", "done", "failed", "blocked")


def run_graph(
    graph: Graph,
    executor: str = "local",
    max_parallel: int = 1,
    retries: int = 1,
    address: str | None = None,
    progress: bool = True,
    on_event: Callable[[str, Task, dict], None] | None = None,
    storage: str | None = None,
) -> dict[str, Any]:
    """Run every task of ``graph`` whose folder is not complete, in dependency order.

    Args:
        graph: `expand`'s graph.
        executor: ``"local"`` (subprocesses on this machine) or ``"ray"``.
        max_parallel: local executor: task processes at a time (each gets
            ``cpu_count // max_parallel`` torch threads).
        retries: how many times a failed task is run again before it is reported failed.
        address: Ray executor: the cluster to join (``ray.init(address=...)``; ``auto``: the
            one ``ray start`` runs on this machine); None starts a private local cluster
            (`local_ray`: no dashboard, token authentication).
        progress: the tqdm display of tasks pending / running / done / failed.
        on_event: called as ``on_event(event, task, info)`` for ``started``, ``done``,
            ``retry``, ``failed`` and ``skipped`` (tests use it).
        storage: an fsspec URI (``s3://bucket/exp``) holding the run folders, for a cluster
            without a shared filesystem: each task runs in a scratch folder of its worker that
            pulls its inputs from there and pushes its run folder back (`run_in_scratch`);
            finished tasks are read from there; ``experiment.yaml``, ``params/`` and
            ``experiment.json`` are copied there; the finetuning runs and logs are pulled
            into ``graph.out`` for the report. None: workers write ``graph.out`` directly.

    Returns:
        The ``experiment.json`` payload: per task its state (done, failed or blocked: an input
        failed), attempts, seconds, error (the log's tail) and log; ``counts`` per state.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {EXECUTORS}, got {executor!r}")
    if max_parallel < 1 or retries < 0:
        raise ValueError("max_parallel must be >= 1 and retries >= 0")
    from sgi_lab.files import FolderLock

    out = graph.out
    check_experiment_folder(out, graph.experiment.name)
    out.mkdir(parents=True, exist_ok=True)
    lock = FolderLock(out, f"the experiment {graph.experiment.name!r}", wait=0)
    try:
        return _run_graph(
            graph, out, executor, max_parallel, retries, address, progress, on_event, storage
        )
    finally:
        lock.release()


def _run_graph(graph, out, executor, max_parallel, retries, address, progress, on_event, storage):
    if not (out / STATE_FILE).exists():  # first: what marks the folder as ours
        marker = {"name": graph.experiment.name, "out": str(out), "tasks": {}}
        atomic_write_text(out / STATE_FILE, json.dumps(marker, indent=2))
    atomic_write_text(
        out / EXPERIMENT_FILE, yaml.safe_dump(_experiment_dict(graph), sort_keys=False)
    )
    for path, payload in graph.params_files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, yaml.safe_dump(payload, sort_keys=False))
    if executor == "local":
        for note in _oversubscription(graph, max_parallel):
            warnings.warn(note, RuntimeWarning, stacklevel=2)
    store = RunStorage(storage) if storage else None
    if store is not None and store.is_folder(out):
        raise ValueError(f"--storage {storage} is --out itself: leave --storage out instead")
    if store is not None:
        store.push(out / EXPERIMENT_FILE, EXPERIMENT_FILE)
        store.push(out / "params", "params")

    def done(task: Task) -> bool:
        if store is None or task.kind == "report":
            return task_done(task)
        return stored_task_done(graph, task, store)

    runner = (
        LocalExecutor(max_parallel, _threads_per_task(max_parallel))
        if executor == "local"
        else RayExecutor(address)
    )
    states = {t.id: "pending" for t in graph.tasks}
    info: dict[str, dict[str, Any]] = {
        t.id: {
            "kind": t.kind,
            "folder": str(t.folder),
            "attempts": 0,
            "log": str(_log_path(graph, t)),
        }
        for t in graph.tasks
    }
    emit = on_event or (lambda event, task, data: None)
    for task in graph.tasks:
        if task.kind != "report" and done(task):
            states[task.id] = "done"
            info[task.id]["skipped"] = True
            emit("skipped", task, info[task.id])
    started_at = time.strftime("%Y-%m-%dT%H:%M:%S")
    pushed = {"state": ""}

    def save() -> dict[str, Any]:
        for task_id, state in states.items():
            info[task_id]["state"] = state
        payload = {
            "name": graph.experiment.name,
            "out": str(out),
            "executor": executor,
            "started": started_at,
            "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "counts": {s: sum(v == s for v in states.values()) for s in STATES},
            "dropped": list(graph.dropped),
            "tasks": info,
        }
        text = json.dumps(payload, indent=2, default=str)
        atomic_write_text(out / STATE_FILE, text)
        state = text.replace(payload["updated"], "")
        if store is not None and state != pushed["state"]:
            store.write_text(STATE_FILE, text)
            pushed["state"] = state
        return payload

    display = _Progress(len(graph.tasks), progress)
    running: dict[Any, Task] = {}
    cwd = str(Path.cwd())
    try:
        while True:
            for task in graph.tasks:
                if states[task.id] != "pending":
                    continue
                deps = [states[d] for d in task.deps]
                if task.kind == "report":
                    if all(d in ("done", "failed", "blocked") for d in deps) and not running:
                        if store is not None:
                            pull_results(graph, store)
                        _run_report(graph, task, states, info, display, emit)
                        if store is not None and states[task.id] == "done":
                            for name in ("report.html", "results.csv", "results.aggregates.csv"):
                                if (out / name).exists():
                                    store.push(out / name, name)
                    continue
                if any(d in ("failed", "blocked") for d in deps):
                    states[task.id] = "blocked"
                    info[task.id]["error"] = "an input failed: " + ", ".join(
                        d for d in task.deps if states[d] != "done"
                    )
                    continue
                if all(d == "done" for d in deps) and len(running) < runner.capacity:
                    problem = runner.check(task)
                    if problem:
                        states[task.id] = "failed"
                        info[task.id]["error"] = problem
                        display.write(f"failed  {task.id}: {problem}")
                        emit("failed", task, info[task.id])
                        continue
                    info[task.id]["attempts"] += 1
                    plan = storage_plan(graph, task, storage) if storage else None
                    handle = runner.submit(task, info[task.id]["log"], cwd, plan)
                    running[handle] = task
                    states[task.id] = "running"
                    emit("started", task, info[task.id])
            save()
            display.update(states)
            if not running:
                if all(s != "pending" for s in states.values()):
                    break
                if not any(states[t.id] == "pending" and t.kind == "report" for t in graph.tasks):
                    break  # nothing can start (cannot happen in a DAG; a guard)
                continue
            for handle in runner.wait(list(running), timeout=1.0):
                task = running.pop(handle)
                result = runner.result(handle)
                entry = info[task.id]
                entry["seconds"] = round(entry.get("seconds", 0.0) + result["seconds"], 1)
                if store is not None:  # the log, where experiment.json says it is
                    log = _log_path(graph, task)
                    store.pull(_name(graph, log), log)
                if result["returncode"] == 0 and done(task):
                    states[task.id] = "done"
                    entry.pop("error", None)
                    display.write(f"done    {task.id} ({result['seconds']:.0f} s)")
                    emit("done", task, entry)
                    continue
                entry["error"] = result["tail"] or f"exit status {result['returncode']}"
                if entry["attempts"] <= retries:
                    states[task.id] = "pending"
                    display.write(f"retry   {task.id} (attempt {entry['attempts']} failed)")
                    emit("retry", task, entry)
                else:
                    states[task.id] = "failed"
                    display.write(f"failed  {task.id}: see {entry['log']}")
                    emit("failed", task, entry)
    except BaseException:
        if executor == "local":
            _stop_children()
        for task in running.values():
            states[task.id] = "pending"
            info[task.id]["error"] = "interrupted (run the experiment again to resume)"
        save()
        raise
    finally:
        runner.close()
        display.close()
    return save()


def _run_report(graph, task, states, info, display, emit) -> None:
    entry = info[task.id]
    finished = [d for d in task.deps if states[d] == "done"]
    if task.kind == "report" and not finished:
        states[task.id] = "blocked"
        entry["error"] = "no finetuning task finished"
        return
    if all(states[d] == "done" for d in task.deps) and not _report_stale(graph) and task_done(task):
        states[task.id] = "done"
        entry["skipped"] = True
        emit("skipped", task, entry)
        return
    entry["attempts"] += 1
    started = time.time()
    try:
        write_report(graph)
    except Exception as exc:
        states[task.id] = "failed"
        entry["error"] = f"{type(exc).__name__}: {exc}"
        display.write(f"failed  report: {entry['error']}")
        emit("failed", task, entry)
        return
    entry["seconds"] = round(time.time() - started, 1)
    states[task.id] = "done"
    display.write(f"done    report -> {graph.out / 'report.html'}")
    emit("done", task, entry)


def _experiment_dict(graph: Graph) -> dict[str, Any]:
    return json.loads(json.dumps(dataclasses.asdict(graph.experiment), default=str))


# -- the report ---------------------------------------------------------------------------------


def finished_agent_folders(graph: Graph) -> list[Path]:
    """Every finetuning agent folder of the graph that finished with an evaluation."""
    return [
        f
        for t in graph.tasks
        for f in t.agent_folders
        if (read_status(f) or {}).get("state") == "finished" and (f / "eval.json").exists()
    ]


def write_report(graph: Graph, reps: int = 2000) -> Path:
    """``report.html``, ``results.csv`` (per game) and ``results.aggregates.csv`` of the
    experiment's finished finetuning runs, beside the paper's column for each configuration.

    Returns:
        The path of report.html.
    """
    import html

    import pandas as pd

    from sgi_lab.analysis.report import format_aggregates, report
    from sgi_lab.viz import interval_plot, per_game_hns_figure

    out = graph.out
    if not any(t.kind == "finetune" for t in graph.tasks):  # a probe study
        from sgi_lab.probes.study import write_probe_report

        return write_probe_report(graph)
    runs = finished_agent_folders(graph)
    per_game, aggregates = report(runs, csv=out / "results.csv", reps=reps)
    figures = []
    ours = aggregates[["method", "metric", "value", "lower", "upper"]]
    paper = aggregates.dropna(subset=["paper_same_games"]).assign(
        method=lambda d: d["paper_config"].astype(str) + " (paper, same games)",
        value=lambda d: d["paper_same_games"],
        lower=float("nan"),
        upper=float("nan"),
    )[["method", "metric", "value", "lower", "upper"]]
    both = pd.concat([ours, paper], ignore_index=True)
    metrics = [m for m in ("iqm", "median", "mean") if m in set(both["metric"])]
    figures.append(interval_plot(both, metrics=metrics, title="Aggregate HNS (95% CIs over runs)"))
    bars = per_game[["method", "game", "hns"]]
    paper_bars = per_game.dropna(subset=["paper_hns"]).assign(
        method=lambda d: d["paper_config"].astype(str) + " (paper)", hns=lambda d: d["paper_hns"]
    )[["method", "game", "hns"]]
    paper_bars = paper_bars.drop_duplicates(["method", "game"])
    figures.append(per_game_hns_figure(pd.concat([bars, paper_bars], ignore_index=True)))
    states = {}
    state_file = out / STATE_FILE
    if state_file.exists():
        states = json.loads(state_file.read_text()).get("tasks", {})
    failed = {k: v for k, v in states.items() if v.get("state") in ("failed", "blocked")}
    e = graph.experiment
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(e.name)}</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}</style></head><body>",
        f"<h1>Experiment {html.escape(e.name)}</h1>",
        f"<p>{html.escape(e.description)}"
        + (f" (paper {html.escape(e.table)})" if e.table else "")
        + f"; {len(runs)} finetuning runs, {len(e.games)} games x {len(e.seeds)} seeds.</p>",
    ]
    if failed or graph.dropped:
        parts.append("<h2>Missing</h2><ul>")
        for task_id, entry in failed.items():
            parts.append(
                f"<li>{html.escape(task_id)}: {entry.get('state')} "
                f"(log {html.escape(str(entry.get('log', '')))})</li>"
            )
        parts += [f"<li>dropped: {html.escape(d)}</li>" for d in graph.dropped]
        parts.append("</ul>")
    parts.append("<h2>Aggregates (HNS; 95% stratified bootstrap CIs over runs)</h2>")
    parts.append(format_aggregates(aggregates).to_html(index=False, na_rep="-"))
    for i, fig in enumerate(figures):
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0)))
    parts.append("<h2>Per game (mean raw score over runs; the paper's column beside)</h2>")
    parts.append(per_game.to_html(index=False, float_format=lambda x: f"{x:.3f}", na_rep="-"))
    parts.append("</body></html>")
    path = out / "report.html"
    atomic_write_text(path, "\n".join(parts))
    return path


# -- the whole thing ----------------------------------------------------------------------------


def run_experiment(
    file: str | os.PathLike,
    out: str | os.PathLike,
    parameters: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """`load_experiment` + `expand` + `run_graph` (keyword arguments go to `run_graph`)."""
    return run_graph(expand(load_experiment(file, parameters), out), **kwargs)


def load_graph(out: str | os.PathLike) -> Graph:
    """The graph of an experiment folder, from the ``experiment.yaml`` it holds."""
    return expand(load_experiment(Path(out) / EXPERIMENT_FILE), out)


def main_experiment(args: argparse.Namespace) -> int:
    """``sgi-lab experiment FILE --out DIR [--executor local|ray] [--dry-run] ...``."""
    from sgi_lab.config import parse_value

    parameters = {}
    for item in args.param or []:
        if "=" not in item:
            raise ConfigError(f"--param {item!r} must look like KEY=VALUE")
        key, raw = item.split("=", 1)
        parameters[key.strip()] = parse_value(raw)
    experiment = load_experiment(args.file, parameters)
    out = args.out or Path("outputs/experiments") / experiment.name
    graph = expand(experiment, out)
    if args.dry_run:
        print(format_plan(graph))
        return 0
    if args.report_only:
        check_experiment_folder(graph.out, experiment.name)
        if args.storage:
            pull_results(graph, RunStorage(args.storage))
        print(f"wrote {write_report(graph)}")
        return 0
    summary = run_graph(
        graph,
        executor=args.executor,
        max_parallel=args.max_parallel,
        retries=args.retries,
        address=args.address,
        progress=not args.no_progress,
        storage=args.storage,
    )
    bad = {k: v for k, v in summary["tasks"].items() if v["state"] in ("failed", "blocked")}
    for task_id, entry in bad.items():
        print(f"\n{entry['state']}: {task_id} (log {entry['log']})", file=sys.stderr)
        print(_indent(entry.get("error") or ""), file=sys.stderr)
    print(json.dumps(summary["counts"]))
    if (graph.out / "report.html").exists():
        print(f"report: {graph.out / 'report.html'}")
    return 1 if bad else 0


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def add_experiment_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``experiment`` on an argparse sub-parser set; the handler is ``args.handler``."""
    p = subparsers.add_parser(
        "experiment",
        help="run a table of the paper (params/experiments/*.yaml) as a task graph",
        description="Expand an experiment file into its task graph (datasets -> pretraining -> "
        "finetuning populations -> report) and run it locally or on Ray. Re-run to resume.",
    )
    p.add_argument("file", type=Path, help="params/experiments/NAME.yaml")
    p.add_argument("--out", type=Path, default=None, help="default outputs/experiments/<name>")
    p.add_argument("--executor", choices=EXECUTORS, default="local")
    p.add_argument("--address", default=None, help="Ray: the cluster to join (host:port, auto)")
    p.add_argument(
        "--storage",
        default=None,
        metavar="URI",
        help="keep the run folders at an fsspec URI (s3://bucket/exp, gs://..., file:///...) "
        "for a cluster without a shared filesystem; the report is written to --out",
    )
    p.add_argument("--dry-run", action="store_true", help="print the graph and its cost only")
    p.add_argument("--max-parallel", type=int, default=1, help="local: task processes at a time")
    p.add_argument("--retries", type=int, default=1, help="runs again of a failed task")
    p.add_argument("--param", action="append", metavar="KEY=VALUE", help="an experiment parameter")
    p.add_argument("--report-only", action="store_true", help="write the report of what finished")
    p.add_argument("--no-progress", action="store_true", help="no progress display")
    p.set_defaults(handler=main_experiment)
    return p
