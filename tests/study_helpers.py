"""A finished finetuning agent as an experiment folder holds it, for tests of the study tables
(`sgi_lab.experiments.question`, `sgi_lab.experiments.rereading`)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml


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
