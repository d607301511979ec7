"""The demo's MinAtar stage: the comparison the paper is about, at laptop size.

On MinAtar Breakout (where learning shows within this budget: SGI-None reached 2.47 against
the random 0.42 in 4,000 steps, 82 s on one thread of a 2-core Intel Xeon; the other games were
not measured at this size), three agents finetune with Rainbow + SPR for the same few thousand
steps: two from one encoder pretrained with SGI (``params/pretrain/minatar_sgi.yaml`` for a few
hundred steps on a small Random store), one finetuned with the paper's reduced learning rates
(``params/finetune/minatar_reduced_lr.yaml``) and one naively (``minatar_naive.yaml``: every
layer at the full rate), and one from scratch (``params/finetune/minatar_none.yaml``). The
learning curves and final scores (with the MinAtar score, `sgi_lab.metrics.minatar`) go to the
demo's ``index.html``, with one sentence (`verdict`) saying whether learning is visible and
whether each pretrained agent differs from the one from scratch.

The three agents are one population (`sgi_lab.train.finetune.finetune_population`): they act
and learn in lockstep, each at its own learning rates (the reduced-lr agent's loaded layers at
0.01x and 1/3, every layer of the other two at the full rate;
`sgi_lab.train.population.Population.lr_factors`), each with its own seed-0 environment.

Everything lives in the stage's folder, ``outputs/demo/minatar/`` (``data/``, ``pretrain/``,
``finetune/sgi/``, ``finetune/sgi_naive/``, ``finetune/scratch/``, ``figures/``); each part resumes or is returned as
finished when the stage runs again, and the folder's ``status.json`` marks the stage finished.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sgi_lab.base.files import read_jsonl
from sgi_lab.config import FinetuneConfig, PretrainConfig, load_config
from sgi_lab.data.collect import collect_random
from sgi_lab.metrics.minatar import minatar_random_score, minatar_reference_score
from sgi_lab.runs.prune import prune_checkpoints
from sgi_lab.train.finetune import finetune_population
from sgi_lab.train.pretrain import pretrain

__all__ = [
    "AGENTS",
    "SCRATCH",
    "DEMO_BUDGET",
    "GAME",
    "SMOKE_BUDGET",
    "MinAtarBudget",
    "learning_curves",
    "run_minatar",
    "summary_lines",
    "verdict",
]

GAME = "minatar/breakout"
PRETRAIN_PARAMS = "params/pretrain/minatar_sgi.yaml"
# label -> (folder under finetune/, params file); the pretrained agents first, scratch last.
# The same SGI encoder finetuned two ways: the paper's reduced learning rates (its encoder at
# 0.01x: nearly fixed at this size) and naively (every layer at the full rate), which the study
# found ahead of scratch on Breakout at 10k steps (docs/results/minatar.md).
AGENTS: dict[str, tuple[str, str]] = {
    "SGI, reduced lr": ("sgi", "params/finetune/minatar_reduced_lr.yaml"),
    "SGI, naive": ("sgi_naive", "params/finetune/minatar_naive.yaml"),
    "from scratch": ("scratch", "params/finetune/minatar_none.yaml"),
}
SCRATCH = "from scratch"


@dataclass(frozen=True)
class MinAtarBudget:
    """The stage's sizes: Random rows collected, then overrides of the pretraining and of both
    finetuning params files (the agents share every finetuning setting but the encoder's
    origin and the learning rates that follow from it)."""

    collect_steps: int
    pretrain: dict[str, Any] = field(default_factory=dict)
    finetune: dict[str, Any] = field(default_factory=dict)


DEMO_BUDGET = MinAtarBudget(
    collect_steps=10_000,
    # 300 steps at batch 256 (77k samples; the params file: 20,000 steps)
    pretrain={"steps": 300, "log_every": 25, "checkpoint_every": 100},
    # 4,000 agent steps, one update a step from step 1,000 (the params files: 100k, 2 a step),
    # 30 evaluation episodes: enough to tell 2.5 from the random 0.4 on Breakout
    finetune={
        "steps": 4000,
        "learning_starts": 1000,
        "updates_per_step": 1,
        "eval_episodes": 30,
        "log_every": 100,
        "checkpoint_every": 1000,
    },
)
"""The demo's sizes (README's "What the demo does" gives their times)."""

SMOKE_BUDGET = MinAtarBudget(
    collect_steps=400,
    # a 400-row store: short sequences and goal windows (as tests/train/test_minatar_track.py)
    pretrain={
        "steps": 2,
        "batch_size": 8,
        "hidden_size": 32,
        "spr_steps": 3,
        "n_step": 3,
        "goal_window": 10,
        "log_every": 1,
        "checkpoint_every": 2,
        "prefetch": 0,
    },
    finetune={
        "steps": 120,
        "learning_starts": 60,
        "eps_steps": 61,
        "updates_per_step": 1,
        "batch_size": 8,
        "hidden_size": 32,
        "spr_steps": 2,
        "n_step": 3,
        "eval_episodes": 2,
        "eval_envs": 2,
        "log_every": 40,
        "checkpoint_every": 60,
    },
)
"""Seconds-sized budgets of the same stage (``make demo --smoke`` and the tests)."""


def run_minatar(
    folder: str | Path, budget: MinAtarBudget = DEMO_BUDGET, root: str | Path = ".", progress=True
) -> dict[str, Any]:
    """Collect, pretrain, finetune the agents and evaluate them, into ``folder``; every part
    already finished there is reused, an interrupted one resumed.

    Args:
        folder: the stage's folder (module docstring).
        budget: the sizes (`DEMO_BUDGET`, `SMOKE_BUDGET`).
        root: the project root the params files are read from.
        progress: tqdm bars of each part.

    Returns:
        The stage's results: ``{label: {"mean", "std", "episodes", "normalized_score",
        "normalization", "step", "run"}}`` per agent, ``random`` and ``reference`` (the
        game's score anchors), and ``verdict`` (`verdict`).
    """
    folder, root = Path(folder), Path(root)
    store = collect_random(GAME, budget.collect_steps, folder / "data", seed=0, progress=progress)
    config = load_config(PretrainConfig, root / PRETRAIN_PARAMS, budget.pretrain)
    pretrain(config, store, folder / "pretrain", progress=progress, params_name="minatar_sgi")
    configs, outs = [], []
    for name, params in AGENTS.values():
        overrides = {**budget.finetune, "game": GAME, "seed": 0}
        if name != "scratch":
            overrides["pretrained"] = str(folder / "pretrain")
        configs.append(load_config(FinetuneConfig, root / params, overrides))
        outs.append(folder / "finetune" / name)
    names = [Path(params).stem for _, params in AGENTS.values()]
    runs = finetune_population(configs, outs, progress, params=names)
    results: dict[str, Any] = {}
    for label, run in zip(AGENTS, runs, strict=True):
        evaluation = run.evaluation or {}
        results[label] = {
            key: evaluation.get(key)
            for key in ("mean", "std", "episodes", "normalized_score", "normalization", "step")
        }
        results[label]["run"] = str(run.path)
    results["random"] = minatar_random_score(GAME)
    results["reference"] = minatar_reference_score(GAME)
    results["verdict"] = verdict(results)
    # every part has finished and is reused as it is, never resumed: its checkpoints (the
    # finetuning ones carry their replay) only take disk, as the Pong stages' do not
    prune_checkpoints([folder])
    return results


def _agents(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in results.items() if k in AGENTS and isinstance(v, dict)}


def _stderr(agent: dict[str, Any]) -> float:
    """The standard error of an evaluation's mean return (0 without a spread or episodes)."""
    std, episodes = agent.get("std") or 0.0, agent.get("episodes") or 0
    return float(std) / math.sqrt(episodes) if episodes > 1 else 0.0


def verdict(results: dict[str, Any]) -> str:
    """One honest sentence about the stage's final scores: is learning visible (an agent's
    evaluation mean more than two standard errors above the uniform random policy's), and
    does each pretrained agent differ from the one from scratch (their means more than two
    standard errors of the difference apart); one seed each, so never evidence either way."""
    agents = _agents(results)
    random = float(results.get("random", 0.0))
    if len(agents) < len(AGENTS) or any(a.get("mean") is None for a in agents.values()):
        return "The MinAtar stage has no final scores yet: nothing to compare."
    above = [label for label, a in agents.items() if a["mean"] - 2 * _stderr(a) > random]
    if len(above) == len(agents):
        learning = "Learning is visible: every agent scores above the random policy"
    elif above:
        learning = f"Learning is visible only for {_listed(above)}: above the random policy"
    else:
        learning = "Learning is not visible at this size: no agent beats the random policy"
    scratch = agents[SCRATCH]
    comparisons = []
    for label, a in agents.items():
        if label == SCRATCH:
            continue
        gap = a["mean"] - scratch["mean"]
        if abs(gap) > 2 * math.hypot(_stderr(a), _stderr(scratch)):
            side = "above" if gap > 0 else "below"
            comparisons.append(f'the "{label}" agent ends {side} the one from scratch ({gap:+.2f})')
        else:
            comparisons.append(
                f'the "{label}" agent does not differ from the one from scratch beyond their '
                f"evaluation noise ({gap:+.2f})"
            )
    return (
        f"{learning} ({random:.2f}); {'; '.join(comparisons)}. With one seed each this is an "
        "illustration, not evidence for or against pretraining (that takes several seeds per "
        "game: the study of docs/results/minatar.md)."
    )


def _listed(labels: list[str]) -> str:
    """``the "A" agent``, ``the "A" and "B" agents`` (quoted: a label may hold a comma)."""
    quoted = [f'"{label}"' for label in labels]
    if len(quoted) == 1:
        return f"the {quoted[0]} agent"
    return f"the {', '.join(quoted[:-1])} and {quoted[-1]} agents"


def learning_curves(folder: str | Path, window: int = 20) -> dict[str, tuple[list, list]]:
    """Each agent's training curve from its run's metrics: ``{label: (steps, rolling mean of
    the last ``window`` episode returns)}``, one point per finished episode."""
    curves: dict[str, tuple[list, list]] = {}
    for label, (name, _) in AGENTS.items():
        rows = read_jsonl(Path(folder) / "finetune" / name / "metrics.jsonl")
        episodes = [(r["step"], r["episode/return"]) for r in rows if "episode/return" in r]
        if not episodes:
            continue
        steps, returns = (np.asarray(v, float) for v in zip(*episodes, strict=True))
        sums = np.cumsum(np.concatenate([[0.0], returns]))
        start = np.maximum(np.arange(len(returns)) + 1 - window, 0)
        means = (sums[1:] - sums[start]) / (np.arange(len(returns)) + 1 - start)
        curves[label] = (steps.tolist(), means.tolist())
    return curves


def summary_lines(results: dict[str, Any]) -> list[str]:
    """The stage's final scores in words for index.html, then its verdict."""
    lines = []
    for label, a in _agents(results).items():
        if a.get("mean") is None:
            lines.append(f"{label}: no evaluation yet")
            continue
        lines.append(
            f"{label}: mean return {a['mean']:.2f} ± {_stderr(a):.2f} (s.e.) over "
            f"{a.get('episodes')} episodes, {a.get('normalization') or 'MinAtar score'} "
            f"{a['normalized_score']:.3f}"
        )
    if "random" in results:
        lines.append(
            f"MinAtar score: 0 = uniform random ({results['random']:.2f}), 1 = the MinAtar "
            f"paper's DQN ({results.get('reference', float('nan')):.1f})"
        )
    if results.get("verdict"):
        lines.append(results["verdict"])
    return lines
