"""The MinAtar study's results (sgi_lab.studies.finetune_study) on a hand-made experiment
folder whose scores make every statistic checkable by hand."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import yaml

from sgi_lab.metrics.minatar import normalized_score
from sgi_lab.studies import finetune_budgets as fb
from sgi_lab.studies import finetune_probes as fp
from sgi_lab.studies import finetune_report as fr
from sgi_lab.studies import finetune_study as ms
from sgi_lab.viz.study_tables import paired_markdown

GAMES = ["minatar/asterix", "minatar/breakout"]


def agent(root: Path, label: str, game: str, seed: int, score: float | None, returns=()) -> None:
    folder = root / "finetune" / label / f"{game.replace('/', '-')}__s{seed}"
    folder.mkdir(parents=True)
    state = "finished" if score is not None else "running"
    (folder / "status.json").write_text(json.dumps({"state": state, "params": label}))
    (folder / "config.yaml").write_text(yaml.safe_dump({"game": game, "seed": seed}))
    if score is not None:
        evaluation = {
            "game": game,
            "mean": 10 * score,
            "normalized_score": score,
            "normalization": "MinAtar score",
            "hns": score,
            "episodes": 30,
        }
        (folder / "eval.json").write_text(json.dumps(evaluation))
    rows = [{"step": step, "episode/return": r} for step, r in returns]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def study(tmp_path):
    """none scores 0.1 + 0.01 seed, s 0.5 + 0.01 seed (above none everywhere), sgi like none;
    sgi naive 0.2; one s agent on Breakout still running (so Breakout is not common to s)."""
    for g in GAMES:
        for seed in range(3):
            agent(tmp_path, "sgi_none", g, seed, 0.1 + 0.01 * seed, [(500, 1.0), (1500, 3.0)])
            agent(tmp_path, "reduced_lr__sgi", g, seed, 0.1 + 0.01 * seed)
            agent(tmp_path, "naive__sgi", g, seed, 0.2)
            running = g == "minatar/breakout" and seed == 2
            agent(tmp_path, "reduced_lr__s", g, seed, None if running else 0.5 + 0.01 * seed)
    return tmp_path


def test_labels_split_into_objective_and_scheme():
    assert ms.split_label("reduced_lr__s_g") == ("s_g", "reduced_lr")
    assert ms.split_label("naive__sgi") == ("sgi", "naive")
    assert ms.split_label("sgi_none") == ("none", "none")


def test_runs_and_matrices_use_only_games_every_method_finished(study):
    runs = ms.study_runs(study)
    assert len(runs) == 24 and runs["finished"].sum() == 23
    matrices = ms.score_matrices(runs)
    assert set(matrices) == {"none", "sgi", "s"}  # naive is another scheme
    # Breakout lacks s's third seed: only Asterix is common; rows are seeds 0, 1, 2
    np.testing.assert_allclose(matrices["s"], [[0.5], [0.51], [0.52]])
    np.testing.assert_allclose(matrices["none"], [[0.1], [0.11], [0.12]])


def test_objective_table_has_cis_and_probability_of_improvement_over_none(study):
    table = ms.objective_table(ms.study_runs(study), reps=200)
    assert list(table.index) == ["s", "none", "sgi"] or list(table.index) == ["s", "sgi", "none"]
    # IQM of three values is their middle quarter-trimmed mean: 0.51 for s
    assert table.loc["s", "iqm"] == pytest.approx(0.51)
    # s beats none on every run pair: probability 1 with the interval [1, 1]
    assert table.loc["s", ["p_improve_value", "p_improve_lower", "p_improve_upper"]].tolist() == [
        1.0,
        1.0,
        1.0,
    ]
    assert table.loc["sgi", "p_improve_value"] == pytest.approx(0.5)  # same scores as none
    assert (table["iqm_lower"] <= table["iqm"]).all() and (table["iqm"] <= table["iqm_upper"]).all()
    assert set(table["games"]) == {1} and set(table["runs"]) == {3}


def test_markdown_says_how_much_finished_and_shows_schemes(study):
    """s is still running (Breakout seed 2): none and sgi are tabled over both games, s beside
    them over the one game all three finished; once s finishes, one table over both games."""
    text = fr.study_markdown(study, planned=30, reps=200)
    assert "Finished agents: 23 of 30 (MinAtar score:" in text
    objectives = text.split("### SGI's finetuning schemes")[0]
    complete, running = objectives.split("With the objectives still running")
    assert "Over 2 games x 3 seeds" in complete and "| sgi | 0.110 [" in complete
    assert "| s |" not in complete
    assert running.startswith(", over the games every objective in it has finished (s):")
    assert "Over 1 games x 3 seeds" in running
    assert "| s | 0.510 [" in running and "| 1.00 [1.00, 1.00] |" in running
    assert "### SGI's finetuning schemes" in text and "| sgi (naive) |" in text
    assert "### Per game" in text
    assert ms.complete_objectives(ms.study_runs(study)) == ["none", "sgi"]

    shutil.rmtree(study / "finetune" / "reduced_lr__s" / "minatar-breakout__s2")
    agent(study, "reduced_lr__s", "minatar/breakout", 2, 0.52)
    text = fr.study_markdown(study, planned=30, reps=200)
    assert "still running" not in text and "Over 2 games x 3 seeds" in text
    assert "| s | 0.510 [" in text
    assert "median HNS: rho = " in text and "(p = " in text and "3 objectives)" in text


def test_learning_curves_bin_training_returns(study):
    curves = ms.learning_curves(ms.study_runs(study), bin_steps=1000)
    none = curves[(curves["objective"] == "none") & (curves["seed"] == 0)]
    assert sorted(none["step"].unique()) == [1000, 2000]
    assert none[none["step"] == 2000]["return"].tolist() == [3.0, 3.0]  # one per game


def test_an_episode_ending_on_a_bin_edge_is_in_the_bin_it_ends(tmp_path):
    """A run of 2,000 steps whose last episode ends at step 2,000 has no bin past its end."""
    agent(tmp_path, "sgi_none", "minatar/breakout", 0, 0.1, [(999, 1.0), (1000, 3.0), (2000, 5.0)])
    curves = ms.learning_curves(ms.study_runs(tmp_path), bin_steps=1000)
    assert curves.set_index("step")["return"].to_dict() == {1000: 2.0, 2000: 5.0}


def test_the_curves_figure_draws_each_game_and_method_and_keeps_foreign_files(study, tmp_path):
    runs = ms.study_runs(study)
    path = tmp_path / "curves.svg"
    fr.write_curves_figure(runs, path, methods=["none", "s", "sgi (naive)"], bin_steps=1000)
    root = ET.fromstring(path.read_text())  # well-formed
    text = path.read_text()
    assert fr.CURVES_MARK in text and "asterix" in text and "breakout" in text
    # none has returns on both games: one line per game; s and naive log no episodes
    lines = [e for e in root.iter("{http://www.w3.org/2000/svg}polyline")]
    coloured = [e for e in lines if e.get("stroke") != "#888"]
    assert len(coloured) == 2
    # each line: the mean of seeds 0-2 at steps 1000 (1.0) and 2000 (3.0), the panel's top 3.15
    first = coloured[0].get("points").split()
    assert len(first) == 2
    legend = [e.text for e in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "none" in legend and "3.15" in legend
    assert "s" not in legend  # a method without training episodes is left out of the legend
    fr.write_curves_figure(runs, path)  # ours: redrawn
    foreign = tmp_path / "mine.svg"
    foreign.write_text("<svg/>")
    with pytest.raises(FileExistsError, match="not a learning-curve figure of ours"):
        fr.write_curves_figure(runs, foreign)
    assert foreign.read_text() == "<svg/>"


def test_per_game_returns_give_the_evaluation_and_the_training_mean_with_t_intervals(study):
    returns = ms.per_game_returns(ms.study_runs(study)).set_index(["method", "game", "readout"])
    # none on Asterix: evaluations 1.0, 1.1, 1.2 (10 x score) -> 1.1 +- t(2) 4.303 x 0.1/sqrt(3)
    row = returns.loc[("none", "minatar/asterix", "eval")]
    assert row["value"] == pytest.approx(1.1)
    assert row["upper"] - row["value"] == pytest.approx(4.3027 * 0.1 / np.sqrt(3), rel=1e-4)
    # its training episodes returned 1 and 3 in every run: mean 2, no spread
    row = returns.loc[("none", "minatar/asterix", "training")]
    assert (row["value"], row["lower"], row["upper"], row["seeds"]) == (2.0, 2.0, 2.0, 3)
    assert ("sgi (naive)", "minatar/breakout", "eval") in returns.index
    assert returns.loc[("s", "minatar/breakout", "eval")]["seeds"] == 2  # one still running
    text = fr.study_markdown(study, planned=30, reps=200)
    assert "| method | asterix eval | asterix training | breakout eval |" in text
    assert "| none | 1.10 [0.85, 1.35] | 2.00 [2.00, 2.00] |" in text


def test_probe_finetune_table_pairs_each_objectives_probe_with_its_iqm():
    import pandas as pd

    probes = pd.DataFrame(
        [  # (objective, game, seed, F1): random encoders stand for none
            ("random_init", "minatar/asterix", 0, 0.70),
            ("random_init", "minatar/asterix", 1, 0.72),
            ("random_init", "minatar/breakout", 0, 0.80),
            ("s", "minatar/asterix", 0, 0.75),
            ("s", "minatar/breakout", 0, 0.85),
            ("sgi", "minatar/asterix", 0, 0.60),
            ("atc", "minatar/asterix", 0, 0.99),  # not finetuned: left out
        ],
        columns=["objective", "game", "seed", "across_categories"],
    )
    table = pd.DataFrame({"iqm": [0.5, 0.3, 0.1]}, index=["s", "none", "sgi"])
    frame, corr = fp.probe_finetune_table(probes, table)
    assert list(frame.index) == ["s", "none", "sgi"]
    assert frame.loc["none", "probe"] == pytest.approx((0.71 + 0.80) / 2)  # games' means
    assert frame.loc["s", "probe_games"] == 2 and frame.loc["sgi", "probe_games"] == 1
    # probe ranks s 0.80 > none 0.755 > sgi 0.60; IQM ranks the same: rho = 1
    assert corr["n"] == 3 and corr["rho"] == pytest.approx(1.0)
    asterix, _ = fp.probe_finetune_table(probes, table, games=["minatar/asterix"])
    assert asterix.loc["none", "probe"] == pytest.approx(0.71)
    _, few = fp.probe_finetune_table(probes, table.loc[["s", "sgi"]])
    assert few["rho"] is None and few["n"] == 2


def test_budget_curve_reads_steps_from_names_with_none_at_zero(tmp_path):
    """minatar_pretrain_budget.yaml's labels: sgi pretrained 500 and 2,000 steps beside none;
    every seed of sgi_2000 beats none's, sgi_500 equals none's."""
    for g in GAMES:
        for seed in range(3):
            agent(tmp_path, "sgi_none", g, seed, 0.1 + 0.01 * seed)
            agent(tmp_path, "reduced_lr__sgi_500", g, seed, 0.1 + 0.01 * seed)
            agent(tmp_path, "reduced_lr__sgi_2000", g, seed, 0.3 + 0.01 * seed)
    agent(tmp_path, "frozen__sgi_500", GAMES[0], 0, None)  # first in folder order, running
    table = ms.objective_table(ms.study_runs(tmp_path), reps=200)
    curve = fb.budget_curve(table)
    assert curve[["objective", "steps", "method"]].values.tolist() == [
        ["sgi", 0, "none"],
        ["sgi", 500, "sgi_500"],
        ["sgi", 2000, "sgi_2000"],
    ]
    assert curve["iqm"].tolist() == pytest.approx([0.11, 0.11, 0.31])
    assert curve["p_improve_value"].tolist()[1:] == pytest.approx([0.5, 1.0])
    text = fr.study_markdown(tmp_path, reps=200)
    assert "Finished agents: 18 of 19 (MinAtar score: 0 = uniform random" in text
    assert "| sgi | 0 | 0.110 [" in text and "| - |" in text
    assert "| sgi | 2,000 | 0.310 [" in text and "| 1.00 [1.00, 1.00] |" in text
    # One budget per objective is no curve.
    assert fb.budget_curve(table.drop(index="sgi_500")).empty


def test_per_seed_markdown_puts_each_seed_beside_the_same_seed_from_scratch(study):
    text = ms.per_seed_markdown(ms.study_runs(study), methods=["none", "sgi (naive)", "s"])
    lines = text.splitlines()
    assert lines[0] == "| game | seed | none | sgi (naive) | s |"
    # scores are 10x the normalised score (the fixture's eval.json); Breakout's s seed 2 runs
    assert "| minatar/asterix | 0 | 1.00 | 2.00 | 5.00 |" in lines
    assert "| minatar/breakout | 2 | 1.20 | 2.00 | - |" in lines


def test_paired_table_counts_each_seed_against_scratch_under_both_readouts(tmp_path):
    """x against none: on Asterix above, level and below (seeds 0-2), on Breakout above in
    every seed; its training episodes return 1 against scratch's 2 everywhere."""
    scores = {"minatar/asterix": [0.2, 0.1, 0.05], "minatar/breakout": [0.2, 0.2, 0.2]}
    for g in GAMES:
        for seed in range(3):
            agent(tmp_path, "sgi_none", g, seed, 0.1, [(500, 2.0)])
            agent(tmp_path, "reduced_lr__x", g, seed, scores[g][seed], [(500, 1.0)])
    agent(tmp_path, "reduced_lr__y", GAMES[0], 0, 0.3)  # one game, no training episodes
    table = ms.paired_table(ms.study_runs(tmp_path)).set_index(["method", "readout"])
    x = table.loc[("x", "eval")]
    assert (x["games"], x["pairs"], x["above"], x["below"], x["level"]) == (2, 6, 4, 1, 1)
    # two-sided sign test, level pair left out: P(<= 1 or >= 4 of 5) = 12/32
    assert x["sign_p"] == pytest.approx(12 / 32)
    x = table.loc[("x", "training")]
    assert (x["above"], x["below"], x["sign_p"]) == (0, 6, pytest.approx(2 / 64))
    assert ("y", "training") not in table.index  # no training episode to compare
    assert table.loc[("y", "eval")][["pairs", "above"]].tolist() == [1, 1]
    text = paired_markdown(ms.paired_table(ms.study_runs(tmp_path)), ["y", "x"])
    lines = text.splitlines()
    assert lines[0].startswith("| method | games | pairs | final evaluation: above / below")
    assert lines[2:] == ["| y | 1 | 1 | 1 / 0 / 0 | 1.00 | - | - |",
                         "| x | 2 | 6 | 4 / 1 / 1 | 0.38 | 0 / 6 / 0 | 0.03 |"]  # fmt: skip
    assert text in fr.study_markdown(tmp_path, reps=200, methods=["y", "x"])


