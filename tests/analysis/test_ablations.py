"""The ablation explorer: run scores, aggregates beside the paper, and widget callbacks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sgi_lab.analysis import ablation_explorer, ablations, run_scores
from sgi_lab.metrics import human_normalized_score, paper_per_game
from sgi_lab.viz.ablations import ablation_figures


def _run(root, name, game, seed, mean, method=None):
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "status.json").write_text(json.dumps({"state": "finished"}))
    (folder / "eval.json").write_text(json.dumps({"game": game, "mean": mean, "scores": [mean]}))
    (folder / "config.yaml").write_text(f"game: {game}\nseed: {seed}\n")
    if method:
        (folder / "results.json").write_text(json.dumps({"method": method}))
    return folder


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs"
    for seed, (pong, breakout) in enumerate([(-10.0, 5.0), (0.0, 10.0), (10.0, 15.0)]):
        _run(root, f"finetune__frozen__Pong__s{seed}", "Pong", seed, pong)
        _run(root, f"finetune__frozen__Breakout__s{seed}", "Breakout", seed, breakout)
    _run(root, "finetune__smoke__Pong__s0", "Pong", 0, -21.0, method="mine")
    _run(root, "finetune__smoke__Breakout__s0", "Breakout", 0, 2.0, method="mine")
    (root / "unevaluated").mkdir()
    return root


def test_find_runs_walks_run_folders(runs):
    """find_runs finds what `run_folders` finds (a status.json of ours) with an eval.json."""
    copy = runs / "copied_eval"  # an eval.json without a run around it
    copy.mkdir()
    (copy / "eval.json").write_text(json.dumps({"game": "Pong", "mean": 1.0}))
    run = runs / "finetune__frozen__Pong__s0"
    (run / "checkpoints" / "old").mkdir(parents=True)  # inside a run's checkpoints/: not a run
    (run / "checkpoints" / "old" / "status.json").write_text(json.dumps({"state": "finished"}))
    (run / "checkpoints" / "old" / "eval.json").write_text(json.dumps({"mean": 0.0}))
    found = run_scores.find_runs(runs)
    assert len(found) == 8 and copy not in found
    assert run_scores.find_runs(run) == [run]  # a run folder given itself
    assert [p.name for p in run_scores.find_runs(runs, "*frozen__Breakout*")] == [
        f"finetune__frozen__Breakout__s{s}" for s in range(3)
    ]
    assert run_scores.find_runs(runs / "missing") == []


def test_load_run_scores(runs):
    found = run_scores.find_runs(runs)
    assert len(found) == 8  # the folder without eval.json is not a run
    scores = run_scores.load_run_scores(found)
    assert set(scores["method"]) == {"frozen", "mine"}
    pong = scores[(scores["method"] == "frozen") & (scores["game"] == "Pong")]
    assert sorted(pong["seed"]) == [0, 1, 2]
    assert pong.set_index("seed")["hns"][1] == pytest.approx(human_normalized_score("Pong", 0.0))
    explicit = run_scores.load_run_scores({"renamed": found[:1]})
    assert explicit["method"].tolist() == ["renamed"]


def test_run_aggregates_have_cis_and_notes(runs):
    scores = run_scores.load_run_scores(run_scores.find_runs(runs))
    df, notes = run_scores.run_aggregates(scores, ["Pong", "Breakout"], reps=200)
    frozen = df[df["method"] == "frozen"].set_index("metric")
    hns = np.array(
        [
            [human_normalized_score(g, s) for g, s in [("Pong", p), ("Breakout", b)]]
            for p, b in [(-10.0, 5.0), (0.0, 10.0), (10.0, 15.0)]
        ]
    )
    assert frozen.loc["mean", "value"] == pytest.approx(hns.mean(axis=0).mean())
    assert frozen.loc["iqm", "lower"] <= frozen.loc["iqm", "value"] <= frozen.loc["iqm", "upper"]
    mine = df[df["method"] == "mine"]
    assert mine["games"].unique().tolist() == [2] and mine["lower"].isna().all()  # one run


def test_a_method_without_every_selected_game_is_never_aggregated_beside_the_others(runs):
    """A 1-game score is no 26-game aggregate: left out of the comparison,
    and the figure itself says "k of n games"."""
    from sgi_lab.viz.ablations import ablation_figures

    scores = run_scores.load_run_scores(run_scores.find_runs(runs))
    pong_only = scores[~((scores["method"] == "mine") & (scores["game"] == "Breakout"))]
    df, notes = run_scores.run_aggregates(pong_only, ["Pong", "Breakout"], reps=50)
    assert set(df["method"]) == {"frozen"}
    assert "mine: runs on 1 of 2 selected games (Pong): left out of the aggregates" in notes[0]

    model = ablations.AblationModel(pong_only, reps=50)
    view = model.select(model.games, paper=["SGI-M"], metrics=["iqm"])  # all 26 games
    assert view.methods == ["SGI-M (paper)"] and view.left_out == {"frozen": 2, "mine": 1}
    title = ablation_figures(view)["interval"].layout.title.text
    assert title.startswith("aggregate HNS over 26 games<br>")
    assert "frozen (2 of 26 games), mine (1 of 26 games)" in title
    assert set(view.per_game["method"]) >= {"frozen", "mine"}  # per game, it is still shown
    assert model.default_games() == ["Pong"]  # the games every method has: none left out
    pong = model.select(["Pong"], paper=["SGI-M"], metrics=["iqm"])
    assert pong.methods == ["frozen", "mine", "SGI-M (paper)"] and not pong.left_out


def test_paper_rows_printed_for_all_games_recomputed_for_a_subset():
    printed, _ = ablations.paper_aggregate_rows(["SGI-M"], None, ["iqm", "median"])
    row = printed.set_index("metric").loc["iqm"]
    assert row["method"] == "SGI-M (paper)" and row["value"] == pytest.approx(0.567)
    assert row["lower"] == pytest.approx(0.524) and row["source"] == "paper tab:IQMs"

    subset, _ = ablations.paper_aggregate_rows(["SGI-M"], ["Pong"], ["mean"])
    expected = human_normalized_score("Pong", paper_per_game("SGI-M")["Pong"])
    assert subset["value"].item() == pytest.approx(expected)
    assert np.isnan(subset["lower"].item())

    aggregate_only, notes = ablations.paper_aggregate_rows(["DrQ"], ["Pong"], ["mean"])
    assert aggregate_only.empty and "DrQ" in notes[0]


def test_model_select(runs):
    model = ablations.AblationModel(
        run_scores.load_run_scores(run_scores.find_runs(runs)), reps=100
    )
    assert model.default_games() == ["Breakout", "Pong"]
    assert model.default_paper()[:3] == ["SGI-M", "SGI-None", "Frozen"]
    view = model.select(metrics=["iqm"])
    assert view.methods[:2] == ["frozen", "mine"]
    assert "Frozen (paper)" in view.methods
    per_game = view.per_game.set_index(["method", "game"])["hns"]
    assert per_game[("Frozen (paper)", "Pong")] == pytest.approx(
        human_normalized_score("Pong", paper_per_game("Frozen")["Pong"])
    )


def test_explorer_callbacks_change_the_figures(runs):
    model = ablations.AblationModel(
        run_scores.load_run_scores(run_scores.find_runs(runs)), reps=100
    )
    explorer = ablation_explorer.AblationExplorer(model, paper=["SGI-M"], metrics=["iqm", "mean"])
    rows = list(explorer.interval.figure.data[0].y)
    assert rows == ["frozen", "mine", "SGI-M (paper)"]
    # (CI bar, point) x 2 metrics, then a legend entry per row
    assert [t.name for t in explorer.interval.figure.data][4:] == rows

    explorer.paper.value = ("SGI-M", "S+I")  # as a click would
    assert list(explorer.interval.figure.data[0].y)[-1] == "S+I (paper)"

    explorer.methods.value = ("frozen",)
    assert "mine" not in list(explorer.interval.figure.data[0].y)

    before = explorer.table.frame["IQM"].tolist()
    explorer.games.value = ("Pong",)
    assert explorer.table.frame["IQM"].tolist() != before
    assert set(explorer.per_game.figure.data[0].x) == {"Pong"}

    explorer.metrics.value = ("median",)
    assert [t.name for t in explorer.interval.figure.data][:2] == ["median CI", "median"]

    explorer.games.value = ()
    assert "select at least one game" in explorer.notes.value


def _header_cells(html: str) -> list[str]:
    import re

    return re.findall(r"<th>(.*?)</th>", html)


def test_explorer_table_follows_every_metric_change(runs):
    """The table has one column per chosen metric, named, a row per method (the paper's
    included), and new values whenever the metrics change, even when their number does not."""
    model = ablations.AblationModel(run_scores.load_run_scores(run_scores.find_runs(runs)), reps=50)
    explorer = ablation_explorer.AblationExplorer(model, paper=["SGI-M", "Frozen"])
    assert _header_cells(explorer.table.html) == ["Method", "IQM", "Median", "Mean"]
    methods = ["frozen", "mine", "SGI-M (paper)", "Frozen (paper)"]
    assert list(explorer.table.frame["Method"]) == methods
    for method in methods:
        assert f"<td>{method}</td>" in explorer.table.html
    first = explorer.table.frame.copy()

    explorer.metrics.value = ("iqm", "optimality_gap")  # fewer columns
    assert _header_cells(explorer.table.html) == ["Method", "IQM", "Optimality Gap"]
    assert list(explorer.table.frame["Method"]) == methods
    gap = explorer.table.frame["Optimality Gap"]
    assert list(gap) != list(explorer.table.frame["IQM"])
    assert list(explorer.table.frame["IQM"]) == list(first["IQM"])

    explorer.metrics.value = ("mean", "optimality_gap", "median")  # as many columns as before
    assert explorer.table.headers == ["Method", "Mean", "Optimality Gap", "Median"]
    assert list(explorer.table.frame["Mean"]) == list(first["Mean"])
    assert list(explorer.table.frame.iloc[:, 1]) != list(first.iloc[:, 1])  # IQM -> Mean
    frozen_paper = explorer.table.frame.set_index("Method").loc["Frozen (paper)"]
    assert frozen_paper["Optimality Gap"] != frozen_paper["Mean"], "identical value columns"


def test_a_long_protocol_note_is_wrapped_not_cut(runs):
    model = ablations.AblationModel(run_scores.load_run_scores(run_scores.find_runs(runs)), reps=20)
    view = model.select(metrics=["iqm"])
    assert len(view.protocol_note) > 80
    title = ablation_figures(view)["interval"].layout.title.text
    assert all(len(line) <= 90 for line in title.replace("</sup>", "").split("<br>")[1:])


def test_paper_objective_ablations_are_paper_configs():
    from sgi_lab.metrics import paper_configs

    assert set(ablations.PAPER_OBJECTIVE_ABLATIONS) <= set(paper_configs())


def test_explorer_is_right_on_first_display(runs):
    model = ablations.AblationModel(run_scores.load_run_scores(run_scores.find_runs(runs)), reps=50)
    explorer = ablation_explorer.AblationExplorer(model, paper=["SGI-M", "Frozen"], metrics=["iqm"])
    for view in (explorer.interval, explorer.per_game):
        # plotly.io.to_json writes NaN as NaN (invalid JSON) unless the figure holds none
        assert "NaN" not in view.figure.to_json() and "Infinity" not in view.figure.to_json()
        json.dumps(view.figure.to_plotly_json(), allow_nan=False, default=list)
    assert explorer.table.headers == ["Method", "IQM"]
    assert "<th>IQM</th>" in explorer.table.html
    assert list(explorer.table.frame["Method"]) == [
        "frozen",
        "mine",
        "SGI-M (paper)",
        "Frozen (paper)",
    ]
    assert all(explorer.table.frame["IQM"]), "an empty cell on first display"
    assert "Frozen (paper)" in list(explorer.interval.figure.layout.yaxis.tickvals)


def test_no_runs_says_where_it_looked(tmp_path):
    root = tmp_path / "nothing"
    model = ablations.AblationModel(
        run_scores.load_run_scores(run_scores.find_runs(root)), reps=50, source=root
    )
    view = model.select(metrics=["iqm"])
    assert view.notes[0].startswith(f"no finetuning runs under {root}")
    explorer = ablation_explorer.AblationExplorer(model, metrics=["iqm"])
    assert f"no finetuning runs under {root}" in explorer.notes.value
    assert "SGI-M (paper)" in view.methods  # the paper's rows still show


def test_scores_carry_their_protocol(tmp_path):
    run = tmp_path / "finetune__smoke__Pong__s0"
    run.mkdir()
    (run / "eval.json").write_text(
        json.dumps({"game": "Pong", "mean": -20.0, "episodes": 2, "max_frames": 2000})
    )
    scores = run_scores.load_run_scores([run])
    assert scores[["episodes", "max_frames"]].iloc[0].tolist() == [2, 2000]
    view = ablations.AblationModel(scores, reps=50).select(metrics=["iqm"])
    assert "not comparable" in view.protocol_note
    figures = ablation_figures(view)
    assert "not comparable" in figures["interval"].layout.title.text


# -- probe F1 beside the scores -------------------------------------------------------------------


def _probed(folder, game, overall, kind="pretrain", params=None, seed=None, file="probes.json"):
    """A folder with a probes.json entry (``sgi-lab probe``'s format): overall F1 ``overall``,
    agent localization ``overall - 0.1``, reward F1 0.5, random init 0.3, majority 0.2."""
    from sgi_lab.probes.results import write_probes

    folder.mkdir(parents=True, exist_ok=True)
    entry = {
        "encoder": {"kind": kind, "params": params, "seed": seed, "encoder": "nature"},
        "store": {"game": game, "fingerprint": f"fp-{game}", "path": f"/data/{game}"},
        "settings": {"split_seed": 0},
        "overall": overall,
        "across_categories": overall,
        "categories": {"agent_localization": round(overall - 0.1, 6)},
        "majority": {"overall": 0.2},
        "random_init": {"overall": 0.3},
        "reward": {"f1": 0.5},
        "split": {"rows": {"train": 7, "val": 1, "test": 2}},
    }
    write_probes(folder / file, entry)
    return folder


@pytest.fixture
def probed_runs(tmp_path):
    """frozen: finetuning runs on Pong and Breakout, seeds 0-2, each from its own pretraining
    run (seed = the run's) with overall probe F1 Pong 0.5/0.6/0.7, Breakout 0.7/0.8/0.9; mine:
    one run from a pretraining checkpoint probed at 0.9 (RUN/probes_ckpt_N.json); a probe study
    beside them: random encoders of seeds 0 and 1 on Pong at 0.3 and 0.4."""
    root = tmp_path / "runs"
    pre = tmp_path / "pretrain"
    for seed in range(3):
        for game, base in (("Pong", 0.5), ("Breakout", 0.7)):
            source = pre / f"pretrain__frozen_base__{game}__s{seed}"
            _probed(source, game, round(base + 0.1 * seed, 6), params=f"sgi_m_seed{seed}")
            (source / "config.yaml").write_text(f"seed: {seed}\n")
            run = _run(root, f"finetune__frozen__{game}__s{seed}", game, seed, 10.0 * seed)
            with (run / "config.yaml").open("a") as fh:
                fh.write(f"pretrained: {source}\n")
    source = pre / "mine_base"
    _probed(source, "Pong", 0.9, file="probes_ckpt_00000002.json")
    (source / "config.yaml").write_text("seed: 5\n")
    mine = _run(root, "finetune__smoke__Pong__s0", "Pong", 0, -21.0, method="mine")
    with (mine / "config.yaml").open("a") as fh:
        fh.write(f"pretrained: {source / 'checkpoints' / 'ckpt_00000002.pt'}\n")
    for seed, value in enumerate((0.3, 0.4)):
        _probed(tmp_path / "study" / f"random_s{seed}", "Pong", value, "random_init", seed=seed)
    return root, tmp_path / "study"


def test_probe_scores_follow_finetuning_runs_to_their_pretraining_runs(probed_runs):
    from sgi_lab.analysis.ablation_probes import load_probe_scores, probe_summary, probe_table

    root, study = probed_runs
    runs = run_scores.find_runs(root)
    probes = load_probe_scores(runs, [str(study / "random_s*")])
    assert sorted(set(probes["method"])) == ["frozen", "mine", "random_init"]
    frozen = probes[probes["method"] == "frozen"]
    assert len(frozen) == 6 and sorted(frozen["seed"]) == [0, 0, 1, 1, 2, 2]
    assert probes.set_index("method").loc["mine", "seed"] == 5  # its pretraining run's
    summary = probe_summary(probes, ["frozen", "random_init", "mine"])
    overall = summary[summary["metric"] == "overall"].set_index("method")
    assert list(overall.index) == ["frozen", "random_init", "mine"]
    # frozen: per-seed means over the two games 0.6, 0.7, 0.8 -> 0.7 +- t(2) 4.3027 * 0.1/sqrt3
    half = 4.302653 * 0.1 / np.sqrt(3)
    assert overall.loc["frozen", "value"] == pytest.approx(0.7)
    assert overall.loc["frozen", "upper"] == pytest.approx(0.7 + half, rel=1e-5)
    assert overall.loc["frozen", ["seeds", "games"]].tolist() == [3, 2]
    # random_init: 0.3, 0.4 -> 0.35 +- t(1) 12.706 * 0.0707/sqrt2 = 0.35 +- 0.635
    assert overall.loc["random_init", "lower"] == pytest.approx(0.35 - 0.635310, rel=1e-4)
    assert np.isnan(overall.loc["mine", "lower"])  # one seed: no interval
    pong = probe_summary(probes, ["frozen"], ["Pong"]).set_index("metric")
    assert pong.loc["overall", "value"] == pytest.approx(0.6)
    # a MinAtar game is a game too (the MinAtar study's explorer failed on its names)
    minatar = probes.assign(game=probes["game"].map({"Pong": "minatar/breakout"}).fillna("x"))
    breakout = probe_summary(minatar, ["frozen"], ["minatar/Breakout"]).set_index("metric")
    assert breakout.loc["overall", "value"] == pytest.approx(0.6)
    assert pong.loc["agent_localization", "value"] == pytest.approx(0.5)
    table = probe_table(pong.reset_index().assign(method="frozen"))
    assert table.columns[:3].tolist() == ["Method", "F1 overall", "agent loc."]
    assert table["F1 overall"].item() == f"0.600 ({0.6 - half:.3f}, {0.6 + half:.3f})"
    assert table["reward F1"].item() == "0.500 (0.500, 0.500)"


def test_explorer_shows_probe_f1_beside_the_scores(probed_runs):
    from sgi_lab.analysis.ablation_probes import load_probe_scores

    root, study = probed_runs
    runs = run_scores.find_runs(root)
    model = ablations.AblationModel(
        run_scores.load_run_scores(runs), reps=20, probes=load_probe_scores(runs, [f"{study}/*"])
    )
    assert model.methods == ["frozen", "mine", "random_init"]  # the probe-only objective too
    assert model.default_games() == ["Pong"]  # the game every method has
    explorer = ablation_explorer.AblationExplorer(
        model, games=["Breakout", "Pong"], paper=["SGI-M"], metrics=["iqm"]
    )
    table = explorer.probe_table.frame.set_index("Method")
    assert list(table.index) == ["frozen", "mine", "random_init"]
    assert table.loc["frozen", "F1 overall"].startswith("0.700 (0.452, 0.948)")
    assert table.loc["mine", "F1 overall"] == "0.900"
    assert table.loc["random_init", "F1 overall"].startswith("0.350 (")
    assert table.loc["frozen", "random init (overall)"].startswith("0.300")
    assert "<th>F1 overall</th>" in explorer.probe_table.html
    bars = {t.name: t for t in explorer.probe_bars.figure.data}
    assert set(bars) == {"frozen", "mine", "random_init"}
    assert bars["frozen"].y[0] == pytest.approx(0.7)
    # the same split's random-init and majority F1 drawn over the bars
    references = [s.name for s in explorer.probe_bars.figure.layout.shapes]
    assert any(r.startswith("random init 0.") for r in references), references
    assert any(r.startswith("majority class 0.") for r in references), references
    # the interval plot and the score table have no row for a method without scores
    assert "random_init" not in list(explorer.interval.figure.data[0].y)
    assert "random_init" not in list(explorer.table.frame["Method"])
    assert not any("random_init: no run" in n for n in explorer.view.notes)

    explorer.games.value = ("Pong",)  # as a click would: the probe table follows
    table = explorer.probe_table.frame.set_index("Method")
    assert table.loc["frozen", "F1 overall"].startswith("0.600 (0.352, 0.848)")
    explorer.methods.value = ("frozen",)
    assert list(explorer.probe_table.frame["Method"]) == ["frozen"]
    assert [t.name for t in explorer.probe_bars.figure.data] == ["frozen"]
    explorer.methods.value = ("random_init",)  # probe results only: no score rows, no error
    assert list(explorer.probe_table.frame["Method"]) == ["random_init"]
    assert list(explorer.interval.figure.data[0].y) == ["SGI-M (paper)"]


def test_explorer_without_probe_results_says_how_to_get_them(runs):
    model = ablations.AblationModel(run_scores.load_run_scores(run_scores.find_runs(runs)), reps=20)
    explorer = ablation_explorer.AblationExplorer(model, paper=["SGI-M"], metrics=["iqm"])
    assert explorer.probe_table.frame.empty
    assert "sgi-lab probe" in explorer.probe_table.html
    assert not any("probe" in n for n in explorer.view.notes)


def test_a_capped_evaluation_is_marked_and_never_ranked_among_uncapped_rows(tmp_path):
    """The finetune smoke evaluation (2 episodes cut at 500 steps: Pong -13) is marked in the
    interval plot, the table and the per-game chart, and drawn below the paper's rows and the
    uncapped runs, apart from them."""
    from sgi_lab.viz.ablations import ablation_figures

    root = tmp_path / "runs"
    for name, mean, cap in (("smoke", -13.0, 2000), ("full", -20.0, 108_000)):
        folder = _run(root, f"finetune__{name}__Pong__s0", "Pong", 0, mean, method=name)
        evaluation = {"game": "Pong", "mean": mean, "episodes": 2, "max_frames": cap}
        (folder / "eval.json").write_text(json.dumps(evaluation))
    scores = run_scores.load_run_scores(run_scores.find_runs(root))
    assert run_scores.capped_steps(run_scores.method_protocols(scores)["smoke"]) == 500
    assert run_scores.capped_steps(run_scores.method_protocols(scores)["full"]) is None
    model = ablations.AblationModel(scores, reps=20)
    view = model.select(["Pong"], ["smoke", "full"], ["SGI-M"], ["iqm"])
    marked = "smoke (capped at 500 steps)"
    assert view.methods == ["full", "SGI-M (paper)", marked]  # below, though it scores highest
    assert view.capped_from == marked
    assert marked in set(view.per_game["method"]) and "smoke" not in set(view.per_game["method"])
    figures = ablation_figures(view)
    assert list(figures["interval"].data[0].y)[-1] == marked
    assert any(s.name == "capped evaluations below" for s in figures["interval"].layout.shapes)
    assert marked in figures["table"].data[0].cells.values[0]
    # only capped rows: nothing to set apart from
    assert model.select(["Pong"], ["smoke"], [], ["iqm"]).capped_from is None


def test_no_game_selected_leaves_no_stale_figure(runs):
    model = ablations.AblationModel(run_scores.load_run_scores(run_scores.find_runs(runs)), reps=20)
    explorer = ablation_explorer.AblationExplorer(model, paper=["SGI-M"], metrics=["iqm"])
    assert explorer.interval.figure.data
    explorer.games.value = ()
    message = "select at least one game and one metric"
    for figure in (explorer.interval.figure, explorer.per_game.figure, explorer.probe_bars.figure):
        assert not figure.data and message in figure.layout.annotations[0].text
    assert "<table" not in explorer.table.html and "select at least one game" in explorer.table.html


# -- MinAtar runs: the MinAtar score, named as such, never aggregated with HNS -----------------


@pytest.fixture
def minatar_runs(tmp_path):
    """3 seeds of two methods on two MinAtar games: "sgi" always above "none"; one Pong run."""
    root = tmp_path / "runs"
    for seed in range(3):
        for game, low in (("minatar/breakout", 1.0), ("minatar/asterix", 2.0)):
            short = game.split("/")[1]
            _run(root, f"ft__none__{short}__s{seed}", game, seed, low + seed, method="none")
            _run(root, f"ft__sgi__{short}__s{seed}", game, seed, low + 5 + seed, method="sgi")
    _run(root, "ft__sgi__Pong__s0", "Pong", 0, 0.0, method="sgi")
    return root


def test_minatar_runs_carry_the_minatar_score_and_its_name(minatar_runs):
    from sgi_lab.metrics import minatar_random_score, minatar_reference_score

    scores = run_scores.load_run_scores(run_scores.find_runs(minatar_runs))
    row = scores[(scores["run"] == "ft__sgi__breakout__s1")].iloc[0]
    low, high = (f("minatar/breakout") for f in (minatar_random_score, minatar_reference_score))
    assert row["normalization"] == "MinAtar score"
    assert row["hns"] == pytest.approx((7.0 - low) / (high - low))
    pong = scores[scores["game"] == "Pong"].iloc[0]
    assert pong["normalization"] == "HNS" and pong["hns"] == pytest.approx(
        human_normalized_score("Pong", 0.0)
    )

    model = ablations.AblationModel(scores, reps=100)
    assert model.games[-5:] == ["minatar/asterix", "minatar/breakout", "minatar/freeway",
                                "minatar/seaquest", "minatar/space_invaders"]  # fmt: skip
    # the games every method has: MinAtar's two; Pong only when chosen
    assert model.default_games() == ["minatar/asterix", "minatar/breakout"]
    view = model.select(metrics=["iqm", "games_above_human"], baseline="none")
    assert view.normalization == "MinAtar score"
    assert set(view.aggregates["method"]) == {"sgi", "none"}  # no paper row beside MinAtar
    assert "no paper row: the paper reports Atari games only" in view.notes
    mean = view.aggregates.set_index(["method", "metric"]).loc[("none", "iqm"), "value"]
    matrix = np.array(
        [[(2.0 + s - minatar_random_score("minatar/asterix")) / (
            minatar_reference_score("minatar/asterix") - minatar_random_score("minatar/asterix")),
          (1.0 + s - low) / (high - low)] for s in range(3)]
    )  # fmt: skip
    from sgi_lab.metrics import iqm

    assert mean == pytest.approx(iqm(matrix))
    (poi,) = view.improvement.to_dict("records")
    assert (poi["method"], poi["baseline"]) == ("sgi", "none")
    assert (poi["value"], poi["lower"], poi["upper"]) == (1.0, 1.0, 1.0)  # disjoint runs
    # seed by seed on the selected games (Pong's run is not among them): above in all 6 pairs,
    # two-sided sign test 2 / 2^6
    assert [poi[k] for k in ("pairs", "above", "below", "level")] == [6, 6, 0, 0]
    assert poi["sign_p"] == pytest.approx(2 / 64)
    with pytest.raises(
        ValueError, match="baseline 'nne' is none of your methods: did you mean none"
    ):
        model.select(baseline="nne")
    with pytest.raises(ValueError, match="baseline 'nne' is none of your methods"):
        ablation_explorer.AblationExplorer(model, baseline="nne")


def test_minatar_figures_and_tables_say_minatar_score_never_hns(minatar_runs):
    from sgi_lab.viz.ablations import ablation_figures

    model = ablations.AblationModel(
        run_scores.load_run_scores(run_scores.find_runs(minatar_runs)), reps=50
    )
    view = model.select(metrics=["iqm", "games_above_human"])
    figures = ablation_figures(view)
    interval = figures["interval"]
    assert interval.layout.title.text.startswith("aggregate MinAtar score over 2 games")
    assert interval.layout.xaxis.title.text == "MinAtar score (0 random, 1 DQN)"
    assert [a.text for a in interval.layout.annotations][:2] == ["IQM", "#Games > DQN"]
    per_game = figures["per_game"]
    assert per_game.layout.title.text == "per-game MinAtar score (0 random, 1 DQN)"
    assert "DQN reference" in [a.text for a in per_game.layout.annotations]
    for fig in figures.values():  # what is read on screen: titles, labels, hover texts
        shown = [
            fig.layout.to_plotly_json(),
            [t.to_plotly_json().get("hovertemplate") for t in fig.data],
        ]
        shown.append([t.to_plotly_json().get("header") for t in fig.data])
        text = json.dumps(shown, default=str)
        assert "human" not in text.lower() and "HNS" not in text

    explorer = ablation_explorer.AblationExplorer(model, metrics=["iqm", "games_above_human"])
    assert explorer.table.title.startswith("aggregate MinAtar scores")
    assert list(explorer.table.frame.columns) == ["Method", "IQM", "#Games > DQN"]
    assert explorer.improvement.frame.empty and "pick a baseline" in explorer.improvement.html
    explorer.baseline.value = "none"  # as a pick would
    frame = explorer.improvement.frame
    assert frame.columns[1] == "P(> none)" and frame.iloc[0].tolist()[:2] == [
        "sgi",
        "1.000 (1.000, 1.000)",
    ]
    assert frame.iloc[0]["same seed: above / below / level (sign test p)"] == "6 / 0 / 0 (p = 0.03)"
    assert "on the MinAtar score" in explorer.improvement.title


def test_atari_and_minatar_games_are_never_aggregated_together(minatar_runs):
    model = ablations.AblationModel(
        run_scores.load_run_scores(run_scores.find_runs(minatar_runs)), reps=50
    )
    view = model.select(["Pong", "minatar/breakout"], methods=["sgi"], paper=["SGI-M"])
    assert view.aggregates.empty and view.per_game.empty
    assert any("mix Atari (HNS) and MinAtar (minatar/breakout" in n for n in view.notes)
    df, notes = run_scores.run_aggregates(model.scores, ["Pong", "minatar/breakout"])
    assert df.empty and "one aggregate never mixes the two" in notes[0]


def test_explorer_figures_never_wait_on_anywidget(runs, monkeypatch):
    """anywidget gives a FigureWidget 2 s to load plotly's 5 MB bundle; a loaded machine overran
    it and the interval plot stayed blank. The explorer's figures are display handles, with
    their traces from the first render on, whether or not anywidget is installed."""
    from sgi_lab.viz import live
    from sgi_lab.viz.training import STATIC_FIGURES_ENV

    monkeypatch.delenv(STATIC_FIGURES_ENV, raising=False)
    monkeypatch.setattr(live, "figure_widget_available", lambda: True)
    assert live.LiveFigure().widget is not None  # a FigureWidget where one is asked for
    model = ablations.AblationModel(run_scores.load_run_scores(run_scores.find_runs(runs)), reps=20)
    explorer = ablation_explorer.AblationExplorer(model, paper=["SGI-M"], metrics=["iqm"])
    for view in (explorer.interval, explorer.per_game, explorer.probe_bars):
        assert view.widget is None
    assert len(explorer.interval.figure.data) > 0
