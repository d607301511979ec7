"""An experiment as a task graph: `Task`, `Graph` and `expand`, which builds it (nothing is
written)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sgi_lab.base.files import read_mapping
from sgi_lab.config import (
    ConfigError,
    FinetuneConfig,
    PretrainConfig,
    build_config,
    load_config,
    read_params,
    to_dict,
)
from sgi_lab.envs.factory import observation_spec
from sgi_lab.experiments.data_tasks import (
    data_task_fields,
    data_used,
    dependency_order,
    fill_values,
    needs_missing,
)
from sgi_lab.experiments.data_tasks import fill as _fill
from sgi_lab.experiments.probe_tasks import probe_task_fields
from sgi_lab.experiments.spec import (
    DEFAULT_RESOURCES,
    KINDS,
    NO_PRETRAINING,
    Experiment,
)
from sgi_lab.runs.folder import recorded_config, run_name
from sgi_lab.runs.status import (
    REBUILT_FILE,
    has_final_model,
    read_status,
    rebuilt_record,
    restored_files,
)
from sgi_lab.train.capacity import split_agents, split_population
from sgi_lab.train.finetune import population_configs, population_folders
from sgi_lab.train.population import POPULATION_KEYS

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
    config: dict[str, Any] = field(default_factory=dict)  # what its runs must record (state.py)


@dataclass(frozen=True)
class Graph:
    """An experiment expanded: tasks in dependency order, and what writing it needs."""

    experiment: Experiment
    out: Path
    tasks: tuple[Task, ...]
    params_files: dict[str, dict[str, Any]]  # path -> params payload, written when it runs
    dropped: tuple[str, ...] = ()  # branches left out (a data parameter not given)
    missing_data: tuple[str, ...] = ()  # folder stores not made yet: what makes each (`make`)

    def task(self, task_id: str) -> Task:
        return next(t for t in self.tasks if t.id == task_id)

    def counts(self) -> dict[str, int]:
        return {kind: sum(t.kind == kind for t in self.tasks) for kind in KINDS}

    def readers(self) -> dict[str, list[str]]:
        """Each task id -> the ids of the tasks that read it (have it in their deps)."""
        found: dict[str, list[str]] = {}
        for task in self.tasks:
            for dep in task.deps:
                found.setdefault(dep, []).append(task.id)
        return found


def _resources(experiment: Experiment, kind: str) -> dict[str, float]:
    return {**DEFAULT_RESOURCES[kind], **experiment.resources.get(kind, {})}


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
    out = Path(out).resolve()
    tasks: list[Task] = []
    params_files: dict[str, dict[str, Any]] = {}
    dropped: list[str] = []
    missing = {
        name: needs
        for name, spec in experiment.data.items()
        if (needs := needs_missing(spec, experiment.parameters))
    }
    for name, needs in missing.items():
        dropped.append(
            f"data {name!r} and the branches on it: give --param "
            + " --param ".join(f"{n}=..." for n in needs)
        )
    used = data_used(experiment, missing)
    data_tasks: dict[tuple[str, str], Task | Path] = {}
    unmade: dict[str, str] = {}  # folder source of `make` -> a line on its missing store
    for name in (n for n in experiment.data if n in used):
        spec = experiment.data[name]
        for game in experiment.games:
            if spec.source == "folder":
                values = fill_values(experiment, game)
                data_tasks[name, game] = store = Path(_fill(spec.src or "", values))
                if spec.make and not store.exists():  # the first game's missing store
                    unmade.setdefault(
                        name,
                        f"data.{name}: {store} is not made yet; make it first with: "
                        + _fill(spec.make, values),
                    )
                continue
            fields = data_task_fields(name, spec, game, out, experiment)
            task = Task(**fields, resources=_resources(experiment, "data"))
            data_tasks[name, game] = task
            tasks.append(task)

    reused: dict[str, str] = {}  # pretraining configs whose runs are reused: their pattern
    pretrain_configs = _pretrain_tasks(
        experiment, out, data_tasks, missing, tasks, params_files, reused
    )
    tasks += _finetune_tasks(experiment, out, pretrain_configs, params_files, dropped, reused)
    # Each probe right after its inputs: an experiment cut short has probed what it pretrained.
    probes = probe_task_fields(experiment, out, data_tasks, pretrain_configs, missing, dropped)
    for probe in (Task(**f, resources=_resources(experiment, "probe")) for f in probes):
        after = [i for i, t in enumerate(tasks) if t.id in probe.deps]
        at = max(after) + 1 if after else 0
        while at < len(tasks) and tasks[at].kind == "probe":
            at += 1
        tasks.insert(at, probe)
    finetunes = tuple(t.id for t in tasks if t.kind in ("finetune", "probe"))
    finetunes = finetunes or tuple(t.id for t in tasks)  # a file that only makes data
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
    graph = Graph(experiment, out, dependency_order(tasks), params_files, tuple(dropped))
    graph = dataclasses.replace(graph, missing_data=tuple(unmade.values()))
    check_inside(graph)
    return graph


def is_agent_task(task: Task) -> bool:
    """A pretraining task of kind ``agent``: an agent trained from scratch by `sgi-lab finetune`
    (a positive control's source, or the maker of a replay's data)."""
    return task.kind == "pretrain" and task.argv[:1] == ("finetune",)


def is_data_experiment(graph: Graph) -> bool:
    """No finetuning or probe task: the experiment makes data and agents only."""
    return not any(t.kind in ("finetune", "probe") for t in graph.tasks)


def check_inside(graph: Graph) -> None:
    """Refuse a graph that would write outside its folder: every task's folder, agent folder,
    log and params file, resolved (symlinks followed), must lie under ``graph.out``.

    Raises:
        ConfigError: naming the task (or params file) and the path that escapes.
    """
    out = graph.out.resolve()
    written: list[tuple[str, Path]] = [("params file", Path(p)) for p in graph.params_files]
    for task in graph.tasks:
        written.append((f"task {task.id}", task.folder))
        written += [(f"task {task.id}", f) for f in task.agent_folders]
        written.append(
            (f"task {task.id}'s log", out / "logs" / f"{task.id.replace('/', '__')}.log")
        )
    for what, path in written:
        resolved = path.resolve()
        if resolved != out and not resolved.is_relative_to(out):
            raise ConfigError(
                f"{what}: {path} resolves to {resolved}, outside the experiment folder {out}; "
                "refusing to write there (a name or a symlink leads out of --out)"
            )


def _pretrain_tasks(
    experiment: Experiment,
    out: Path,
    data_tasks: dict[tuple[str, str], Task | Path],
    missing: dict[str, list[str]],
    tasks: list[Task],
    params_files: dict[str, dict[str, Any]],
    reused: dict[str, str],
) -> dict[str, Any]:
    """One pretraining task per (pretraining config, game), appended to ``tasks``, each config's
    resolved params added to ``params_files``; a config that reuses finished runs (``run:``)
    gets no task, its pattern put in ``reused``. Returns the configs by name."""

    pretrain_configs: dict[str, Any] = {}
    for i, spec in enumerate(experiment.pretrain):
        if spec.run:
            # absolute: the task processes may run elsewhere (a Ray worker, a scratch folder)
            pattern = str(Path(_fill(spec.run, experiment.parameters)).expanduser().absolute())
            pretrain_configs[spec.name] = _reused_config(f"pretrain[{i}].run", pattern, experiment)
            reused[spec.name] = pattern
            continue
        if spec.kind == "agent":
            pretrain_configs[spec.name] = _agent_tasks(spec, experiment, out, tasks, params_files)
            continue
        if spec.data in missing:
            continue
        config = load_config(PretrainConfig, spec.params, spec.set)
        pretrain_configs[spec.name] = config
        params_path = _params_file(out, "pretrain", spec, config, params_files)
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
                    config=to_dict(config),
                )
            )

    return pretrain_configs


def _params_file(
    out: Path, prefix: str, spec: Any, config: Any, params_files: dict[str, dict[str, Any]]
) -> Path:
    """A pretraining config's resolved params file, added to ``params_files`` (written later)."""
    path = out / "params" / f"{run_name(prefix, spec.name)}.yaml"
    description = read_params(spec.params).get("description", "")
    params_files[str(path)] = {
        "name": spec.name,
        "description": description,
        "config": to_dict(config),
    }
    return path


