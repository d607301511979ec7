"""The experiment file: its dataclasses (`Experiment`, one spec per stage) and
`load_experiment`, which reads and checks it."""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sgi_lab.base.paths import did_you_mean
from sgi_lab.base.yaml_io import short_repr
from sgi_lab.config import (
    OLD_SPR_KEYS,
    ConfigError,
    ExploreConfig,
    FinetuneConfig,
    PretrainConfig,
    check_key_value,
    check_value,
    load_yaml_mapping,
)
from sgi_lab.envs.factory import canonical_env_game
from sgi_lab.envs.games import ATARI_100K_GAMES, UnknownGameError
from sgi_lab.envs.minatar import is_minatar
from sgi_lab.experiments.design import (
    NO_PRETRAINING,
    check_draws,
    check_question,
    expand_draws,
)
from sgi_lab.probes.atariari import UnannotatedGameError, annotations

EXECUTORS = ("local", "ray")
EXPERIMENT_FILE = "experiment.yaml"
STATE_FILE = "experiment.json"
PROBE_KEYS = ("store", "split_seed", "max_frames", "random_baseline_seed", "readout", "features")
KINDS = ("data", "pretrain", "finetune", "probe", "report")
# A name that becomes part of a path (a run folder, a params file, the default --out): one path
# part of letters, digits, '_', '-' and '.', not starting with '.' (no '..', no hidden file).
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
SHOWN_CHARS = 40
# A file name is at most 255 bytes; run folders join several names (``pretrain__NAME__GAME``).
MAX_NAME_CHARS = 100
SEED_LIMIT = 2**63  # what torch and NumPy both take


