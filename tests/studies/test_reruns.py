"""A study run twice (sgi_lab.studies.reruns): the first run's per-seed CSV read back as the
published tables, and the two runs compared by hand-computed numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from sgi_lab.metrics.minatar import minatar_normalized_score
from sgi_lab.studies.finetune_study import objective_table
from sgi_lab.studies.reruns import (
    RERUN_MARK,
    baseline_markdown,
    baseline_table,
    compare_runs,
    published_runs,
    rerun_markdown,
    rerun_table,
    write_rerun_figure,
)

ROOT = Path(__file__).resolve().parents[2]
FIRST_RUN = ROOT / "results/minatar_objectives_first_run.csv"


def test_the_published_per_seed_csv_gives_the_published_aggregates():
    """docs/results/minatar.md's objectives table (five games, reduced lrs) and SGI's schemes,
    from the CSV of its per-seed table (returns to two decimals: IQMs within 0.002)."""
    runs = published_runs(FIRST_RUN)
    assert len(runs) == 141  # the agents finished before the 2026-11-27 restart
    table = objective_table(runs[runs["objective"] != "g_i"])  # G+I: two games only
    published = {"none": 0.145, "sgi": 0.116, "s_i": 0.093, "s_g": 0.081, "s": 0.070, "g": 0.053}
    for method, iqm in published.items():
        assert table.loc[method, "iqm"] == pytest.approx(iqm, abs=0.002), method
    assert objective_table(runs, "naive").loc["sgi", "iqm"] == pytest.approx(0.187, abs=0.002)
    assert objective_table(runs, "frozen").loc["sgi", "iqm"] == pytest.approx(0.120, abs=0.002)


def test_a_bad_csv_is_refused_naming_the_column_or_line(tmp_path):
    bad = tmp_path / "runs.csv"
    bad.write_text("objective,scheme,game,seed\nnone,none,minatar/breakout,0\n")
    with pytest.raises(ValueError, match="no column score"):
        published_runs(bad)
    bad.write_text(
        "objective,scheme,game,seed,score\n"
        "none,none,minatar/breakout,0,1.5\nnone,none,minatar/breakout,1,-\n"
    )
    with pytest.raises(ValueError, match="line 3: score '-' is not a number"):
        published_runs(bad)


def runs_of(scores: dict[tuple[str, str], list[float]]) -> pd.DataFrame:
    """Finished agents: ``{(method, game): [raw return of seed 0, 1, 2]}``."""
    rows = []
    for (method, game), values in scores.items():
        for seed, score in enumerate(values):
            rows.append(
                {
                    "objective": method,
                    "scheme": "none" if method == "none" else "reduced_lr",
                    "game": game,
                    "seed": seed,
                    "finished": True,
                    "score": score,
                    "normalized": float(minatar_normalized_score(game, score)),
                }
            )
    return pd.DataFrame(rows)


def test_two_runs_compared_by_hand():
    """Breakout only: none and sgi at seeds 0-2 in each run. The IQM of three scores trims
    none (scipy's trim_mean(0.25) cuts int(0.75) = 0 from each end): their mean."""
    game = "minatar/breakout"
    first = runs_of({("none", game): [3.0, 4.0, 5.0], ("sgi", game): [2.0, 3.0, 6.0]})
    second = runs_of({("none", game): [4.0, 3.0, 2.0], ("sgi", game): [2.0, 5.0, 6.0]})
    table = rerun_table(first, second, reps=200).set_index("method")

    def norm(score: float) -> float:  # affine in the return: the mean's score is the scores' mean
        return float(minatar_normalized_score(game, score))

    iqm = {
        "none_first": norm(4.0),
        "none_second": norm(3.0),
        "sgi_first": norm(11 / 3),
        "sgi_second": norm(13 / 3),
    }
    assert table.loc["none", "iqm_first"] == pytest.approx(iqm["none_first"])
    assert table.loc["none", "iqm_second"] == pytest.approx(iqm["none_second"])
    assert table.loc["sgi", "gap_first"] == pytest.approx(iqm["sgi_first"] - iqm["none_first"])
    assert table.loc["sgi", "gap_second"] == pytest.approx(iqm["sgi_second"] - iqm["none_second"])
    assert np.isnan(table.loc["none", "gap_first"])
    # none's second run against its first, seed by seed: 4>3, 3<4, 2<5
    assert table.loc["none", ["above", "below", "level"]].tolist() == [1, 2, 0]
    step = norm(1.0) - norm(0.0)
    assert table.loc["none", "same_seed"] == pytest.approx((1 + 1 + 3) / 3 * step)
    # other seeds: |first(s) - second(t)| for s != t: |3-3| |3-2| |4-4| |4-2| |5-4| |5-3|
    assert table.loc["none", "other_seed"] == pytest.approx((0 + 1 + 0 + 2 + 1 + 2) / 6 * step)
    assert table.loc["sgi", ["above", "below", "level"]].tolist() == [1, 0, 2]
    text = rerun_markdown(first, second, ("a", "b"), table=table.reset_index())
    assert "| method | games | IQM, a | IQM, b |" in text
    assert "| sgi | 1 |" in text and "| 1 / 0 / 2 |" in text


def test_a_method_only_one_run_finished_is_left_out():
    game = "minatar/breakout"
    first = runs_of({("none", game): [3.0, 4.0, 5.0], ("g_i", game): [1.0, 2.0, 3.0]})
    second = runs_of({("none", game): [4.0, 3.0, 2.0]})
    assert list(rerun_table(first, second, reps=50)["method"]) == ["none"]
    assert rerun_markdown(first.iloc[:0], second, reps=50).startswith("No method")


def test_the_figure_puts_each_seed_of_both_runs_at_its_scores_and_keeps_a_users_file(tmp_path):
    game = "minatar/breakout"
    first = runs_of({("none", game): [3.0, 4.0, 5.0]})
    second = runs_of({("none", game): [3.0, 3.0, 2.0], ("sgi", game): [1.0, 1.0, 1.0]})
    path = write_rerun_figure(first, second, tmp_path / "rerun.svg", ("a", "b"))
    svg = path.read_text()
    assert svg.startswith("<svg") and RERUN_MARK in svg
    assert svg.count("<title>") == 3  # none's three seeds; sgi has no first run
    # seed 0 scored the same in both runs: its point is on the diagonal (cx - x0 == y0 - cy)
    x0, y0 = (float(v) for v in re.search(r'points="([\d.]+),[\d.]+ [\d.]+,([\d.]+)', svg).groups())
    cx, cy = (
        float(v) for v in re.search(r'<circle cx="([\d.]+)" cy="([\d.]+)" r="3"', svg).groups()
    )
    assert cx - x0 == pytest.approx(y0 - cy, abs=0.1)
    mine = tmp_path / "mine.svg"
    mine.write_text("<svg>my own</svg>")
    with pytest.raises(FileExistsError, match="not a rerun figure of ours"):
        write_rerun_figure(first, second, mine)
    assert mine.read_text() == "<svg>my own</svg>"


def test_a_method_against_each_draw_of_scratch_and_both_pooled():
    """sgi against two draws of scratch on Breakout and against both: seed pairs use the mean
    of a seed's scratch runs, the aggregates every scratch run (six when pooled)."""
    game = "minatar/breakout"
    runs = runs_of({("sgi", game): [2.0, 3.0, 6.0], ("none", game): [3.0, 4.0, 5.0]})
    other = runs_of({("none", game): [0.0, 5.0, 1.0]})
    baselines = {"a": runs, "b": other, "both": pd.concat([runs, other])}
    table = baseline_table(runs, baselines, reps=200).set_index("baseline")
    assert set(table["method"]) == {"sgi"}
    # against a: 2<3, 3<4, 6>5; against b: 2>0, 3<5, 6>1; pooled means 1.5, 4.5, 3: the same
    assert table.loc["a", ["above", "below", "level"]].tolist() == [1, 2, 0]
    assert table.loc["b", ["above", "below", "level"]].tolist() == [2, 1, 0]
    assert table.loc["both", ["above", "below", "level"]].tolist() == [2, 1, 0]
    # every sgi run against every none run of a: 6 beats three, 3 ties one: (3 + 0.5) / 9
    assert table.loc["a", "p_improve"] == pytest.approx(3.5 / 9)

    def norm(score: float) -> float:
        return float(minatar_normalized_score(game, score))

    # six pooled runs 0, 1, 3, 4, 5, 5: the IQM trims int(1.5) = 1 from each end -> 1, 3, 4, 5
    assert table.loc["both", "none_iqm"] == pytest.approx(norm(13 / 4))
    assert table.loc["a", "iqm"] == pytest.approx(norm(11 / 3))
    text = baseline_markdown(runs, baselines, table=table.reset_index())
    assert "| sgi | 1 |" in text and "against both: P(improvement over none)" in text


def test_compare_runs_takes_two_runs_of_a_folder_or_csv_and_names_a_bad_one(tmp_path):
    with pytest.raises(ValueError, match="give two runs of one study"):
        compare_runs({"only": FIRST_RUN})
    with pytest.raises(ValueError, match="neither an experiment folder"):
        compare_runs({"first": FIRST_RUN, "second": tmp_path})
    same = compare_runs({"a": FIRST_RUN, "b": FIRST_RUN}, reps=50)
    rerun = same["rerun"].set_index("method")
    assert (rerun["same_seed"] == 0).all() and (rerun["level"] == 15).loc["s"]  # a run is itself
    assert "### Each method of a against each draw of scratch" in same["markdown"]


def test_a_run_is_compared_with_a_csv_at_the_csvs_precision(tmp_path):
    """The same agents, once as a two-decimal CSV and once at full precision: level, not
    above or below for the digits the table dropped."""
    game = "minatar/breakout"
    exact = runs_of({("none", game): [3.1333333, 3.4333333, 2.9]})
    csv = tmp_path / "first.csv"
    csv.write_text(
        "objective,scheme,game,seed,score\n"
        + "".join(f"none,none,{game},{s},{v:.2f}\n" for s, v in enumerate(exact["score"]))
    )
    first = published_runs(csv)
    assert set(first["decimals"]) == {2}
    row = rerun_table(first, exact, reps=50).set_index("method").loc["none"]
    assert (row["above"], row["below"], row["level"]) == (0, 0, 3) and row["same_seed"] == 0


def finetune_folder(root: Path, label: str, game: str, seed: int, score: float, episodes):
    """An experiment's finished agent: its evaluation's mean ``score``, training ``episodes``."""
    folder = root / "finetune" / label / f"{game.replace('/', '-')}__s{seed}"
    folder.mkdir(parents=True)
    (folder / "status.json").write_text(json.dumps({"state": "finished", "params": label}))
    (folder / "config.yaml").write_text(yaml.safe_dump({"game": game, "seed": seed}))
    normalized = float(minatar_normalized_score(game, score))
    evaluation = {"game": game, "mean": score, "normalized_score": normalized, "episodes": 30}
    evaluation["normalization"] = "MinAtar score"
    (folder / "eval.json").write_text(json.dumps(evaluation))
    rows = "".join(
        json.dumps({"step": 100 * i, "episode/return": r}) + "\n" for i, r in enumerate(episodes)
    )
    (folder / "metrics.jsonl").write_text(rows)


def test_compare_runs_sets_the_second_runs_own_methods_against_each_draw_and_by_training(tmp_path):
    """A CSV first run with scratch only; a folder second run with scratch and x, where x ends
    below scratch (final evaluation) but learned sooner (training episodes): x is in the second
    run's baseline table against both draws, and its training readout turns the comparison."""
    game = "minatar/breakout"
    csv = tmp_path / "first.csv"
    csv.write_text(
        "objective,scheme,game,seed,score\n"
        + "".join(f"none,none,{game},{seed},4.00\n" for seed in range(3))
    )
    second = tmp_path / "second"
    for seed in range(3):
        finetune_folder(second, "sgi_none", game, seed, 5.0, [0.0, 0.0, 6.0])
        finetune_folder(second, "reduced_lr__x", game, seed, 3.0, [3.0, 3.0, 3.0])
    result = compare_runs({"a": csv, "b": second}, reps=50)
    own = result["second_baselines"].set_index("baseline")
    assert own.loc["b", "method"] == "x" and own.loc["b", "p_improve"] == 0.0
    assert own.loc["a", "p_improve"] == 0.0  # 3 < 4: below the first draw too
    assert own.loc["a", "none_iqm"] == pytest.approx(minatar_normalized_score(game, 4.0))
    training = result["training"].set_index("method")
    # training episodes: x's mean 3 against scratch's 2 in every run pair
    assert training.loc["x", "p_improve"] == 1.0
    assert training.loc["x", "iqm"] == pytest.approx(minatar_normalized_score(game, 3.0))
    assert training.loc["x", "none_iqm"] == pytest.approx(minatar_normalized_score(game, 2.0))
    assert "### Each method of b against each draw of scratch" in result["markdown"]
    assert "### b read by its training episodes" in result["markdown"]
    # pooled: x's three runs (b only) against six scratch runs, 4.00 and 5.00 three times each
    pooled = result["pooled"].set_index("method")
    assert pooled.loc["x", "runs"] == 1 and pooled.loc["x", "p_improve"] == 0.0
    assert pooled.loc["x", "none_iqm"] == pytest.approx(minatar_normalized_score(game, 4.5))
    # a CSV second run keeps final returns only: no training readout
    assert compare_runs({"a": csv, "b": csv}, reps=50)["training"].empty


def test_two_draws_of_a_method_pool_like_scratch_as_far_as_every_seed_has_both():
    """sgi run twice on Breakout (x on Asterix once more on one seed only), scratch once: the
    pooled sgi counts six runs in the aggregates and a seed's mean in the pairs; x keeps one."""
    breakout, asterix = "minatar/breakout", "minatar/asterix"
    first = runs_of({("sgi", breakout): [2.0, 3.0, 6.0], ("none", breakout): [3.0, 4.0, 5.0]})
    more = runs_of({("x", asterix): [1.0, 1.0, 1.0], ("none", asterix): [0.5, 0.5, 0.5]})
    first = pd.concat([first, more])
    second = runs_of({("sgi", breakout): [4.0, 6.0, 2.0], ("x", asterix): [2.0]})
    both = pd.concat([first, second])
    table = baseline_table(both, {"a": first}, reps=200).set_index("method")
    assert table.loc["sgi", "runs"] == 2 and table.loc["x", "runs"] == 1
    # seed means 3, 4.5, 4 against 3, 4, 5: level, above, below
    assert table.loc["sgi", ["above", "below", "level"]].tolist() == [1, 1, 1]

    def norm(score: float) -> float:
        return float(minatar_normalized_score(breakout, score))

    # six runs 2, 2, 3, 4, 6, 6: the IQM trims one from each end -> 2, 3, 4, 6
    assert table.loc["sgi", "iqm"] == pytest.approx(norm(15 / 4))
    # every sgi run against every none run: wins 4>3, 6>3/4/5 (x2), ties 3=3, 4=4, 2s lose
    wins = 1 + 3 + 3 + 0.5 * 2  # 4 beats 3, each 6 beats three, ties count a half
    assert table.loc["sgi", "p_improve"] == pytest.approx(wins / 18)
    text = baseline_markdown(both, {"a": first}, table=table.reset_index())
    assert "| sgi | 1, 2 draws pooled |" in text and "| x | 1 |" in text