def test_readout_runs_rescore_agents_by_their_training_episodes(tmp_path):
    """The training readout replaces each agent's score by the mean of its training episodes
    and its normalised score by that return's (0 at random, 1 at the reference); an agent
    without a training episode drops out, and the tables built on the frame follow."""
    from sgi_lab.metrics.minatar import minatar_random_score, minatar_reference_score

    game = GAMES[0]
    low, high = minatar_random_score(game), minatar_reference_score(game)
    for seed in range(3):
        # evaluation: x above scratch; training episodes: x below it, at 25% / 75% of the way
        returns = [(500, low), (900, low + 0.5 * (high - low))]
        agent(tmp_path, "sgi_none", game, seed, 0.1, [(500, low + 0.75 * (high - low))])
        agent(tmp_path, "reduced_lr__x", game, seed, 0.5, returns)
    agent(tmp_path, "reduced_lr__y", game, 0, 0.3)  # no training episode
    runs = ms.study_runs(tmp_path)
    training = ms.readout_runs(runs, "training")
    x = training[training["objective"] == "x"]
    np.testing.assert_allclose(x["normalized"], [0.25] * 3)
    np.testing.assert_allclose(x["score"], [low + 0.25 * (high - low)] * 3)
    assert not training[training["objective"] == "y"]["finished"].any()
    table = ms.objective_table(training, reps=100)
    assert table.loc["x", "iqm"] == pytest.approx(0.25)
    assert table.loc["none", "iqm"] == pytest.approx(0.75)
    assert table.loc["x", "p_improve_value"] == 0.0  # under evaluation it is 1
    assert (
        ms.objective_table(ms.readout_runs(runs, "eval"), reps=100).loc["x", "p_improve_value"]
        == 1.0
    )
    with pytest.raises(ValueError, match="readout 'area'.*eval, training"):
        ms.readout_runs(runs, "area")