def _agent_tasks(
    spec: Any,
    experiment: Experiment,
    out: Path,
    tasks: list[Task],
    params_files: dict[str, dict[str, Any]],
) -> FinetuneConfig:
    """A pretraining config of kind ``agent`` (the positive control's source): a task per game
    training a from-scratch agent (``sgi-lab finetune``) into ``pretrain/NAME__GAME``, which
    finetuning loads as a pretraining run (`sgi_lab.train.transfer.agent_part`)."""
    config = load_config(FinetuneConfig, spec.params, {**spec.set, "pretrained": None})
    params_path = _params_file(out, "agent", spec, config, params_files)
    for game in experiment.games:
        folder = out / "pretrain" / run_name(spec.name, game)
        argv = ("finetune", "--params", str(params_path), "--game", game)
        argv += ("--seed", str(config.seed), "--out", str(folder), "--no-progress")
        tasks.append(
            Task(
                id=f"pretrain/{folder.name}",
                kind="pretrain",
                folder=folder,
                deps=(),
                argv=argv,
                stage="finetune",
                encoder=config.encoder,
                steps=config.steps,
                agents=((game, config.seed),),
                agent_folders=(folder,),
                resources=_resources(experiment, "finetune"),
                config=to_dict(config),
            )
        )
    return config


