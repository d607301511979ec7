"""A finished run is a task's result only when it ran the task's config: a changed experiment
file (another budget) never relabels an old result as new."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from sgi_lab import experiments as ex
from sgi_lab.experiments.state import config_mismatch, task_done

ROOT = Path(__file__).resolve().parents[2]


def finish(folder: Path, config: dict) -> None:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "status.json").write_text(json.dumps({"state": "finished", "kind": "finetune"}))
    (folder / "eval.json").write_text("{}")
    (folder / "model.pt").write_bytes(b"")


def test_a_run_of_another_budget_is_not_the_tasks_result(tmp_path):
    experiment = ex.load_experiment(ROOT / "params/experiments/minatar_calibration.yaml")
    graph = ex.expand(experiment, tmp_path / "out")
    task = graph.task("finetune/sgi_none/part1of2")
    assert task.config["steps"] == 10_000 and task.config["eval_episodes"] == 30
    for (game, seed), folder in zip(task.agents, task.agent_folders, strict=True):
        # each agent records its own game, seed and device: not a difference
        finish(folder, {**task.config, "game": game, "seed": seed, "device": "cuda"})
    assert task_done(task)
    shorter = {**task.config, "steps": 8_000, "game": task.agents[0][0], "seed": 0}
    (task.agent_folders[0] / "config.yaml").write_text(yaml.safe_dump(shorter))
    assert config_mismatch(task, task.agent_folders[0]) == {"steps": (8_000, 10_000)}
    assert not task_done(task)
    source = graph.task("pretrain/agent__d0__minatar-breakout")
    finish(source.folder, {**source.config, "steps": 100_000})
    assert task_done(source)
    (source.folder / "config.yaml").write_text(yaml.safe_dump({**source.config, "steps": 50}))
    assert not task_done(source)
