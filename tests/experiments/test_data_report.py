"""An experiment file that only makes data (agents from scratch and the stores of their runs, no
finetuning): every source becomes a task, the report waits for them all and says what was made,
by whom, at what score and in how many hours (`sgi_lab.experiments.data_report`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from study_helpers import TINY_MAKER

from sgi_lab import experiments as ex
from sgi_lab.base.files import read_jsonl
from sgi_lab.config import ConfigError
from sgi_lab.data.store import TransitionStore
from sgi_lab.experiments.data_report import (
    MAKERS_MARK,
    maker_rows,
    makers_curves,
    read_makers,
    store_rows,
    write_data_report,
)
from sgi_lab.experiments.graph import Task
from sgi_lab.experiments.study_cost import logged_hours
from sgi_lab.metrics.minatar import minatar_random_score, minatar_reference_score

MAKES_DATA = (
    """
name: tiny_data
games: [minatar/breakout]
data:
  replay: {source: replay, src: maker}
  weak: {source: weak, src: replay, fraction: 0.5}
  mixed: {source: mixed, src: replay, steps: 60, seed: 1, segment: 20}
pretrain:
"""
    + TINY_MAKER
)


def test_logged_hours_sum_each_logged_interval_over_its_speed():
    rows = [
        {"step": 100, "charts/sps": 50.0},  # 2 s
        {"step": 130, "episode/return": 1.0},  # an episode: no speed, not counted
        {"step": 400, "charts/sps": 100.0},  # 3 s
        {"step": 1000, "charts/sps": 200.0},  # 3 s
    ]
    assert logged_hours(rows) == pytest.approx(8 / 3600)
    assert logged_hours([]) == 0


def test_a_file_with_nothing_to_make_or_train_is_refused(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("name: e\ngames: [minatar/breakout]\n")
    with pytest.raises(ConfigError, match="finetune: at least one .* or data or agents to make"):
        ex.load_experiment(path)


@pytest.mark.smoke
def test_a_data_file_makes_every_store_and_reports_its_makers_and_stores(tmp_path):
    pytest.importorskip("minatar")
    file = tmp_path / "data.yaml"
    file.write_text(MAKES_DATA)
    out, kept = tmp_path / "exp", tmp_path / "kept"
    summary = ex.run_experiment(file, out, max_parallel=1, progress=False, archive=kept)
    assert summary["counts"]["done"] == 5, summary  # maker, replay, weak, mixed, report
    # the archive keeps the maker's files and, the stores being too large for it, the report
    assert (kept / "pretrain" / "maker__minatar-breakout" / "eval.json").is_file()
    for name in ("results.md", "results.csv", "makers.svg"):
        assert (kept / "report" / name).read_text() == (out / name).read_text()

    table = pd.read_csv(out / "results.csv")
    maker = table[table.kind == "maker"].iloc[0]
    run = out / "pretrain" / "maker__minatar-breakout"
    result = json.loads((run / "eval.json").read_text())
    random, top = (
        minatar_random_score("minatar/breakout"),
        minatar_reference_score("minatar/breakout"),
    )
    assert (maker.state, maker.steps, maker.final_mean) == ("finished", 120, result["mean"])
    assert maker.normalized == pytest.approx((result["mean"] - random) / (top - random))
    assert maker.training_hours == pytest.approx(logged_hours(read_jsonl(run / "metrics.jsonl")))
    assert maker.training_hours > 0
    stores = table[table.kind == "store"].set_index("task")
    for name, rows in (("replay", 120), ("weak", 60), ("mixed", 60)):
        entry = stores.loc[f"data/{name}__minatar-breakout"]
        store = TransitionStore(out / "data" / f"{name}__minatar-breakout")
        assert (entry.state, entry.rows, entry.episodes) == ("made", rows, store.num_episodes)
        assert entry.fingerprint == store.fingerprint
        returns = np.add.reduceat(store.rewards.astype(float), store.episode_starts)
        assert entry.mean_episode_return == pytest.approx(returns.mean())

    markdown = (out / "results.md").read_text()
    assert "| minatar/breakout | finished | 120 |" in markdown
    assert "| mixed__minatar-breakout | made | 60 |" in markdown
    assert MAKERS_MARK in (out / "makers.svg").read_text()
    assert "<polyline" in (out / "makers.svg").read_text()  # the maker's curve is drawn
    # the curve: by hand, the training episodes ending in each checkpoint interval (0, 60], ...
    graph = ex.expand(ex.load_experiment(file), out)
    curves = makers_curves(read_makers(graph))
    ours = curves[curves.method == "maker"].set_index("step")["return"]
    episodes = [(r["step"], r["episode/return"]) for r in read_jsonl(run / "metrics.jsonl")
                if "episode/return" in r]  # fmt: skip
    assert list(ours.index) == [60, 120]
    for step in ours.index:
        inside = [ret for end, ret in episodes if step - 60 < end <= step]
        assert ours[step] == pytest.approx(np.mean(inside))
    assert set(curves[curves.method != "maker"]["return"]) == {top}  # the reference line


def test_a_resumed_maker_lists_its_commits_in_the_order_it_ran_them():
    """Resumed on an older-sorting commit, the maker's row keeps the order it trained in and
    says where each later commit took over (a set, sorted, had read as if it began there)."""
    provenance = [
        {"step": 0, "commit": "db869da" + "0" * 33},
        {"step": 815280, "commit": "1c8eb8c" + "0" * 33},
        {"step": 900000, "commit": "1c8eb8c" + "0" * 33},  # resumed again on the same code
    ]
    task = Task("pretrain/maker__minatar-seaquest", "finetune", Path("maker"), (), ())
    maker = {"task": task, "status": {"provenance": provenance, "step": 10}, "rows": [],
             "game": "minatar/seaquest", "result": {}, "config": {}}  # fmt: skip
    (row,) = maker_rows([maker])
    assert row["commits"] == ["db869da", "1c8eb8c from 815,280"]


def test_the_report_never_draws_over_a_figure_it_did_not_make(tmp_path):
    file = tmp_path / "data.yaml"
    file.write_text(MAKES_DATA)
    graph = ex.expand(ex.load_experiment(file), tmp_path / "exp")
    graph.out.mkdir()
    (graph.out / "makers.svg").write_text("<svg>my own figure</svg>")
    with pytest.raises(FileExistsError, match="makers.svg"):
        write_data_report(graph)
    assert (graph.out / "makers.svg").read_text() == "<svg>my own figure</svg>"
    assert not (graph.out / "results.md").exists()


def test_a_store_not_made_and_one_that_does_not_open_are_told_apart(tmp_path):
    file = tmp_path / "data.yaml"
    file.write_text(MAKES_DATA)
    graph = ex.expand(ex.load_experiment(file), tmp_path / "exp")
    broken = graph.task("data/weak__minatar-breakout").folder
    broken.mkdir(parents=True)
    (broken / "manifest.json").write_text("{not json")
    rows = {r["task"]: r for r in store_rows(graph)}
    assert rows["data/replay__minatar-breakout"]["state"] == "not made"
    assert rows["data/weak__minatar-breakout"]["state"].startswith("unreadable: ")
    assert "manifest" in rows["data/weak__minatar-breakout"]["state"]