def _reused_config(where: str, pattern: str, experiment: Experiment) -> PretrainConfig:
    """The config of the finished pretraining runs ``pattern`` names, one per game (``{game}``:
    the game's slug), read from the first game's ``config.yaml``; every game's run must be a
    finished pretraining run with its model and the same encoder (or one restored from an
    archive, `sgi_lab.experiments.archive`: its config without the model, enough for the
    graph; a finetuning task that would load it refuses it when it runs). A run pretrained
    again after a restore (``sgi-lab experiment --rebuild``) is reused only when it reproduced
    the archived run (its ``rebuilt.json``).

    Raises:
        ConfigError: naming the folder and what it lacks."""
    encoders = {}
    config = None
    for game in experiment.games:
        folder = Path(pattern.replace("{game}", run_name(game))).expanduser()
        status = read_status(folder) or {}
        if status.get("kind") != "pretrain" or not (folder / "config.yaml").is_file():
            raise ConfigError(
                f"{where}: {folder}: not a pretraining run folder (no status.json of a "
                "pretraining run); run: names finished runs to reuse"
            )
        restored = "config.yaml" in restored_files(folder)  # its results, not its model
        if status.get("state") != "finished" or not (has_final_model(folder, status) or restored):
            raise ConfigError(
                f"{where}: {folder}: not finished (state {status.get('state')!r}, step "
                f"{status.get('step')}); finish it where it was started, then run this again"
            )
        rebuilt = rebuilt_record(folder)
        if rebuilt is not None and not rebuilt["same"]:
            raise ConfigError(
                f"{where}: {folder}: pretrained again (--rebuild) after a restore, but not the "
                f"archived run ({rebuilt['first_difference']}, its {REBUILT_FILE}): the results "
                "archived beside it came from another encoder; rebuild it with the command "
                "that made it (the same code, torch threads a task and SGI_LAB_CPU_SETTINGS)"
            )
        values = recorded_config(read_mapping(folder / "config.yaml"))
        known = {f.name for f in dataclasses.fields(PretrainConfig)}
        this = build_config(PretrainConfig, {k: v for k, v in values.items() if k in known})
        encoders[game] = this.encoder
        config = config or this
    if len(set(encoders.values())) > 1:
        raise ConfigError(f"{where}: the runs have different encoders {encoders}")
    assert config is not None  # an experiment has at least one game
    return config