def shorten(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters (`short_repr`): a message never carries a
    whole value (an alias bomb's expansion, a megabyte string)."""
    return short_repr(value, limit)


def check_name(where: str, name: Any) -> None:
    """Refuse a name that is not one safe path part, naming the first character at fault.

    Raises:
        ConfigError: ``{where}: '../x' is not one safe path part ('.' at position 0) ...``.
    """
    if isinstance(name, str) and SAFE_NAME.fullmatch(name) and len(name) <= MAX_NAME_CHARS:
        return
    if isinstance(name, str) and SAFE_NAME.fullmatch(name):
        problem = f"{len(name)} characters; at most {MAX_NAME_CHARS}"
    elif not isinstance(name, str) or not name:
        problem = "empty" if name == "" else f"not a string: {type(name).__name__}"
    else:
        # The first character has the narrower rule (no '.', '-'); the rest the wider one.
        at = (
            0
            if not SAFE_NAME.fullmatch(name[0])
            else next(i for i, c in enumerate(name) if not SAFE_NAME.fullmatch("a" + c))
        )
        problem = f"{name[at]!r} at position {at}"
    raise ConfigError(
        f"{where}: {shorten(name)} is not one safe path part ({problem}); a name becomes a "
        "folder or file name: use letters, digits, '_', '-' and '.' (not first)"
    )


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

    source: Literal["random", "exploratory", "dqn_replay", "folder", "replay", "weak", "mixed"] = F(
        "random",
        "random: the Random collector; exploratory: the IDF agent (SGI-E); "
        "dqn_replay: import Dopamine checkpoints (Weak, Mixed); folder: an existing store; "
        "replay: an agent's whole replay (sgi-lab export replay); weak, mixed: selections of "
        "a replay (sgi-lab select)",
    )
    steps: int = F(
        6_000_000, "random/exploratory: transitions collected per game; mixed: rows selected"
    )
    seed: int = F(0, "random/exploratory: collection seed; mixed: which segments")
    env_protocol: Literal["dopamine", "rlpyt"] = F(
        "dopamine",
        "random: the Atari env played (sgi-lab collect --env-protocol): dopamine "
        "(gymnasium's) or rlpyt (the authors', docs/paper_vs_code.md rows 16-21); the other "
        "sources' frames are dopamine's",
    )
    params: str | None = F(None, "exploratory: params/collect file (default: Burda et al.'s)")
    set: dict[str, Any] = F({}, "exploratory: overrides of the params file's config")
    src: str | None = F(
        None,
        "dqn_replay: the replay_logs folder; folder: the store; replay: a pretraining config "
        "of kind agent (each game's run) or a finished run folder; weak, mixed: a replay data "
        "source or a replay store; {game}, {game_folder} (as run folders spell it: "
        "minatar-breakout) and {PARAMETER} are filled in (a null parameter "
        "drops every branch that needs this data)",
    )
    fraction: float = F(0.1, "weak: the first fraction of the agent's run kept")
    segment: int = F(1000, "mixed: rows a segment (each starts an episode)")
    checkpoints: list[int] = F([], "dqn_replay: checkpoint numbers, in order")
    runs: list[int] = F(
        [], "dqn_replay: DQN runs filled in for {run} in src, imported one after another"
    )
    samples: int | None = F(None, "dqn_replay: transitions taken from each checkpoint")
    make: str | None = F(
        None,
        "folder: the command that makes the store (filled in as src); a run "
        "refuses while a store is missing, naming it (--dry-run notes it)",
    )


@dataclass(frozen=True)
class PretrainSpec:
    """A pretraining configuration, run once per game on that game's dataset."""

    name: str = F(REQUIRED, "label, recorded as the run's params name (sgi_m, sgi_w, s_g...)")
    kind: Literal["pretrain", "agent"] = F(
        "pretrain",
        "pretrain: sgi-lab pretrain on data; agent: a from-scratch agent (params: a "
        "params/finetune file, no data) trained on each game, whose encoder, transition model, "
        "head's first layers and predictor finetuning then loads: the positive control",
    )
    draws: int = F(
        1,
        "independent runs per game (seeds seed, seed+1, ...; runs NAME__dK): the finetuning "
        "seeds are dealt to them in turn, so a method's arm spans several pretrained encoders",
    )
    draw_of: str | None = F(
        None, "written when draws are expanded: the config this is a draw of (its arm's name)"
    )
    params: str | None = F(None, "params/pretrain file (with data; or run)")
    data: str | None = F(None, "name of a data source of this experiment (with params)")
    set: dict[str, Any] = F({}, "overrides of the params file's config (steps, encoder...)")
    run: str | None = F(
        None,
        "instead of params and data: finished pretraining runs to reuse, one per game "
        "({game}: the game as run folders spell it, Pong, minatar-breakout; e.g. "
        "outputs/experiments/minatar_objectives/pretrain/sgi__{game}), read and never "
        "written; finetuning starts from them, nothing is pretrained",
    )


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
    seeds: list[int] | None = F(None, "its finetuning seeds (null: the experiment's)")


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
    encoder: Literal["nature", "resnet", "resnet_l", "minatar", "minatar_l"] = F(
        "nature", f"'{NO_PRETRAINING}': the random encoders' architecture"
    )
    max_frames: int | None = F(None, "rows of the store used at most (null: all)")
    split_seed: int = F(0, "seeds the episode split (the same for every encoder)")
    random_baseline: bool = F(
        False, "also probe a random encoder on each run's split (probes.json random_init)"
    )
    readout: Literal["lstsq", "logistic"] = F(
        "lstsq", "sgi-lab probe --readout: least squares, or the logistic (softmax) probe"
    )
    features: Literal["renormalized", "conv", "projection"] = F(
        "renormalized", "sgi-lab probe --features: what the probe reads of each encoder"
    )


@dataclass(frozen=True)
class QuestionSpec:
    """A study's question, declared before it runs: the baseline arm, the primary contrasts,
    the endpoint, the games that count and the error rate (docs/experiments.md, "A study's
    question"). An arm is a finetuning label: ``NAME`` from scratch, ``NAME__PRETRAIN``
    otherwise, pooled over the pretraining config's draws."""

    text: str = F(REQUIRED, "the question, in one sentence")
    baseline: str = F(REQUIRED, "the baseline arm (e.g. sgi_none)")
    primary: list[str] = F(REQUIRED, "the primary contrasts: arms each compared with the baseline")
    secondary: list[list[str]] = F(
        [], "other declared contrasts, [arm, against] pairs: a Holm family of their own"
    )
    endpoint: Literal["p_improvement"] = F(
        "p_improvement", "P(improvement) over the baseline, averaged over the games that count"
    )
    readout: Literal["final", "training"] = F(
        "final", "an agent's score: its final evaluation's mean return, or its training episodes'"
    )
    games: list[str] = F([], "the games that count (empty: all the experiment's)")
    alpha: float = F(0.05, "family-wise error rate, Holm across the primary contrasts")
    resamples: int = F(10_000, "bootstrap resamples and permutations (at least 10,000)")
    effect: float = F(0.25, "the effect the seeds are sized for: a relative gain of the IQM")


@dataclass(frozen=True)
class Experiment:
    """A table of the paper: data -> pretraining per game -> finetuning populations -> report."""

    name: str = F(REQUIRED, "experiment name")
    description: str = F("", "one line: what the experiment reproduces")
    table: str | None = F(None, "the paper table it reproduces (tab:HNS, tab:controls_hns...)")
    games: list[str] = F(
        ["all"], "Atari 100k games (['all']: the 26) or MinAtar ones (minatar/breakout, ...)"
    )
    seeds: list[int] = F([0], "finetuning seeds (each game x seed is one agent)")
    parameters: dict[str, Any] = F({}, "values given with --param KEY=VALUE (null: not given)")
    data: dict[str, DataSpec] = F({}, "data sources by name")
    pretrain: list[PretrainSpec] = F([], "pretraining configurations")
    finetune: list[FinetuneSpec] = F(
        [], "finetuning configurations (at least one, or a probe, unless the file only makes data)"
    )
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
    question: QuestionSpec | None = F(
        None, "the study's question, declared before it runs (its primary test leads the report)"
    )
    share_populations: bool = F(
        False,
        "finetuning configs that differ only in the pretrained encoder and its learning rates "
        "(reduced-lr, naive, from scratch) train as one population per observation shape "
        "(frozen ones apart) instead of one per config: the GPU's way to fill the device; "
        "the same run folders either way",
    )


RESOURCE_KEYS = ("num_cpus", "num_gpus")
DEFAULT_RESOURCES = {kind: {"num_cpus": 1.0, "num_gpus": 0.0} for kind in KINDS}


def _build(cls: type, values: Any, where: str) -> Any:
    """Build frozen ``cls`` from a mapping: unknown keys, missing ones and wrong types are
    refused naming the key (``where`` prefixes it: ``pretrain[1].params``)."""
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a mapping, got {shorten(values)}")
    prefix = f"{where}." if where else ""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown key(s) {shorten([prefix + str(k) for k in unknown], 120)} in {cls.__name__}; "
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

    path = Path(path)
    if not path.is_file():
        raise ConfigError(did_you_mean(path, "experiment file"))
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
        games = [canonical_env_game(g) for g in games]
    except UnknownGameError as exc:
        raise ConfigError(f"{path}: games: {exc}") from None
    experiment = dataclasses.replace(
        experiment,
        games=games,
        parameters={**experiment.parameters, **(parameters or {})},
        pretrain=[
            dataclasses.replace(p, params=str(_resolve_file(p.params, path))) if p.params else p
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
    if experiment.question is not None and experiment.question.games:
        try:
            games = [canonical_env_game(g) for g in experiment.question.games]
        except UnknownGameError as exc:
            raise ConfigError(f"{path}: question.games: {exc}") from None
        question = dataclasses.replace(experiment.question, games=games)
        experiment = dataclasses.replace(experiment, question=question)
    _check_references(experiment, path)
    _check_sets(experiment, path)
    return expand_draws(experiment)


def _check_sets(experiment: Experiment, path: Path) -> None:
    """Each ``set:`` override on its own against its stage's config, so a bad key or value is
    blamed on the experiment file and its entry (``exp.yaml: pretrain[0].set.bogus: ...``),
    not on the params file it overrides."""

    entries = [
        (f"pretrain[{i}]", FinetuneConfig if s.kind == "agent" else PretrainConfig, s.set)
        for i, s in enumerate(experiment.pretrain)
    ]
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
            if key in OLD_SPR_KEYS and cls is not ExploreConfig:
                continue  # read as spr_coefficient, with the params file, when it is built
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


def _check_probes(experiment: Experiment, path: Path) -> None:
    """A probe configuration's values, up front (not after collection and pretraining): at
    least 3 frames, seeds that are distinct and not negative, games AtariARI annotates."""
    for i, spec in enumerate(experiment.probe):
        where = f"{path}: probe[{i}]"
        if spec.max_frames is not None and spec.max_frames < 3:
            raise ConfigError(
                f"{where}.max_frames: at least 3 (a row per split), or null, got {spec.max_frames}"
            )
        repeated = sorted({s for s in spec.seeds if spec.seeds.count(s) > 1})
        if not spec.seeds or repeated or not all(0 <= s < SEED_LIMIT for s in spec.seeds):
            raise ConfigError(
                f"{where}.seeds: distinct seeds in [0, 2**63), got {shorten(spec.seeds)}"
                + (f" ({shorten(repeated)} repeated)" if repeated else "")
            )
        if not 0 <= spec.split_seed < SEED_LIMIT:
            raise ConfigError(
                f"{where}.split_seed: a seed in [0, 2**63), got {shorten(spec.split_seed)}"
            )
        for game in experiment.games:
            if is_minatar(game):  # labelled by the game's own state (sgi_lab.probes.game_labels)
                continue
            try:
                annotations(game)
            except UnannotatedGameError as exc:
                raise ConfigError(f"{where}: games: {exc}") from None


def _check_names(experiment: Experiment, path: Path) -> None:
    """Every name that becomes part of a path (`check_name`)."""
    check_name(f"{path}: name", experiment.name)
    for name in experiment.data:
        check_name(f"{path}: data.{shorten(name)}", name)
    for what, specs in (
        ("pretrain", experiment.pretrain),
        ("finetune", experiment.finetune),
        ("probe", experiment.probe),
    ):
        for i, spec in enumerate(specs):
            check_name(f"{path}: {what}[{i}].name", spec.name)


def _check_pretrain_specs(experiment: Experiment, path: Path) -> None:
    """Each pretraining config: runs to reuse given alone (with {game} for several games), or
    params with data (an agent: params without data), and at least one draw."""
    for i, spec in enumerate(experiment.pretrain):
        if spec.run:
            given = [k for k in ("params", "data", "set") if getattr(spec, k)]
            if given:
                raise ConfigError(
                    f"{path}: pretrain[{i}]: run reuses finished runs; give it alone, or "
                    f"params and data to pretrain (not run and {', '.join(given)})"
                )
            if len(experiment.games) > 1 and "{game}" not in spec.run:
                raise ConfigError(
                    f"{path}: pretrain[{i}].run: {{game}} must name each game's run "
                    f"({len(experiment.games)} games), got {spec.run!r}"
                )
            continue
        if spec.draws < 1:
            raise ConfigError(f"{path}: pretrain[{i}].draws: at least 1, got {spec.draws}")
        if spec.kind == "agent":
            if not spec.params or spec.data:
                raise ConfigError(
                    f"{path}: pretrain[{i}]: an agent is trained from scratch on each game: "
                    "params (a params/finetune file) and no data"
                )
            continue
        for key in ("params", "data"):
            if not getattr(spec, key):
                raise ConfigError(
                    f"{path}: pretrain[{i}].{key}: required (or run: finished runs to reuse)"
                )
        if spec.data not in experiment.data:
            raise ConfigError(
                f"{path}: pretrain[{i}].data: {spec.data!r} is not one of the data sources "
                f"{sorted(experiment.data)}"
            )


def _check_references(experiment: Experiment, path: Path) -> None:
    def duplicates(items: Sequence[Any]) -> list[Any]:
        return sorted({x for x in items if list(items).count(x) > 1}, key=str)

    _check_names(experiment, path)
    for what, items in (("games", experiment.games), ("seeds", experiment.seeds)):
        if not items or duplicates(items):
            raise ConfigError(f"{path}: {what}: empty, or repeated items {duplicates(items)}")
    makes_data = any(p.kind == "agent" for p in experiment.pretrain) or experiment.data
    if not experiment.finetune and not experiment.probe and not makes_data:
        raise ConfigError(
            f"{path}: finetune: at least one finetuning (or probe) configuration, or data or "
            "agents to make (an experiment that only makes data)"
        )
    if experiment.max_agents is not None and experiment.max_agents < 1:
        raise ConfigError(f"{path}: max_agents: at least 1, or null, got {experiment.max_agents}")
    names = [p.name for p in experiment.pretrain]
    if duplicates(names) or NO_PRETRAINING in names:
        raise ConfigError(f"{path}: pretrain: repeated or reserved names {duplicates(names)}")
    reused = {p.name for p in experiment.pretrain if p.run}
    _check_pretrain_specs(experiment, path)
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
    for i, spec in enumerate(experiment.finetune):
        if spec.seeds is not None and (not spec.seeds or duplicates(spec.seeds)):
            raise ConfigError(f"{path}: finetune[{i}].seeds: distinct seeds, or null")
    check_draws(experiment, path)
    check_question(experiment, path)
    agents = {p.name for p in experiment.pretrain if p.kind == "agent"}
    probe_names = [p.name for p in experiment.probe]
    if duplicates(probe_names):
        raise ConfigError(f"{path}: probe: repeated names {duplicates(probe_names)}")
    _check_probes(experiment, path)
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
            if name in agents:
                raise ConfigError(
                    f"{path}: probe[{i}].pretrain: {name!r} is an agent, not a pretraining run; "
                    "probe its model with sgi-lab probe RUN/model.pt"
                )
            if name in reused:  # a probe writes its results into the run folder
                raise ConfigError(
                    f"{path}: probe[{i}].pretrain: {name!r} reuses runs this experiment does "
                    "not own (its run:); probe them in the experiment that made them"
                )
    for kind, request in experiment.resources.items():
        if kind not in KINDS or set(request) - set(RESOURCE_KEYS):
            raise ConfigError(
                f"{path}: resources.{kind}: kinds are {list(KINDS)}, keys {list(RESOURCE_KEYS)}"
            )
    _check_data(experiment, path)


def _check_data(experiment: Experiment, path: Path) -> None:
    """Each data source's keys for its kind (env_protocol for random data, src, checkpoints
    and runs for DQN Replay)."""
    for name, spec in experiment.data.items():
        if spec.env_protocol != "dopamine" and spec.source != "random":
            raise ConfigError(
                f"{path}: data.{name}.env_protocol: {spec.env_protocol!r} is for source "
                f"'random' only ({spec.source!r} data is dopamine's; a folder's store records "
                "its own, sgi-lab info)"
            )
        if spec.source in ("dqn_replay", "folder", "replay", "weak", "mixed") and not spec.src:
            raise ConfigError(f"{path}: data.{name}.src: required for source {spec.source!r}")
        if spec.make and spec.source != "folder":
            raise ConfigError(f"{path}: data.{name}.make: for source 'folder' only")
        _check_replay_source(experiment, name, spec, path)
        if spec.source == "dqn_replay" and not spec.checkpoints:
            raise ConfigError(f"{path}: data.{name}.checkpoints: required for dqn_replay")
        names_run = "{run}" in (spec.src or "")
        if spec.runs and (not names_run or len(set(spec.runs)) != len(spec.runs)):
            raise ConfigError(
                f"{path}: data.{name}.runs: distinct runs, with {{run}} in src ({spec.src})"
            )
        if names_run and not spec.runs:
            raise ConfigError(f"{path}: data.{name}.runs: required, src names {{run}}")


def _check_replay_source(experiment: Experiment, name: str, spec: DataSpec, path: Path) -> None:
    """A replay names an agent (a pretraining config of kind agent, one draw) or a run folder;
    a selection names a replay source or a store folder; the fraction and segment fit."""
    where, src = f"{path}: data.{name}", spec.src or ""
    agents = {p.name: p for p in experiment.pretrain}
    if spec.source == "replay" and src in agents and agents[src].kind != "agent":
        raise ConfigError(f"{where}.src: {src!r} is a pretraining config, not of kind agent")
    if spec.source == "replay" and src in agents and agents[src].draws != 1:
        raise ConfigError(f"{where}.src: {src!r} has {agents[src].draws} draws; one replay a game")
    selected = experiment.data.get(src)
    if spec.source in ("weak", "mixed") and selected and selected.source != "replay":
        raise ConfigError(f"{where}.src: {src!r} is not a data source of kind replay")
    named = src in agents if spec.source == "replay" else src in experiment.data
    if spec.source in ("replay", "weak", "mixed") and not named and "/" not in src:
        raise ConfigError(
            f"{where}.src: {src!r} names no {'agent' if spec.source == 'replay' else 'replay'} "
            "of this experiment, nor a folder (a path with '/', {game} filled in)"
        )
    if spec.source == "weak" and not 0 < spec.fraction <= 1:
        raise ConfigError(f"{where}.fraction: in (0, 1], got {spec.fraction}")
    if spec.source == "mixed" and (spec.segment < 2 or spec.steps < 1):
        raise ConfigError(f"{where}: segment at least 2 and steps at least 1")