def test_budget_runs_take_zero_and_2000_steps_from_the_study_and_show_each_scheme(tmp_path):
    """The budget experiment has sgi_500 and sgi_8000 under two schemes; its 0 and 2,000-step
    points are the objective study's none and sgi agents (one already in the budget folder is
    not doubled), and each scheme gets its own curve."""
    study, budget = tmp_path / "study", tmp_path / "budget"
    for g in GAMES:
        for seed in range(3):
            agent(study, "sgi_none", g, seed, 0.1 + 0.01 * seed)
            agent(study, "reduced_lr__sgi", g, seed, 0.2 + 0.01 * seed)
            agent(study, "naive__sgi", g, seed, 0.3 + 0.01 * seed)
            agent(study, "reduced_lr__s", g, seed, 0.9)  # another objective: not on the curve
            agent(study, "frozen__sgi", g, seed, 0.9)  # a scheme the budget folder lacks: neither
            for scheme, base in (("reduced_lr", 0.0), ("naive", 0.4)):
                agent(budget, f"{scheme}__sgi_500", g, seed, base + 0.05 + 0.01 * seed)
                agent(budget, f"{scheme}__sgi_8000", g, seed, base + 0.5 + 0.01 * seed)
    agent(budget, "sgi_none", GAMES[0], 0, 0.1)  # an older budget experiment's own scratch agent

    runs = fb.budget_runs(budget, study)
    assert sorted(runs["objective"].unique()) == ["none", "sgi_2000", "sgi_500", "sgi_8000"]
    assert len(runs) == 2 * 3 * (4 + 2 + 1) and runs["finished"].all()
    assert (runs["objective"] == "none").sum() == 6  # not 7: the budget folder's own is kept

    naive = fb.budget_curve(ms.objective_table(runs, "naive", reps=200))
    assert naive[["steps", "method"]].values.tolist() == [
        [0, "none"],
        [500, "sgi_500"],
        [2000, "sgi_2000"],
        [8000, "sgi_8000"],
    ]
    assert naive["iqm"].tolist() == pytest.approx([0.11, 0.46, 0.31, 0.91])
    reduced = fb.budget_curve(ms.objective_table(runs, "reduced_lr", reps=200))
    assert reduced["iqm"].tolist() == pytest.approx([0.11, 0.06, 0.21, 0.51])
    assert reduced["p_improve_value"].tolist()[1:] == pytest.approx([0.0, 1.0, 1.0])

    assert "frozen" not in set(runs["scheme"])
    text = fb.budget_study_markdown(budget, study, reps=200)
    assert "frozen" not in text
    assert "### Finetuned with reduced learning rates (the paper's scheme)" in text
    assert "### Finetuned naively (every rate the same)" in text
    assert "| sgi | 8,000 | 0.910 [" in text and "| sgi | 2,000 | 0.210 [" in text
    assert "reduced_lr__s" not in text and "| s |" not in text
    # Each seed by budget beside scratch, one table per scheme (naive: 0.4 + 0.05 + 0.01 seed)
    assert "| game | seed | none | sgi_500 | sgi_2000 | sgi_8000 |" in text
    assert "| game | seed | none | sgi_500 (naive) | sgi_2000 (naive) | sgi_8000 (naive) |" in text
    assert "| minatar/asterix | 1 | 1.10 | 4.60 | 3.10 | 9.10 |" in text
    # Each budget against scratch seed by seed: 500 steps below in all 6 pairs (reduced lrs),
    # above in all 6 (naive); no training episodes here, so the final evaluation only
    assert "| sgi_500 | 2 | 6 | 0 / 6 / 0 | 0.03 |" in text
    assert "| sgi_500 (naive) | 2 | 6 | 6 / 0 / 0 | 0.03 |" in text
    # The figure: one line per scheme, a point and an error bar per budget, scratch dashed.
    figure = tmp_path / "budget.svg"
    text = fb.budget_study_markdown(budget, study, reps=200, figure=figure)
    assert "![IQM by SGI pretraining budget, each scheme](budget.svg)" in text
    svg = ET.fromstring(figure.read_text())
    ns = "{http://www.w3.org/2000/svg}"
    lines = [p for p in svg.iter(f"{ns}polyline") if p.get("stroke") != "#888"]
    assert len(lines) == 2 and all(len(p.get("points").split()) == 4 for p in lines)
    assert len(list(svg.iter(f"{ns}circle"))) == 8
    labels = {t.text for t in svg.iter(f"{ns}text")}
    assert {"reduced lr", "naive", "from scratch", "0", "500", "2,000", "8,000"} <= labels
    # The naive line's 8,000-step point is above its 2,000-step one (IQM 0.91 against 0.31):
    naive = [float(xy.split(",")[1]) for xy in lines[1].get("points").split()]
    assert naive[3] < naive[2]  # SVG's y grows downwards
    fb.budget_study_markdown(budget, study, reps=200, figure=figure)  # its own: redrawn
    for theirs in ("my notes", '<svg xmlns="http://www.w3.org/2000/svg"><circle r="1"/></svg>'):
        other = tmp_path / "theirs.svg"
        other.write_text(theirs)
        with pytest.raises(FileExistsError, match="not a budget figure of ours"):
            fb.budget_study_markdown(budget, study, reps=200, figure=other)
        assert other.read_text() == theirs
    # Without the study, the budget folder alone has no 2,000-step point but still a curve.
    alone = fb.budget_runs(budget)
    assert "sgi_2000" not in set(alone["objective"])