@dataclass(frozen=True)
class _Branch:
    """One (finetuning config, pretraining config) pair: its label, resolved config (with the
    pretrained pattern), params file and the run folder of each of its games x seeds."""

    spec_name: str
    base: str
    label: str
    config: FinetuneConfig
    params_path: Path
    folder: Path
    pattern: str | None
    configs: tuple[FinetuneConfig, ...]
    folder_of: dict[tuple[str, int], Path]
    seeds: tuple[int, ...]
    reused: bool = False  # its pretrained runs are another experiment's (no task to wait for)


def _finetune_branches(
    experiment: Experiment,
    out: Path,
    pretrain_configs: dict[str, Any],
    params_files: dict[str, dict[str, Any]],
    dropped: list[str],
    reused: dict[str, str],
) -> list[_Branch]:
    """Every (finetuning config, pretraining config) pair of the experiment, its resolved
    params added to ``params_files``; a pair whose pretraining was dropped added to
    ``dropped``."""
    branches = []
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
            pattern = (
                None if scratch else reused.get(base) or str(out / "pretrain" / f"{base}__{{game}}")
            )
            seeds = spec.seeds if spec.seeds is not None else experiment.seeds
            configs = population_configs(
                dataclasses.replace(config, pretrained=pattern), experiment.games, seeds
            )
            folder_of = dict(
                zip(
                    ((c.game, c.seed) for c in configs),
                    population_folders(folder, configs),
                    strict=True,
                )
            )
            branches.append(
                _Branch(
                    spec.name,
                    base,
                    label,
                    config,
                    params_path,
                    folder,
                    pattern,
                    tuple(configs),
                    folder_of,
                    tuple(seeds),
                    reused=base in reused,
                )
            )
    return branches


def _finetune_tasks(
    experiment: Experiment,
    out: Path,
    pretrain_configs: dict[str, Any],
    params_files: dict[str, dict[str, Any]],
    dropped: list[str],
    reused: dict[str, str],
) -> list[Task]:
    """One finetuning task per (finetuning config, pretraining config) training every game x seed
    as a population (or per part of it, with ``max_agents``), or with ``share_populations``
    the configs that may share a population together (`_shared_finetune_tasks`); each config's
    resolved params added to ``params_files``; a branch whose pretraining was dropped added to
    ``dropped``."""
    branches = _finetune_branches(experiment, out, pretrain_configs, params_files, dropped, reused)
    if experiment.share_populations:
        return _shared_finetune_tasks(experiment, out, branches, params_files)
    tasks: list[Task] = []
    for branch in branches:
        config, folder, pattern = branch.config, branch.folder, branch.pattern
        parts = [
            part
            for games in _same_observation(experiment.games, config)
            for part in (
                [(games, list(branch.seeds))]
                if experiment.max_agents is None
                else split_population(games, list(branch.seeds), experiment.max_agents)
            )
        ]
        for k, (games, seeds) in enumerate(parts):
            part = [c for c in branch.configs if c.game in games and c.seed in seeds]
            folders = tuple(branch.folder_of[c.game, c.seed] for c in part)
            # A part of one agent writes its run folder directly (a population of one runs
            # in its --out), the same folder the whole population would give it.
            out_folder = folders[0] if len(part) == 1 else folder
            argv = ["finetune", "--params", str(branch.params_path)]
            argv += ["--game", ",".join(games)]
            argv += ["--seed", ",".join(map(str, seeds))]
            if pattern:
                argv += ["--pretrained", pattern]
            argv += ["--out", str(out_folder), "--no-progress"]
            deps = (
                ()
                if pattern is None or branch.reused
                else tuple(f"pretrain/{run_name(branch.base, g)}" for g in games)
            )
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
                    config=to_dict(config),
                )
            )
    return tasks


