"""A finished finetuning agent as an experiment folder holds it, for tests of the study tables
(`sgi_lab.experiments.question`, `sgi_lab.experiments.rereading`); a tiny MinAtar agent whose
run an experiment file turns into data (`TINY_MAKER`)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

TINY_MAKER = """\
  - name: maker
    kind: agent
    params: params/finetune/minatar_none.yaml
    set: {ssl: none, hidden_size: 32, steps: 120, batch_size: 8, n_step: 3, learning_starts: 60, eps_steps: 61, log_every: 40, checkpoint_every: 60, eval_episodes: 2, eval_envs: 2}
"""
"""An experiment file's ``pretrain:`` item: a 120-step MinAtar agent from scratch (checkpoints
at 60 and 120), for the replay, Weak and Mixed sources made of its run."""


def agent(
    root: Path, label: str, game: str, seed: int, score: float, training: float | None = None
) -> None:
    """``root/finetune/LABEL/GAME__sSEED``: finished, its final evaluation's mean ``score`` (as
    its normalised score too), and, with ``training``, two training episodes of that return."""
    folder = root / "finetune" / label / f"{game.replace('/', '-')}__s{seed}"
    folder.mkdir(parents=True)
    (folder / "status.json").write_text(json.dumps({"state": "finished", "params": label}))
    (folder / "config.yaml").write_text(yaml.safe_dump({"game": game, "seed": seed}))
    evaluation = {"game": game, "mean": score, "normalized_score": score, "episodes": 30}
    (folder / "eval.json").write_text(json.dumps({**evaluation, "normalization": "MinAtar score"}))
    rows = (
        [] if training is None else [{"step": 100 * i, "episode/return": training} for i in (1, 2)]
    )
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
