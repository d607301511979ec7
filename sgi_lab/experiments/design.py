"""A study's design in its experiment file: a pretraining config drawn several times (its
finetuning seeds dealt to the draws), the arms a question compares (finetuning labels pooled over
draws), and the checks of both. Functions of an `sgi_lab.experiments.spec.Experiment`, which
`load_experiment` calls (this module imports nothing of spec's, so spec can import it)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from sgi_lab.config import ConfigError, FinetuneConfig, PretrainConfig, load_config

Experiment = Any
"""An `sgi_lab.experiments.spec.Experiment` (not imported: spec imports this module)."""

__all__ = [
    "NO_PRETRAINING",
    "arm_labels",
    "check_draws",
    "check_question",
    "draw_name",
    "draw_seeds",
    "expand_draws",
]

NO_PRETRAINING = "none"
"""The pretraining config name of finetuning from scratch."""


def draw_name(name: str, k: int) -> str:
    """The pretraining config of draw ``k`` of ``name`` (its runs ``pretrain/NAME__dK__GAME``)."""
    return f"{name}__d{k}"


def draw_seeds(seeds: list[int], k: int, draws: int) -> list[int]:
    """The finetuning seeds dealt to draw ``k`` of ``draws``: every ``draws``-th, from the k-th."""
    return list(seeds[k::draws])


def arm_labels(experiment: Experiment) -> dict[str, list[str]]:
    """Each arm (a finetuning label: ``NAME`` from scratch, else ``NAME__PRETRAIN``) -> the
    finetuning labels (run folders under ``finetune/``) it pools: one, or one per draw of its
    pretraining config. Reads the experiment before or after `expand_draws`."""
    configs = {p.name: p for p in experiment.pretrain}
    arms: dict[str, list[str]] = {}
    for spec in experiment.finetune:
        for base in spec.pretrain:
            if base == NO_PRETRAINING:
                arms.setdefault(spec.name, []).append(spec.name)
                continue
            config = configs[base]
            arm = f"{spec.name}__{config.draw_of or base}"
            names = (
                [draw_name(base, k) for k in range(config.draws)] if config.draws > 1 else [base]
            )
            arms.setdefault(arm, []).extend(f"{spec.name}__{n}" for n in names)
    return arms


def expand_draws(experiment: Experiment) -> Experiment:
    """Each pretraining config with ``draws: N > 1`` as N configs ``NAME__dK`` (seed + k), the
    finetuning configs that start from it as one config per draw, with the seeds dealt to that
    draw (`draw_seeds`), and its probes as probes of each draw. An experiment without draws is
    returned as it is; one expanded already too (its draws are 1)."""
    drawn = {p.name: p for p in experiment.pretrain if p.draws > 1}
    if not drawn:
        return experiment
    pretrain = []
    for spec in experiment.pretrain:
        if spec.name not in drawn:
            pretrain.append(spec)
            continue
        cls = FinetuneConfig if spec.kind == "agent" else PretrainConfig
        seed = load_config(cls, spec.params, spec.set).seed if spec.params else 0
        pretrain += [
            dataclasses.replace(
                spec,
                name=draw_name(spec.name, k),
                draws=1,
                draw_of=spec.name,
                set={**spec.set, "seed": seed + k},
            )
            for k in range(spec.draws)
        ]
    finetune = []
    for spec in experiment.finetune:
        kept = [b for b in spec.pretrain if b not in drawn]
        if kept:
            finetune.append(dataclasses.replace(spec, pretrain=kept))
        seeds = spec.seeds if spec.seeds is not None else experiment.seeds
        for base in (b for b in spec.pretrain if b in drawn):
            n = drawn[base].draws
            finetune += [
                dataclasses.replace(
                    spec, pretrain=[draw_name(base, k)], seeds=draw_seeds(seeds, k, n)
                )
                for k in range(n)
            ]
    probe = [
        dataclasses.replace(
            spec,
            pretrain=[
                d
                for b in spec.pretrain
                for d in ([draw_name(b, k) for k in range(drawn[b].draws)] if b in drawn else [b])
            ],
        )
        for spec in experiment.probe
    ]
    return dataclasses.replace(experiment, pretrain=pretrain, finetune=finetune, probe=probe)


def check_draws(experiment: Experiment, path: Path) -> None:
    """A drawn pretraining config leaves every draw some seeds of each config finetuned from it."""
    drawn = {p.name: p.draws for p in experiment.pretrain if p.draws > 1}
    for i, spec in enumerate(experiment.finetune):
        seeds = spec.seeds if spec.seeds is not None else experiment.seeds
        for base in (b for b in spec.pretrain if b in drawn):
            if len(seeds) < drawn[base]:
                raise ConfigError(
                    f"{path}: finetune[{i}]: {len(seeds)} seeds for the {drawn[base]} draws of "
                    f"{base!r}; each draw needs at least one (seeds are dealt to them in turn)"
                )


def check_question(experiment: Experiment, path: Path) -> None:
    """The question's arms are finetuning labels of this experiment, its games its games, and
    its error rate and resample count usable."""
    question = experiment.question
    if question is None:
        return
    arms = arm_labels(experiment)
    named = [("question.baseline", question.baseline)]
    named += [(f"question.primary[{i}]", a) for i, a in enumerate(question.primary)]
    for i, pair in enumerate(question.secondary):
        if len(pair) != 2:
            raise ConfigError(f"{path}: question.secondary[{i}]: [arm, against], got {pair}")
        named += [(f"question.secondary[{i}]", a) for a in pair]
    for where, arm in named:
        if arm not in arms:
            raise ConfigError(
                f"{path}: {where}: {arm!r} is not an arm of this experiment; arms: {sorted(arms)}"
            )
    if not question.primary or question.baseline in question.primary:
        raise ConfigError(
            f"{path}: question.primary: at least one arm, not the baseline {question.baseline!r}"
        )
    outside = [g for g in question.games if g not in experiment.games]
    if outside:
        raise ConfigError(f"{path}: question.games: {outside} are not the experiment's games")
    if not 0 < question.alpha < 1:
        raise ConfigError(f"{path}: question.alpha: in (0, 1), got {question.alpha}")
    if question.resamples < 10_000:
        raise ConfigError(
            f"{path}: question.resamples: at least 10,000 (interval ends that hold to the "
            f"second decimal), got {question.resamples}"
        )
    if question.effect <= 0:
        raise ConfigError(f"{path}: question.effect: a relative gain > 0, got {question.effect}")