def test_finetune_budget_compares_each_method_at_each_budget_on_the_same_games(tmp_path):
    """The study at 10k steps and its 2x experiment (labels ``reduced_lr_2x__sgi``,
    ``sgi_none_2x``): a method has one name at both budgets; only methods both budgets have,
    on the games every one of them finished at both (Breakout is still running at 2x), with
    each method's sign count against the same seed from scratch."""
    study, twice = tmp_path / "study", tmp_path / "twice"
    for g in GAMES:
        for seed in range(3):
            agent(study, "sgi_none", g, seed, 0.1 + 0.01 * seed)
            agent(study, "reduced_lr__sgi", g, seed, 0.05 + 0.01 * seed)  # below none
            agent(study, "naive__sgi", g, seed, 0.2)  # above none (0.10-0.12)
            agent(study, "reduced_lr__s_g", g, seed, 0.9)  # not at 2x: left out
            running = g == "minatar/breakout" and seed == 1
            agent(twice, "sgi_none_2x", g, seed, 0.3 + 0.01 * seed)
            agent(twice, "reduced_lr_2x__sgi", g, seed, None if running else 0.4 + 0.01 * seed)
            agent(twice, "naive_2x__sgi", g, seed, 0.2 + 0.05 * (seed == 2))  # 0.2, 0.2, 0.25
    folders = {"10k steps": study, "20k steps": twice}

    runs = fb.finetune_budget_runs(folders)
    assert set(runs["method"]) == {"none", "sgi", "sgi (naive)", "s_g"}
    assert set(runs.loc[runs["budget"] == "20k steps", "method"]) == {"none", "sgi", "sgi (naive)"}

    table = fb.finetune_budget_table(folders, reps=200).set_index(["budget", "method"])
    assert set(table.index) == {(b, m) for b in folders for m in ("none", "sgi", "sgi (naive)")}
    assert (table["games"] == 1).all() and (table["runs"] == 3).all()  # Asterix only
    assert table.loc[("10k steps", "sgi"), "iqm"] == pytest.approx(0.06)
    assert table.loc[("20k steps", "sgi"), "iqm"] == pytest.approx(0.41)
    assert table.loc[("10k steps", "sgi"), "below_none"] == 3
    assert table.loc[("20k steps", "sgi"), "below_none"] == 0
    assert table.loc[("10k steps", "sgi (naive)"), "below_none"] == 0
    assert table.loc[("20k steps", "sgi (naive)"), "below_none"] == 3  # 0.25 < 0.32 too
    assert table.loc[("10k steps", "sgi (naive)"), "above_none"] == 3
    assert (table.loc[("10k steps", "sgi"), ["above_none", "level_none"]] == 0).all()
    # all 3 pairs one way: two-sided sign test p = 2 * 0.5**3
    assert table.loc[("10k steps", "sgi"), "sign_p"] == pytest.approx(0.25)
    assert table.loc[("20k steps", "sgi"), "sign_p"] == pytest.approx(0.25)
    assert table.loc[("10k steps", "sgi"), "p_improve_value"] == pytest.approx(0.0)
    assert table.loc[("20k steps", "sgi"), "p_improve_value"] == pytest.approx(1.0)
    assert (table["pairs"] == 3).all()

    text = fb.finetune_budget_markdown(folders, reps=200)
    assert "Over 1 games x 3 seeds at each budget" in text
    assert "| method | 10k steps: IQM | 10k steps: P(improvement over none) |" in text
    row = next(line for line in text.splitlines() if line.startswith("| sgi |")).split(" | ")
    assert row[1].startswith("0.060 [") and row[3:5] == ["0 / 3 / 0", "0.25"]
    assert row[5].startswith("0.410 [") and row[7:9] == ["3 / 0 / 0", "0.25 |"]
    assert "s_g" not in text
    # naive SGI alone with scratch: Breakout too, which SGI's running agent kept out above
    only = fb.finetune_budget_table(folders, reps=200, methods=["sgi (naive)"])
    only = only.set_index(["budget", "method"])
    assert set(only.index) == {(b, m) for b in folders for m in ("none", "sgi (naive)")}
    assert (only["games"] == 2).all() and (only["pairs"] == 6).all()
    # at 20k naive 0.2, 0.2, 0.25 against scratch 0.3, 0.31, 0.32 on both games: 6 below
    assert only.loc[("20k steps", "sgi (naive)"), "below_none"] == 6
    text = fb.finetune_budget_markdown(folders, reps=200, methods=["sgi (naive)"])
    assert "Over 2 games x 3 seeds" in text and "| sgi |" not in text
    with pytest.raises(ValueError, match=r"\['sgi naive'\]: not in .*sgi \(naive\)"):
        fb.finetune_budget_table(folders, methods=["sgi naive"])
    alone = fb.finetune_budget_markdown({"10k steps": study, "20k steps": tmp_path / "none"})
    assert alone.startswith("No method besides none")