def _sharing_key(config: FinetuneConfig) -> tuple[Any, ...]:
    """What agents of one population must share: every config key but
    `sgi_lab.train.population.POPULATION_KEYS`, and whether the encoder is frozen (a frozen
    encoder beside a trained one is refused: its batch norm runs on other statistics)."""
    values = to_dict(config)
    return (
        config.scheme == "frozen",
        *sorted((k, repr(v)) for k, v in values.items() if k not in POPULATION_KEYS),
    )


def _shared_finetune_tasks(
    experiment: Experiment,
    out: Path,
    branches: list[_Branch],
    params_files: dict[str, dict[str, Any]],
) -> list[Task]:
    """``share_populations``: every branch whose configs differ only in `POPULATION_KEYS`
    (the pretrained encoder, the scheme and its learning rates: reduced-lr, naive and
    from-scratch agents together; frozen ones apart) trains as one population per observation
    shape, each agent into the same run folder as its own branch's population would give it,
    so results, reports and resume read the same folders either way. ``max_agents`` splits a
    population into consecutive parts. Each population's agents are listed in a file under
    ``params/`` (``sgi-lab finetune --agents``)."""
    groups: dict[tuple[Any, ...], list[_Branch]] = {}
    for branch in branches:
        groups.setdefault(_sharing_key(branch.config), []).append(branch)
    tasks: list[Task] = []
    for members in groups.values():
        config = members[0].config
        names = "+".join(dict.fromkeys(b.spec_name for b in members))
        for games in _same_observation(experiment.games, config):
            agents = [
                (b, c) for b in members for c in b.configs if c.game in games
            ]  # branch-major: a part holds whole branches where it can
            parts = (
                [agents]
                if experiment.max_agents is None
                else split_agents(agents, experiment.max_agents)
            )
            name = run_name(names, *games)  # reduced_lr-sgi_none__minatar-asterix__minatar-breakout
            for k, part in enumerate(parts):
                suffix = f"/part{k + 1}of{len(parts)}" if len(parts) > 1 else ""
                part_name = run_name(name, suffix.strip("/"))
                agents_path = out / "params" / f"population__{part_name}.yaml"
                params_files[str(agents_path)] = {
                    "description": f"a shared finetuning population: {names} on "
                    + ", ".join(games),
                    "agents": [
                        {
                            "label": b.label,
                            "params": str(b.params_path),
                            "game": c.game,
                            "seed": c.seed,
                            "pretrained": c.pretrained,
                            "out": str(b.folder_of[c.game, c.seed]),
                        }
                        for b, c in part
                    ],
                }
                deps = tuple(
                    dict.fromkeys(
                        f"pretrain/{run_name(b.base, c.game)}"
                        for b, c in part
                        if b.pattern and not b.reused
                    )
                )
                tasks.append(
                    Task(
                        id=f"finetune/shared/{name}{suffix}",
                        kind="finetune",
                        folder=out / "finetune",
                        deps=deps,
                        argv=("finetune", "--agents", str(agents_path), "--no-progress"),
                        stage="finetune",
                        encoder=config.encoder,
                        steps=sum(c.steps for _, c in part),
                        agents=tuple((c.game, c.seed) for _, c in part),
                        agent_folders=tuple(b.folder_of[c.game, c.seed] for b, c in part),
                        resources=_resources(experiment, "finetune"),
                    )
                )
    return tasks


def _same_observation(games: list[str], config: FinetuneConfig) -> list[list[str]]:
    """``games`` grouped by observation spec, in their order: one population shares one input
    shape, so MinAtar games of different channel counts (Breakout and Asterix 4, Space Invaders
    6, Freeway 7, Seaquest 10) train as separate populations; Atari games are one group."""
    groups: dict[Any, list[str]] = {}
    for game in games:  # (an Atari game's spec ignores MinAtar's frames and channels)
        groups.setdefault(observation_spec(game, config.frames, config.channels), []).append(game)
    return list(groups.values())
