"""Report tables: per-game scores, aggregates with CIs, the paper's column; the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from sgi_lab.analysis.paper_column import paper_config, run_label
from sgi_lab.analysis.report import (
    aggregates_csv_path,
    evaluation_protocol,
    format_aggregates,
    read_run,
    report,
    run_results,
)
from sgi_lab.launch.cli import main
from sgi_lab.metrics import paper_per_game

ROOT = Path(__file__).resolve().parents[2]


def fake_run(
    path, game, seed, scores, params="reduced_lr", pretrained="pre", pretrain_params="sgi_m"
):
    path.mkdir(parents=True)
    (path / "eval.json").write_text(
        json.dumps(
            {
                "game": game,
                "episodes": len(scores),
                "scores": scores,
                "mean": float(np.mean(scores)),
                "step": 100,
            }
        )
    )
    status = {"state": "finished", "params": params, "pretrain_params": pretrain_params}
    (path / "status.json").write_text(json.dumps(status))
    (path / "config.yaml").write_text(
        yaml.safe_dump({"game": game, "seed": seed, "pretrained": pretrained})
    )
    return path


def test_paper_config_of_runs():
    assert paper_config("reduced_lr", True, "sgi_m") == "SGI-M"
    assert paper_config("reduced_lr", True, None) == "SGI-M"
    assert paper_config("naive", True, "sgi_m") == "Naive"
    assert paper_config("reduced_lr", True, "s_g") == "S+G"
    assert paper_config("sgi_none", False, None) == "SGI-None"
    assert paper_config("reduced_lr", False, None) == "SGI-None"
    assert paper_config("no_ssl", False, None) == "SGI-None (No SPR)"
    assert paper_config("smoke", True, "smoke") is None
    assert paper_config(None, False, None) is None


def test_paper_config_with_fallback_always_names_a_column():
    assert paper_config("frozen", True, fallback=True) == "Frozen"
    assert paper_config("reduced_lr", True, "s_g", fallback=True) == "S+G"
    assert paper_config("smoke", False, fallback=True) == "SGI-None"
    assert paper_config("smoke", True, fallback=True) == "SGI-M"
    assert paper_config("smoke", True, "sgi_m_s", fallback=True) == "SGI-M/S"


def test_run_label_and_read_run(tmp_path):
    assert run_label("reduced_lr", "sgi_m") == "reduced_lr@sgi_m"
    assert run_label("sgi_none", "sgi_m", pretrained=False) == "sgi_none"
    assert run_label(None) == "unnamed"
    run = read_run(fake_run(tmp_path / "a", "pong", 3, [1.0, 2.0]))
    assert (run.label, run.game, run.seed, run.paper_config) == (
        "reduced_lr@sgi_m",
        "Pong",
        3,
        "SGI-M",
    )
    # A notebook run: the label it recorded wins; a bare folder is named by its config part.
    (run.path / "results.json").write_text(json.dumps({"method": "mine"}))
    assert read_run(run.path).label == "mine"
    bare = tmp_path / "finetune__frozen__Pong__s0"
    bare.mkdir()
    (bare / "status.json").write_text("{torn")
    assert (read_run(bare).label, read_run(bare).evaluation, read_run(bare).game) == (
        "frozen",
        {},
        None,
    )


def test_report_per_game_and_aggregates(tmp_path):
    runs = [
        fake_run(tmp_path / "pong1", "Pong", 1, [-20.0, -18.0]),
        fake_run(tmp_path / "pong2", "pong", 2, [-10.0]),
        fake_run(tmp_path / "breakout1", "Breakout", 1, [30.5]),
        fake_run(tmp_path / "breakout2", "Breakout", 2, [1.7]),
    ]
    per_game, aggregates = report(runs, csv=tmp_path / "out" / "report.csv", reps=200)
    assert set(per_game.game) == {"Pong", "Breakout"} and set(per_game.runs) == {2}
    pong = per_game.set_index("game").loc["Pong"]
    assert pong.score == pytest.approx((-19.0 - 10.0) / 2)
    assert pong.paper_config == "SGI-M"
    assert pong.paper_score == pytest.approx(paper_per_game("SGI-M")["Pong"])
    breakout = per_game.set_index("game").loc["Breakout"]
    assert breakout.hns == pytest.approx(0.5)  # (16.1 - 1.7) / (30.5 - 1.7)
    agg = aggregates.set_index("metric")
    assert agg.loc["mean", "value"] == pytest.approx((pong.hns + breakout.hns) / 2)
    assert agg.loc["mean", "lower"] <= agg.loc["mean", "value"] <= agg.loc["mean", "upper"]
    assert agg.loc["median", "paper_reported"] == pytest.approx(0.679)  # SGI-M's 26-game median
    assert np.isfinite(agg.loc["iqm", "paper_same_games"])
    assert (tmp_path / "out" / "report.csv").exists()
    saved = pd.read_csv(aggregates_csv_path(tmp_path / "out" / "report.csv"))
    assert set(saved.metric) == set(aggregates.metric)


def test_report_rejects_unevaluated_runs(tmp_path):
    (tmp_path / "unfinished").mkdir()
    with pytest.raises(FileNotFoundError, match="unfinished"):
        run_results([tmp_path / "unfinished"])


@pytest.mark.smoke
def test_report_cli_prints_aggregates_and_writes_csv(tmp_path, capsys):
    a = fake_run(tmp_path / "a", "Pong", 1, [-15.0], params="smoke", pretrain_params="smoke")
    b = fake_run(tmp_path / "b", "Breakout", 1, [12.0], params="smoke", pretrain_params="smoke")
    csv = tmp_path / "table.csv"
    assert main(["report", str(a), str(b), "--csv", str(csv), "--reps", "100"]) == 0
    out = capsys.readouterr().out
    assert "Median" in out and "IQM" in out and "Breakout" in out and "Pong" in out
    assert len(pd.read_csv(csv)) == 2 and aggregates_csv_path(csv).exists()


def test_report_carries_the_evaluation_protocol(tmp_path):
    smoke = fake_run(tmp_path / "finetune__reduced_lr__Pong__s0", "Pong", 0, [-21.0, -20.0])
    per_game, aggregates = report([smoke], reps=10)
    # eval.json without max_frames: a frame cap that is not recorded cannot be the paper's
    assert per_game["protocol"].tolist() == ["2 episodes, no frame cap"]
    assert not per_game["comparable"].any() and not aggregates["comparable"].any()
    table = format_aggregates(aggregates)
    assert table["evaluation"].str.endswith("not comparable with the paper").all()

    full = tmp_path / "finetune__reduced_lr__Pong__s1"
    fake_run(full, "Pong", 1, [-21.0] * 100)
    evaluation = json.loads((full / "eval.json").read_text())
    (full / "eval.json").write_text(json.dumps({**evaluation, "max_frames": 108_000}))
    per_game, aggregates = report([full], reps=10)
    assert per_game["comparable"].all() and aggregates["comparable"].all()
    assert not format_aggregates(aggregates)["evaluation"].str.contains("not comparable").any()
    assert evaluation_protocol([read_run(full)]).comparable


def test_a_capped_evaluation_is_marked_and_listed_after_whole_games(tmp_path):
    """The smoke evaluation (cut at 500 steps: Pong -13) is marked in the report and listed
    after a method evaluated on whole games, never above it."""
    smoke = fake_run(tmp_path / "a" / "finetune__smoke__Pong__s0", "Pong", 0, [-13.0], "smoke")
    demo = fake_run(tmp_path / "b" / "finetune__demo__Pong__s0", "Pong", 0, [-20.0], "demo")
    for run, cap in ((smoke, 2000), (demo, None)):
        evaluation = json.loads((run / "eval.json").read_text())
        (run / "eval.json").write_text(json.dumps({**evaluation, "max_frames": cap}))
    per_game, aggregates = report([smoke, demo], reps=10)
    capped = per_game.set_index("method")["capped"].to_dict()
    assert capped == {"smoke@sgi_m": True, "demo@sgi_m": False}
    table = format_aggregates(aggregates)
    methods = list(dict.fromkeys(table["method"]))
    assert methods == [
        "demo@sgi_m",
        "smoke@sgi_m (capped: 1 episode, cap 2,000 frames (500 steps))",
    ]


def test_report_names_the_code_that_made_the_runs(tmp_path, capsys):
    def made_by(path, *entries):
        status = json.loads((path / "status.json").read_text())
        status["provenance"] = [{"commit": c, "dirty": d} for c, d in entries]
        (path / "status.json").write_text(json.dumps(status))
        return path

    a = made_by(fake_run(tmp_path / "a", "Pong", 1, [-15.0]), ("a" * 40, False))
    b = made_by(fake_run(tmp_path / "b", "Pong", 2, [-13.0]), ("a" * 40, False), ("b" * 40, True))
    c = fake_run(tmp_path / "c", "Breakout", 1, [12.0])  # older than provenance
    assert run_results([a, b, c])["code"].tolist() == [
        "aaaaaaaaaa",
        "aaaaaaaaaa > bbbbbbbbbb+dirty",
        "unknown",
    ]
    per_game, aggregates = report([a, b, c], reps=50)
    assert per_game.set_index("game")["code"]["Pong"] == "aaaaaaaaaa, aaaaaaaaaa > bbbbbbbbbb+dirty"
    assert set(aggregates["code"]) == {"aaaaaaaaaa, aaaaaaaaaa > bbbbbbbbbb+dirty, unknown"}

    assert main(["report", str(a), str(c), "--reps", "50"]) == 0
    assert "other code than one clean commit: ['aaaaaaaaaa', 'unknown']" in capsys.readouterr().out
    made_by(c, ("a" * 40, False))
    assert main(["report", str(a), str(c), "--reps", "50"]) == 0
    assert "NOTE" not in capsys.readouterr().out


# -- one paper column per run (`paper_column`) -----------------------------------------------


def _store(path, source, params=None):
    import dataclasses

    from sgi_lab.data.store_format import MANIFEST, StoreManifest

    path.mkdir(parents=True)
    manifest = StoreManifest(game="Pong", source=source, params=params or {})
    (path / MANIFEST).write_text(json.dumps(dataclasses.asdict(manifest)))
    return path


def _pretraining_run(root, name, store, **config):
    folder = root / name
    folder.mkdir(parents=True)
    weights = {"spr_weight": 2.0, "goal_weight": 1.0, "inverse_weight": 1.0}
    (folder / "config.yaml").write_text(yaml.safe_dump({**weights, **config}))
    (folder / "status.json").write_text(json.dumps({"state": "finished", "data": str(store)}))
    return folder


def test_paper_column_from_the_run_its_pretraining_and_data(tmp_path):
    from sgi_lab.analysis.paper_column import paper_column

    random = _store(tmp_path / "random", "random")
    weak = _store(tmp_path / "weak", "dqn_replay", {"checkpoints": [0]})
    mixed = _store(tmp_path / "mixed", "dqn_replay", {"checkpoints": [1, 10, 25]})
    nature = _pretraining_run(tmp_path, "demo", random, encoder="nature")
    resnet_weak = _pretraining_run(tmp_path, "w", weak, encoder="resnet")
    resnet_mixed = _pretraining_run(tmp_path, "m", mixed, encoder="resnet")
    s_g = _pretraining_run(tmp_path, "sg", mixed, encoder="resnet", inverse_weight=0.0)
    ft = {"scheme": "reduced_lr", "ssl": "spr", "encoder": "nature"}

    # the demo: unnamed sets, Nature CNN pretrained with S+G+I on Random data
    demo = paper_column({**ft, "pretrained": str(nature)}, "demo", None)
    assert demo.config == "SGI-M/S"
    assert "Nature CNN" in demo.reason and "Random" in demo.reason and "Mixed" in demo.reason
    assert paper_column({**ft, "pretrained": str(resnet_weak)}, "x").config == "SGI-W"
    assert paper_column({**ft, "pretrained": str(s_g)}, "x").config == "S+G"
    frozen = {**ft, "scheme": "frozen"}
    assert paper_column({**frozen, "pretrained": str(resnet_mixed)}, "x").config == "Frozen"
    refused = paper_column({**frozen, "pretrained": str(resnet_weak)}, "x")
    assert (
        refused.config is None and "only from SGI-M" in refused.reason and "SGI-W" in refused.reason
    )
    scratch = paper_column({**ft, "pretrained": None}, "smoke")
    assert scratch.config == "SGI-None" and "ResNet" in scratch.reason
    no_ssl = paper_column({**ft, "ssl": "none", "pretrained": None}, "smoke")
    assert no_ssl.config == "SGI-None (No SPR)"
    odd = paper_column({**ft, "scheme": "naive", "ssl": "none"}, "smoke")
    assert odd.config is None and "'naive'" in odd.reason

    # the paper's names decide the part they name: the pretraining set, the finetuning scheme
    named = paper_column({**ft, "pretrained": str(nature)}, "reduced_lr", "sgi_r")
    assert named.config == "SGI-R" and "sgi_r" in named.reason
    assert paper_column({**ft, "pretrained": str(nature)}, "smoke", "sgi_m").config == "SGI-M"
    assert paper_column({**frozen, "pretrained": str(nature)}, "smoke", "s_g").config is None
    gone = paper_column({**ft, "pretrained": str(tmp_path / "moved")}, "smoke", "smoke")
    assert gone.config is None and "not readable" in gone.reason
    assert paper_column({}, "frozen").config == "Frozen"
    assert paper_column({}, "sgi_m").config == "SGI-M"  # start not recorded: the paper's SGI-M
    assert paper_column({"pretrained": None}, "sgi_none").config == "SGI-None"
    assert paper_column(ft, "x", chosen="SGI-E").config == "SGI-E"
    with pytest.raises(ValueError, match="SGI-Q.*SGI-M/S"):
        paper_column(ft, "x", chosen="SGI-Q")


def test_notebook_explorer_and_report_agree_on_the_paper_column(tmp_path, capsys):
    """The same run gets the same column in the ablation explorer and `sgi-lab report`."""
    from sgi_lab.analysis import ablations, run_scores
    from sgi_lab.launch import cli

    random = _store(tmp_path / "random", "random")
    nature = _pretraining_run(tmp_path, "pretrain", random, encoder="nature")
    run = tmp_path / "runs" / "finetune__demo__Pong__s0"
    run.mkdir(parents=True)
    config = {"game": "Pong", "seed": 0, "encoder": "nature", "scheme": "reduced_lr"}
    (run / "config.yaml").write_text(yaml.safe_dump({**config, "pretrained": str(nature)}))
    (run / "status.json").write_text(json.dumps({"state": "finished", "params": "demo"}))
    (run / "eval.json").write_text(
        json.dumps({"game": "Pong", "mean": -21.0, "scores": [-21.0], "episodes": 1})
    )
    model = ablations.AblationModel(run_scores.load_run_scores([run]), reps=10)
    assert model.default_paper() == ["SGI-M", "SGI-None", "SGI-M/S"]
    assert any("demo@" not in n and "paper column SGI-M/S" in n for n in model.select().notes)
    assert cli.main(["report", str(run), "--reps", "10"]) == 0
    out = capsys.readouterr().out
    assert "paper column of demo: SGI-M/S (SGI pretraining (S+G+I) of a Nature CNN" in out
    assert " None " not in out.split("Aggregates")[0]


def test_minatar_runs_are_reported_with_the_minatar_score_and_say_so(tmp_path, capsys):
    """A MinAtar run's normalised score is (score - random) / (reference - random) (the MinAtar
    score, `metrics.minatar`), named in a normalization column and the CLI's headings; Atari
    and MinAtar games are never aggregated together."""
    from sgi_lab.metrics import minatar_random_score, minatar_reference_score

    runs = [
        fake_run(tmp_path / f"b{s}", "minatar/breakout", s, [5.0 + s], params="reduced_lr")
        for s in (0, 1)
    ]
    per_game, aggregates = report(runs, reps=50)
    (row,) = per_game.to_dict("records")
    game = "minatar/breakout"
    random, reference = minatar_random_score(game), minatar_reference_score(game)
    assert row["normalization"] == "MinAtar score"
    assert row["hns"] == pytest.approx((5.5 - random) / (reference - random))
    assert main(["report", *map(str, runs), "--reps", "50"]) == 0
    out = capsys.readouterr().out
    assert "MinAtar score in the hns column" in out and "Aggregates (MinAtar score;" in out
    assert "#Games > DQN" in out and "#Games > Human" not in out  # a MinAtar 1 is DQN's
    shown = format_aggregates(aggregates)
    assert set(shown["metric"]) >= {"#Games > DQN", "IQM"}
    assert all("the paper has no MinAtar results" in e for e in shown["evaluation"])
    assert set(shown["paper_config"].isna()) == {True}  # no paper column, whatever the names
    assert "the paper reports Atari only" in out and per_game["paper_score"].isna().all()
    # what the score's 0 and 1 are, where the report prints it
    assert "MinAtar score: 0 = a uniform random policy, 1 = the MinAtar paper's DQN" in out
    pong = fake_run(tmp_path / "p", "Pong", 0, [-15.0], params="reduced_lr")
    with pytest.raises(ValueError, match="mix normalisations"):
        report([*runs, pong], reps=50)


def test_probability_of_improvement_over_a_baseline(tmp_path, capsys):
    """Each method against ``--baseline``: SGI's runs all above the baseline's on both games
    -> 1 (CI [1, 1]); a copy of the baseline -> 0.5; a MinAtar method shares no game."""
    from sgi_lab.analysis.improvement import improvement_over

    runs = []
    for game, low in (("Pong", -21.0), ("Breakout", 1.0)):
        for seed in (0, 1):
            base = [low + seed]
            runs.append(fake_run(tmp_path / f"none_{game}{seed}", game, seed, base,
                                 params="sgi_none", pretrained=None))  # fmt: skip
            runs.append(fake_run(tmp_path / f"sgi_{game}{seed}", game, seed, [low + 10 + seed]))
            runs.append(fake_run(tmp_path / f"copy_{game}{seed}", game, seed, base,
                                 params="copy", pretrained=None))  # fmt: skip
    runs.append(fake_run(tmp_path / "mb", "minatar/breakout", 0, [3.0], params="tiny"))
    table = improvement_over(runs, "sgi_none", reps=100).set_index("method")
    sgi = table.loc["reduced_lr@sgi_m"]
    assert (sgi.value, sgi.lower, sgi.upper) == (1.0, 1.0, 1.0)
    assert (sgi.games, sgi.runs, sgi.baseline_runs, sgi.normalization) == (2, 2, 2, "HNS")
    # per game: 2 x 2 pairs, one tie each seed, one win, one loss -> (1 + 0.5 * 2) / 4
    assert table.loc["copy", "value"] == pytest.approx(0.5)
    tiny = table.loc["tiny@sgi_m"]
    assert np.isnan(tiny.value) and tiny.note == "no game in common with sgi_none"
    # Seed by seed (game and seed alike): SGI above in all 4 pairs, sign test p = 2 / 2^4;
    # the copy level with every seed: nothing to test (where P(improvement) reads 0.5)
    assert (sgi.pairs, sgi.above, sgi.below, sgi.level) == (4, 4, 0, 0)
    assert sgi.sign_p == pytest.approx(0.125)
    copy = table.loc["copy"]
    assert (copy.pairs, copy.level) == (4, 4) and np.isnan(copy.sign_p)
    assert np.isnan(tiny.pairs)
    with pytest.raises(ValueError, match="'sgi_nope' is none of the runs' methods: did you "):
        improvement_over(runs, "sgi_nope", reps=10)
    # a word for "from scratch" names the methods whose runs start from no pretrained model
    with pytest.raises(ValueError, match=r"did you mean sgi_none or copy \(from scratch\)\? "):
        improvement_over(runs, "scrtch", reps=10)

    assert main(["report", *map(str, runs[:12]), "--reps", "50", "--baseline", "sgi_none"]) == 0
    out = capsys.readouterr().out
    assert "Probability of improvement over sgi_none" in out
    assert "1.000 (1.000, 1.000)" in out and "0.500 (" in out
    assert "4 / 0 / 0 (p = 0.12)" in out and "0 / 0 / 4" in out
    assert main(["report", *map(str, runs[:3]), "--reps", "10", "--baseline", "nope"]) == 2
    assert "error: --baseline 'nope' is none of the runs' methods" in capsys.readouterr().err


def test_minatar_runs_beside_no_paper_column_in_the_finetune_comparison(tmp_path):
    """The finetune notebook's comparison of MinAtar runs: their MinAtar score, NaN for the
    paper, a note saying why, and a figure that says "MinAtar score", never HNS."""
    from sgi_lab.analysis.paper_column import PaperColumn
    from sgi_lab.analysis.report import compare_runs_to_paper
    from sgi_lab.metrics import minatar_normalized_score, score_references
    from sgi_lab.viz import per_game_bar

    runs = [
        read_run(fake_run(tmp_path / f"b{s}", "minatar/breakout", s, [4.0 + 2 * s])) for s in (0, 1)
    ]
    df = compare_runs_to_paper(runs, PaperColumn("SGI-M", "what the params say"))
    (row,) = df.to_dict("records")
    assert row["ours"] == 5.0 and np.isnan(row["paper"]) and np.isnan(row["paper_hns"])
    assert row["ours_hns"] == pytest.approx(minatar_normalized_score("minatar/breakout", 5.0))
    assert df.attrs["normalization"] == "MinAtar score" and not df.attrs["comparable"]
    assert df.attrs["note"].startswith("no paper column: the paper reports Atari games only")
    fig = per_game_bar(df)
    assert [t.name for t in fig.data] == ["ours"]
    assert fig.layout.yaxis.title.text == "MinAtar score (0 random, 1 DQN)"
    assert [a.text for a in fig.layout.annotations] == ["random", "DQN reference"]
    assert "HNS" not in fig.layout.title.text
    assert score_references("minatar/breakout") == {"random": 0.416, "DQN reference": 10.0}
    assert score_references("Pong") == {"random": -20.7, "human": 14.6}
    pong = read_run(fake_run(tmp_path / "p", "Pong", 0, [0.0]))
    assert compare_runs_to_paper([pong], PaperColumn("SGI-M", "x")).attrs["normalization"] == "HNS"
    with pytest.raises(ValueError, match="mix normalisations"):
        compare_runs_to_paper([*runs, pong], PaperColumn("SGI-M", "x"))


def test_a_minatar_run_has_no_paper_column_whatever_its_names_say():
    """A MinAtar run named like the paper's large-encoder config (sgi_m_l) is not SGI-M/L:
    the paper has no MinAtar results; a column chosen by hand is still honoured."""
    from sgi_lab.analysis.paper_column import MINATAR_REASON, paper_column

    config = {"game": "minatar/breakout", "encoder": "minatar_l", "pretrained": "x", "scheme": "reduced_lr"}  # fmt: skip
    column = paper_column(config, "reduced_lr", "sgi_m_l")
    assert column.config is None and column.reason == MINATAR_REASON
    atari = paper_column({**config, "game": "Pong", "encoder": "resnet_l"}, "reduced_lr", "sgi_m_l")
    assert atari.config == "SGI-M/L"
    assert paper_column(config, chosen="SGI-M").config == "SGI-M"


def test_one_improvement_table_for_run_folders_and_for_a_frame_of_runs(tmp_path):
    """`sgi-lab report --baseline` (run folders, every game both have) and the ablation
    explorer (a `load_run_scores` frame, a selection of games) ask the same function: on the
    same runs and games they give the same numbers; a selection a method lacks is a note."""
    from sgi_lab.analysis import run_scores
    from sgi_lab.analysis.improvement import improvement_over

    assert run_scores.improvement_over is improvement_over  # the explorer's import: the same
    runs = []
    for game, low in (("Pong", -21.0), ("Breakout", 1.0)):
        for seed in (0, 1, 2):
            runs.append(fake_run(tmp_path / f"none_{game}{seed}", game, seed, [low + seed],
                                 params="sgi_none", pretrained=None))  # fmt: skip
            # SGI: above the baseline's same seed, below its next one on Pong
            runs.append(fake_run(tmp_path / f"sgi_{game}{seed}", game, seed, [low + seed + 0.5]))
    runs.append(
        fake_run(tmp_path / "copy_pong", "Pong", 0, [-21.0], params="copy", pretrained=None)
    )
    folders = improvement_over(runs, "sgi_none", reps=200).set_index("method")
    frame = run_scores.load_run_scores(runs)
    chosen = improvement_over(
        frame, "sgi_none", ["Breakout", "Pong"], ["reduced_lr@sgi_m", "copy"], 200
    )
    chosen = chosen.set_index("method")
    sgi = folders.loc["reduced_lr@sgi_m"]
    # per game 3 x 3 pairs: SGI's seed s beats the baseline's seeds <= s -> 6 of 9
    assert sgi.value == pytest.approx(6 / 9)
    numbers = ["value", "lower", "upper", "games", "runs", "baseline_runs", "pairs", "above"]
    assert chosen.loc["reduced_lr@sgi_m", numbers].tolist() == sgi[numbers].tolist()
    assert (sgi.pairs, sgi.above, sgi.below) == (6, 6, 0)
    # the copy has Pong only: no number over the selection, a comparison on Pong alone
    assert chosen.loc["copy", "note"] == "runs on 1 of 2 selected games"
    assert np.isnan(chosen.loc["copy", "value"]) and folders.loc["copy", "games"] == 1
    assert folders.loc["copy", "value"] == pytest.approx(1 / 6)  # 0 wins, 1 tie of 3 pairs
    missing = improvement_over(frame, "reduced_lr@sgi_m", ["Pong"], ["copy"])
    assert missing.loc[0, "note"] == ""  # both have Pong
    base_short = improvement_over(frame, "copy", ["Breakout", "Pong"], ["sgi_none"])
    assert base_short.loc[0, "note"] == "copy has runs on 1 of 2 selected games"


def test_the_improvement_table_of_the_archived_objective_study_is_unchanged():
    """The MinAtar objective study's archive: the numbers both former functions gave on it
    (run folders and a frame of its runs, 300 resamples) are the one function's, to the bit."""
    from sgi_lab.analysis import run_scores
    from sgi_lab.analysis.improvement import improvement_over

    root = ROOT / "results/minatar_objectives/finetune"
    dirs = sorted(p for p in root.glob("*/*") if (p / "eval.json").exists())
    expected = {  # (value, lower, upper, pairs, above, below)
        "reduced_lr@sgi": (0.29999999999999999, 0.21638888888888896, 0.42222222222222222, 15, 3, 11),
        "naive@sgi": (0.6444444444444446, 0.46666666666666667, 0.8222222222222223, 15, 9, 6),
        "reduced_lr@g": (0.4333333333333334, 0.24972222222222229, 0.62222222222222223, 15, 6, 8),
    }  # fmt: skip
    folders = improvement_over(dirs, "sgi_none", reps=300, allow_unfinished=True)
    games = sorted({p.name.split("__")[0].replace("minatar-", "minatar/") for p in dirs})
    frame = run_scores.load_run_scores(dirs)
    chosen = improvement_over(frame, "sgi_none", games, list(expected), reps=300)
    columns = ["value", "lower", "upper", "pairs", "above", "below"]
    for table in (folders.set_index("method"), chosen.set_index("method")):
        for method, numbers in expected.items():
            assert tuple(table.loc[method, columns]) == numbers, method