def test_the_finetune_budget_figure_draws_a_line_per_method_and_keeps_foreign_files(tmp_path):
    """Scratch at 0.1 (10k) then 0.3 (20k), SGI at 0.05 then 0.4 on Asterix: two lines of two
    points, scratch's drawn first; the budgets are the ticks; a file of someone else's is left
    alone and a folder with nothing to compare is refused."""
    study, twice = tmp_path / "study", tmp_path / "twice"
    for seed in range(3):
        agent(study, "sgi_none", "minatar/asterix", seed, 0.1)
        agent(study, "reduced_lr__sgi", "minatar/asterix", seed, 0.05)
        agent(twice, "sgi_none_2x", "minatar/asterix", seed, 0.3)
        agent(twice, "reduced_lr_2x__sgi", "minatar/asterix", seed, 0.4)
    folders = {"10k steps": study, "20k steps": twice}
    path = fb.write_finetune_budget_figure(folders, tmp_path / "budgets.svg", reps=100)
    root = ET.fromstring(path.read_text())
    ns = "{http://www.w3.org/2000/svg}"
    texts = [t.text for t in root.iter(f"{ns}text")]
    assert "finetuning budget (1 games x 3 seeds)" in texts
    assert {"10k steps", "20k steps", "none", "sgi"} <= set(texts)
    lines = [p.get("points") for p in root.iter(f"{ns}polyline") if p.get("stroke-width") == "2"]
    assert len(lines) == 2
    ys = [[float(xy.split(",")[1]) for xy in line.split()] for line in lines]
    # scratch first: it rises less than SGI (0.1 -> 0.3 against 0.05 -> 0.4; y grows downwards)
    assert ys[0][0] > ys[0][1] and ys[1][0] > ys[0][0] and ys[1][1] < ys[0][1]
    assert "from scratch" not in texts  # scratch is a line here, not a level
    fb.write_finetune_budget_figure(folders, path, reps=100)  # our own figure: redrawn
    foreign = tmp_path / "mine.svg"
    foreign.write_text("<svg>mine</svg>")
    with pytest.raises(FileExistsError, match="mine.svg"):
        fb.write_finetune_budget_figure(folders, foreign, reps=100)
    assert foreign.read_text() == "<svg>mine</svg>"
    with pytest.raises(ValueError, match="no method besides none"):
        fb.write_finetune_budget_figure({"10k": study, "20k": tmp_path / "x"}, tmp_path / "n.svg")
    assert not (tmp_path / "n.svg").exists()


def test_finetune_budget_reads_either_readout(tmp_path):
    """At 20k steps SGI's final evaluations are above scratch's in every seed (0.4 against 0.3)
    but its training episodes below (mean 1.0 against 5.0): the training readout turns the
    verdict round, at that budget only (at 10k both readouts agree)."""
    study, twice = tmp_path / "study", tmp_path / "twice"
    g = "minatar/asterix"
    for seed in range(3):
        agent(study, "sgi_none", g, seed, 0.1, [(500, 2.0), (900, 4.0)])  # mean 3.0
        agent(study, "reduced_lr__sgi", g, seed, 0.05, [(500, 1.0)])
        agent(twice, "sgi_none_2x", g, seed, 0.3, [(500, 5.0)])
        agent(twice, "reduced_lr_2x__sgi", g, seed, 0.4, [(500, 0.0), (900, 2.0)])  # 1.0
    folders = {"10k steps": study, "20k steps": twice}
    final = fb.finetune_budget_table(folders, reps=200).set_index(["budget", "method"])
    assert final.loc[("20k steps", "sgi"), "above_none"] == 3
    assert final.loc[("20k steps", "sgi"), "p_improve_value"] == pytest.approx(1.0)
    table = fb.finetune_budget_table(folders, reps=200, readout="training")
    table = table.set_index(["budget", "method"])
    assert table.loc[("20k steps", "sgi"), "below_none"] == 3
    assert table.loc[("20k steps", "sgi"), "p_improve_value"] == pytest.approx(0.0)
    assert table.loc[("10k steps", "sgi"), "below_none"] == 3
    none = normalized_score(g, 5.0)  # the training readout's score, normalised as eval's is
    assert table.loc[("20k steps", "none"), "iqm"] == pytest.approx(none)
    text = fb.finetune_budget_markdown(folders, reps=200, readout="training")
    assert "scored by the mean return of its training episodes" in text
    with pytest.raises(ValueError, match="readout 'best'"):
        fb.finetune_budget_runs(folders, readout="best")


def test_finetune_budget_returns_show_every_game_each_budget_has_reached(tmp_path):
    """Per game raw returns at both budgets: unlike the aggregates, a game only the 10k study
    has finished (Breakout at 2x still running for SGI) is shown where it is, with the seeds it
    has; a method only one budget has (s_g) is left out."""
    study, twice = tmp_path / "study", tmp_path / "twice"
    for g in GAMES:
        for seed in range(3):
            agent(study, "sgi_none", g, seed, 0.1 + 0.01 * seed, [(500, 1.0), (900, 3.0)])
            agent(study, "reduced_lr__sgi", g, seed, 0.05)
            agent(study, "reduced_lr__s_g", g, seed, 0.9)
            agent(twice, "sgi_none_2x", g, seed, 0.3, [(500, 7.0)])
            running = g == "minatar/breakout" and seed > 0
            agent(twice, "reduced_lr_2x__sgi", g, seed, None if running else 0.4)
    folders = {"10k steps": study, "20k steps": twice}

    table = fb.finetune_budget_returns(folders).set_index(["budget", "method", "game"])
    assert set(table.index.get_level_values("method")) == {"none", "sgi"}
    # scratch at 10k on Asterix: returns 1.0, 1.1, 1.2 -> 1.1 +- t(2) 4.303 x 0.1 / sqrt(3)
    row = table.loc[("10k steps", "none", "minatar/asterix")]
    assert row["value"] == pytest.approx(1.1) and row["seeds"] == 3
    assert row["upper"] - row["value"] == pytest.approx(4.3027 * 0.1 / np.sqrt(3), rel=1e-4)
    row = table.loc[("20k steps", "sgi", "minatar/breakout")]
    assert (row["value"], row["seeds"]) == (pytest.approx(4.0), 1)
    training = fb.finetune_budget_returns(folders, readout="training")
    training = training.set_index(["budget", "method", "game"])
    assert training.loc[("10k steps", "none", "minatar/asterix"), "value"] == pytest.approx(2.0)
    assert training.loc[("20k steps", "none", "minatar/breakout"), "value"] == pytest.approx(7.0)

    text = fb.finetune_budget_returns_markdown(folders)
    lines = text.splitlines()
    assert "| method | budget | asterix | breakout |" in lines
    rows = [line for line in lines if line.startswith("| none |") or line.startswith("| sgi |")]
    assert [r.split(" | ")[:2] for r in rows] == [
        ["| none", "10k steps"],
        ["| none", "20k steps"],
        ["| sgi", "10k steps"],
        ["| sgi", "20k steps"],
    ]
    assert rows[0] == "| none | 10k steps | 1.10 [0.85, 1.35] | 1.10 [0.85, 1.35] |"
    assert rows[3] == "| sgi | 20k steps | 4.00 [4.00, 4.00] | 4.00 (1 seed) |"
    assert "s_g" not in text and "final evaluation" in text
    assert "mean of every training episode" in fb.finetune_budget_returns_markdown(
        folders, readout="training"
    )
    empty = fb.finetune_budget_returns_markdown({"10k steps": study, "20k": tmp_path / "none"})
    assert empty.startswith("No agent has finished at every budget")
    with pytest.raises(ValueError, match="readout 'best'"):
        fb.finetune_budget_returns(folders, readout="best")


def test_the_probe_section_is_over_the_games_of_the_complete_objectives(study, monkeypatch):
    """While s runs (Breakout seed 2), the probes beside the IQMs are the complete objectives'
    over both games, as their IQMs are, not over the one game s shares with them."""
    import pandas as pd

    probes = pd.DataFrame(
        [
            ("random_init", "minatar/asterix", 0, 0.70),
            ("random_init", "minatar/breakout", 0, 0.90),
            ("sgi", "minatar/asterix", 0, 0.60),
            ("sgi", "minatar/breakout", 0, 0.80),
        ],
        columns=["objective", "game", "seed", "across_categories"],
    )
    monkeypatch.setattr(fr, "experiment_probe_frame", lambda graph: probes)
    text = fr.study_markdown(study, reps=200, graph=object())
    section = text.split("### Probes beside finetuning")[1].split("###")[0]
    assert "| none | 0.800 | 2 | 0.110 |" in section  # (0.70 + 0.90) / 2 over both games
    assert "| sgi | 0.700 | 2 | 0.110 |" in section


def test_an_experiment_at_twice_the_budget_reads_as_the_study(tmp_path):
    """The 2x experiment's labels (``reduced_lr_2x__sgi``, ``naive_2x__sgi``, ``sgi_none_2x``)
    give the study's tables: its objectives against scratch, SGI's schemes, seed pairs."""
    for g in GAMES:
        for seed in range(3):
            agent(tmp_path, "sgi_none_2x", g, seed, 0.3 + 0.01 * seed)
            agent(tmp_path, "reduced_lr_2x__sgi", g, seed, 0.2 + 0.01 * seed)
            agent(tmp_path, "naive_2x__sgi", g, seed, 0.4)
    text = fr.study_markdown(tmp_path, reps=200)
    objectives = text.split("### Objectives (reduced-lr finetuning)")[1].split("###")[0]
    assert "Over 2 games x 3 seeds" in objectives
    assert "| none | 0.310 [" in objectives and "| sgi | 0.210 [" in objectives
    assert "| sgi (naive) | 0.400 [" in text.split("### SGI's finetuning schemes")[1]
    assert "| sgi | 2 | 6 | 0 / 6 / 0 |" in text and "| sgi (naive) | 2 | 6 | 6 / 0 / 0 |" in text


def test_the_probe_section_reads_the_r2_headline_and_says_so(study, monkeypatch):
    """Results of probes.json format 2 on MinAtar lead with a held-out R^2: the section reads it
    (never the category-mean F1 beside it) and names it in its header and sentence."""
    import pandas as pd

    probes = pd.DataFrame(
        [  # (objective, game, seed, headline metric, R^2, F1 of the classified labels)
            ("random_init", "minatar/asterix", 0, "r2", 0.70, 0.99),
            ("random_init", "minatar/breakout", 0, "r2", 0.50, 0.99),
            ("sgi", "minatar/asterix", 0, "r2", 0.90, 0.10),
            ("sgi", "minatar/breakout", 0, "r2", 0.30, 0.10),
        ],
        columns=["objective", "game", "seed", "headline_metric", "state_r2", "across_categories"],
    )
    monkeypatch.setattr(fr, "experiment_probe_frame", lambda graph: probes)
    text = fr.study_markdown(study, reps=200, graph=object())
    section = text.split("### Probes beside finetuning")[1].split("###")[0]
    assert "| objective | probe R² | probe_games | iqm |" in section
    assert "mean held-out R² of the labels read by regression" in section
    assert "| none | 0.600 | 2 | 0.110 |" in section  # (0.70 + 0.50) / 2
    assert "| sgi | 0.600 | 2 | 0.110 |" in section
    assert "mean of category means" not in section
