"""The probes' readouts and features: the logistic readout, the ridge regressions of
coordinates (R^2, accuracy within +-2 units) against their closed forms, the three feature
choices, and readout and features recorded in probes.json, the CLI's summary, the listings and
pretraining's probe metrics."""

from __future__ import annotations

import functools
import json

import numpy as np
import pandas as pd
import pytest
import torch
from test_probes import synthetic_store

from sgi_lab.analysis.probe_encoders import random_probe_encoder
from sgi_lab.analysis.probe_study import (
    objective_summary,
    probe_frame,
    training_probe_curves,
)
from sgi_lab.launch.cli import main
from sgi_lab.nets.encoders import renormalize
from sgi_lab.probes import probe_encoder
from sgi_lab.probes.encoder_probe import encoder_features, random_init_model
from sgi_lab.probes.linear import (
    ProbeSettings,
    fit_logistic_probes,
    fit_probes,
    fit_ridge_regressions,
    r_squared,
    train_design,
    within_accuracy,
)
from sgi_lab.probes.results import probe_done, write_probes
from sgi_lab.studies.probe_report import results_markdown
from sgi_lab.train.pretrain import probe_metrics


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _clusters(seed: int = 1, rows: int = 400):
    rng = np.random.default_rng(seed)
    classes = rng.integers(0, 4, rows)
    centers = rng.normal(size=(4, 20)) * 3
    x = centers[classes] + rng.normal(size=(rows, 20))
    y = np.stack([classes * 10, rng.integers(0, 4, rows)], 1)  # readable, and pure noise
    return x, y


def test_r_squared_and_within_accuracy_match_hand_computed_values():
    truth, pred = np.array([0.0, 2.0, 4.0, 6.0]), np.array([1.0, 2.0, 1.0, 6.0])
    # SSE = 1 + 0 + 9 + 0 = 10, SST = 9 + 1 + 1 + 9 = 20
    assert r_squared(truth, pred) == pytest.approx(0.5)
    assert within_accuracy(truth, pred, 2.0) == pytest.approx(0.75)  # |4 - 1| = 3 misses
    assert within_accuracy(truth, pred, 3.0) == pytest.approx(1.0)
    assert r_squared(np.ones(3), np.ones(3)) == 1.0 and np.isnan(r_squared([], []))


def test_logistic_probes_read_what_is_there_and_stop_per_variable():
    x, y = _clusters()
    settings = ProbeSettings(readout="logistic", logistic_patience=3, logistic_max_epochs=40)
    probes = fit_probes(x[:300], y[:300], x[300:], y[300:], settings)
    pred = probes.predict(x[300:])
    assert (pred[:, 0] == y[300:, 0]).mean() > 0.95
    assert set(np.unique(pred[:, 0])) <= {0, 10, 20, 30}  # predictions are observed values
    assert (pred[:, 1] == y[300:, 1]).mean() < 0.45  # noise stays noise
    assert all(1 <= s <= 40 for s in probes.steps)
    # The variables train side by side but independently: alone, variable 0 gets its weights.
    alone = fit_logistic_probes(x[:300], y[:300, :1], x[300:], y[300:, :1], settings)
    assert alone.steps[0] == probes.steps[0]
    torch.testing.assert_close(alone.weight, probes.weight[:, probes.slices[0]])


def test_logistic_probes_beat_least_squares_on_a_masked_middle_class():
    """Masking: a 1-D ordered variable with three classes along one feature. Least squares onto
    one-hot targets gives the middle class a flat score, never the largest; softmax reads it."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 900)
    x = (labels[:, None] + rng.normal(scale=0.15, size=(900, 1))).astype(np.float32)
    y = labels[:, None]
    lstsq = fit_probes(x[:600], y[:600], x[600:750], y[600:750], ProbeSettings())
    logistic = fit_probes(
        x[:600],
        y[:600],
        x[600:750],
        y[600:750],
        ProbeSettings(readout="logistic", logistic_lr=0.05),
    )
    middle = y[750:, 0] == 1
    assert (lstsq.predict(x[750:])[middle, 0] == 1).mean() < 0.2
    assert (logistic.predict(x[750:])[middle, 0] == 1).mean() > 0.9


def test_ridge_regressions_equal_the_closed_form_and_pick_the_penalty_on_validation():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(200, 8))
    coef = rng.normal(size=8)
    y = np.stack([x @ coef + 5 + rng.normal(scale=0.1, size=200), rng.normal(size=200)], 1)
    settings = ProbeSettings(ridge_alphas=(0.5,))
    ridge = fit_ridge_regressions(x[:150], y[:150], x[150:], y[150:], settings)
    # by hand: standardize, centre the target, solve (X^T X / N + alpha I) w = X^T y_c / N
    mean, std = x[:150].mean(0), x[:150].std(0, ddof=1)
    xs = (x[:150] - mean) / std
    w = np.linalg.solve(xs.T @ xs / 150 + 0.5 * np.eye(8), xs.T @ (y[:150] - y[:150].mean(0)) / 150)
    expected = (x[150:] - mean) / std @ w + y[:150].mean(0)
    np.testing.assert_allclose(ridge.predict(x[150:]), expected, rtol=1e-3, atol=1e-3)
    # With a grid, the readable column takes a small penalty and is nearly exact.
    ridge = fit_ridge_regressions(x[:150], y[:150], x[150:], y[150:], ProbeSettings())
    pred = ridge.predict(x[150:])
    assert ridge.alphas[0] <= 1e-2 and r_squared(y[150:, 0], pred[:, 0]) > 0.99
    assert within_accuracy(y[150:, 0], pred[:, 0]) == 1.0
    assert r_squared(y[150:, 1], pred[:, 1]) < 0.2
    # One shared design gives the same answer as computing it inside.
    shared = fit_ridge_regressions(
        x[:150], y[:150], x[150:], y[150:], ProbeSettings(), train_design(x[:150])
    )
    np.testing.assert_allclose(shared.predict(x[150:]), pred, rtol=1e-5, atol=1e-5)


def test_features_are_the_conv_map_its_renormalisation_and_the_projection():
    model = random_init_model(6, "nature", seed=0)
    obs = torch.randint(0, 255, (3, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        conv = encoder_features(model, obs, "conv")
        renormalized = encoder_features(model, obs, "renormalized")
        projection = encoder_features(model, obs, "projection")
        assert conv.shape == renormalized.shape == (3, 3136)
        torch.testing.assert_close(renormalized, renormalize(conv.reshape(3, 64, 7, 7)).flatten(1))
        assert not torch.allclose(conv, renormalized)  # the renormalisation changes the map
        assert projection.shape == (3, model.projection_size)
        torch.testing.assert_close(projection, model.project(model.encode(obs)))
    with pytest.raises(ValueError, match="features 'pixels': one of renormalized"):
        encoder_features(model, obs, "pixels")


def test_bad_readout_or_features_are_refused_naming_them(capsys, tmp_path):
    with pytest.raises(ValueError, match="readout 'svm': one of lstsq, logistic"):
        ProbeSettings(readout="svm")
    with pytest.raises(ValueError, match="features 'y': one of renormalized, conv, projection"):
        ProbeSettings(features="y")
    with pytest.raises(SystemExit):
        main(["probe", "--data", str(tmp_path), "--readout", "svm"])
    assert "invalid choice: 'svm'" in capsys.readouterr().err


@pytest.mark.parametrize("features", ["projection", "conv"])
def test_probe_encoder_records_its_readout_and_features_and_regresses_coordinates(
    tmp_path, features
):
    store = synthetic_store(tmp_path / "s", episodes=12)
    encoder = random_probe_encoder(tmp_path / "r", store.num_actions, "nature", seed=0)
    settings = ProbeSettings(readout="logistic", features=features)
    result = probe_encoder(encoder, store, settings, random_baseline_seed=0, progress=False)
    assert result["readout"] == "logistic" and result["features"] == features
    assert result["settings"]["readout"] == "logistic"
    assert result["settings"]["features"] == features
    ball, hidden = result["variables"]["ball_x"], result["variables"]["player_y"]
    assert ball["f1"] > 0.9  # the block's column is readable from either feature
    # coordinates get a ridge regression beside their F1; the hidden one explains nothing
    assert ball["r2"] > 0.8 and ball["within_accuracy"] > 0.9
    assert hidden["r2"] < 0.3
    summary = result["regression"]
    assert summary["variables"] == 2
    assert summary["r2"] == pytest.approx((ball["r2"] + hidden["r2"]) / 2)
    # the random-init baseline reads the same features with the same readout: here, the same
    assert result["random_init"]["overall"] == pytest.approx(result["overall"])
    assert result["random_init"]["regression"]["r2"] == pytest.approx(summary["r2"])


def test_cli_readouts_are_separate_entries_listed_side_by_side(tmp_path, capsys):
    store = synthetic_store(tmp_path / "s", episodes=10, length=30)
    out = tmp_path / "random"
    base = ["probe", "--random-init", "nature", "--out", str(out), "--data", str(store.path)]
    base += ["--no-progress", "--no-random-baseline"]
    assert main(base) == 0
    default = json.loads(capsys.readouterr().out)
    assert (default["readout"], default["features"]) == ("lstsq", "renormalized")
    assert default["category_mean_f1"] == pytest.approx(
        np.mean(list(default["categories"].values()))
    )
    assert default["coordinates"]["variables"] == 2
    assert main([*base, "--readout", "logistic", "--features", "conv"]) == 0
    logistic = json.loads(capsys.readouterr().out)
    assert logistic["computed"] and (logistic["readout"], logistic["features"]) == (
        "logistic",
        "conv",
    )
    entries = json.loads((out / "probes.json").read_text())["entries"]
    assert [(e["readout"], e["features"]) for e in entries] == [
        ("lstsq", "renormalized"),
        ("logistic", "conv"),
    ]
    assert main([*base, "--readout", "logistic", "--features", "conv"]) == 0  # done: skipped
    assert json.loads(capsys.readouterr().out)["computed"] is False
    # what an experiment's probe task checks, per readout
    done = functools.partial(probe_done, out, store.path, random_baseline_seed=None)
    assert done() and done(readout="logistic", features="conv")
    assert not done(readout="logistic") and not done(features="projection")
    frame = probe_frame([out])
    assert sorted(frame["readout"]) == ["logistic", "lstsq"]
    assert frame["coordinate_r2"].notna().all()
    # the majority-class baseline of the same split, per category and as the headline's
    row = frame[frame["readout"] == "lstsq"].iloc[0]
    majority = entries[0]["majority"]
    assert row["majority_across_categories"] == pytest.approx(majority["across_categories"])
    assert majority["categories"]
    for category, value in majority["categories"].items():
        assert row[f"majority_{category}"] == pytest.approx(value)
    # A summary over both readouts would mix two measurements: refused, one at a time works.
    with pytest.raises(ValueError, match="several readings .*logistic, conv"):
        objective_summary(frame)
    one = probe_frame([out], readout="logistic", features="conv")
    assert len(one) == 1 and not objective_summary(one).empty
    assert "readout: logistic on conv" in results_markdown(one, objective_summary(one))
    assert main(["report", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "category_mean" in shown and "mean of category means" in shown
    assert "logistic" in shown and "lstsq" in shown


def test_one_reading_asked_for_keeps_each_encoders_fullest_frame_budget(tmp_path, capsys):
    """A study reads an encoder on 10k frames and on all of them with the same readout: asked
    for that readout, `probe_frame` gives the encoder once (its all-frames entry), so the
    notebooks' summaries neither mix the two nor refuse them; unfiltered, both rows stay and a
    summary over them is refused, naming the two readings."""
    store = synthetic_store(tmp_path / "s", episodes=10, length=30)
    out = tmp_path / "random"
    base = ["probe", "--random-init", "nature", "--out", str(out), "--data", str(store.path)]
    base += ["--no-progress", "--no-random-baseline"]
    assert main([*base, "--max-frames", "150"]) == 0
    assert main(base) == 0
    capsys.readouterr()
    both = probe_frame([out])
    assert sorted(both["max_frames"].fillna(0)) == [0, 150] and len(set(both["frames"])) == 2
    with pytest.raises(ValueError, match="lstsq, renormalized; lstsq, renormalized, 150 frames"):
        objective_summary(both)
    one = probe_frame([out], readout="lstsq", features="renormalized")
    assert len(one) == 1 and one["frames"].item() == both["frames"].max()
    assert pd.isna(one["max_frames"].item()) and not objective_summary(one).empty


def test_entries_written_before_readouts_read_as_least_squares_on_renormalized_maps(tmp_path):
    entry = {
        "encoder": {"kind": "random_init", "seed": 0, "encoder": "nature"},
        "store": {"game": "Pong", "fingerprint": "fp", "path": "/data/pong"},
        "settings": {"split_seed": 0, "max_frames": None},
        "overall": 0.8,
        "across_categories": 0.7,
    }
    write_probes(tmp_path / "probes.json", entry)
    frame = probe_frame([tmp_path])
    assert frame.loc[0, "readout"] == "lstsq" and frame.loc[0, "features"] == "renormalized"
    assert pd.isna(frame.loc[0, "coordinate_r2"])
    # The same probe made now (its settings name the readout) replaces the old entry; another
    # readout stands beside it.
    settings = {**ProbeSettings().to_json(), "split_seed": 0, "max_frames": None}
    write_probes(tmp_path / "probes.json", {**entry, "settings": settings, "overall": 0.9})
    (only,) = json.loads((tmp_path / "probes.json").read_text())["entries"]
    assert only["overall"] == 0.9
    other = {**settings, "readout": "logistic"}
    write_probes(tmp_path / "probes.json", {**entry, "settings": other, "readout": "logistic"})
    assert len(json.loads((tmp_path / "probes.json").read_text())["entries"]) == 2


def test_probe_metrics_record_the_headline_regressions_readout_and_features():
    result = {
        "readout": "logistic",
        "features": "projection",
        "overall": 0.5,
        "across_categories": 0.4,
        "categories": {"agent_localization": 0.25},
        "regression": {"variables": 2, "r2": 0.3, "within_accuracy": 0.6, "f1": 0.2},
        "reward": {"f1": 0.6},
    }
    minatar = {
        "headline": {"metric": "r2", "value": 0.7},
        "r2": {"variables": 3, "mean": 0.7, "kinds": {"coordinate": 0.8, "counter": 0.5}},
        "collapse": {"rows": 9, "encoder": {"projection": 0.9}, "random_init": {"projection": 0.5}},
    }
    assert probe_metrics(minatar) == {
        "probe/headline": 0.7,
        "probe/r2": 0.7,
        "probe/r2_coordinate": 0.8,
        "probe/r2_counter": 0.5,
        "probe/cosine_projection": 0.9,
    }
    assert probe_metrics(result) == {
        "probe/f1": 0.5,
        "probe/f1_across_categories": 0.4,
        "probe/f1_agent_localization": 0.25,
        "probe/coordinate_r2": 0.3,
        "probe/coordinate_within": 0.6,
        "probe/reward_f1": 0.6,
        "probe/readout": "logistic",
        "probe/features": "projection",
    }


# -- MinAtar: the game's own state as the labels ------------------------------------------------


@pytest.fixture(scope="module")
def minatar_stores(tmp_path_factory):
    """Two tiny Random stores of MinAtar Breakout with game-state labels (``sgi-lab collect
    random --game minatar/breakout`` makes such a store)."""
    pytest.importorskip("minatar")
    from sgi_lab.data.collect import collect_random

    root = tmp_path_factory.mktemp("minatar_probe")
    data = collect_random("minatar/breakout", 400, root / "data", seed=1, progress=False)
    probe = collect_random("minatar/breakout", 600, root / "probe", seed=2, progress=False)
    return data, probe


def test_minatar_labels_have_atariaris_categories():
    from sgi_lab.envs.minatar import LABEL_NAMES
    from sgi_lab.probes import CATEGORIES
    from sgi_lab.probes.game_labels import MINATAR_LABEL_CATEGORIES, label_variables

    names = {name for game in LABEL_NAMES.values() for name in game}
    assert names == set(MINATAR_LABEL_CATEGORIES)  # every label has a category, none extra
    assert set(MINATAR_LABEL_CATEGORIES.values()) <= set(CATEGORIES)
    variables = label_variables(LABEL_NAMES["breakout"])
    assert [(v.name, v.address, v.category) for v in variables[:3]] == [
        ("paddle_x", 0, "agent_localization"),
        ("ball_x", 1, "small_object_localization"),
        ("ball_y", 2, "small_object_localization"),
    ]


def test_minatar_store_is_probed_on_its_game_state_labels(minatar_stores, tmp_path, capsys):
    _, store = minatar_stores
    assert store.has_labels and not store.has_ram
    out = tmp_path / "random"
    argv = ["probe", "--random-init", "minatar", "--out", str(out), "--data", str(store.path)]
    assert main([*argv, "--no-progress", "--readout", "logistic"]) == 0
    summary = json.loads(capsys.readouterr().out)
    (entry,) = json.loads((out / "probes.json").read_text())["entries"]
    assert entry["store"]["game"] == "minatar/breakout" and entry["readout"] == "logistic"
    variables = entry["variables"]
    # the labels are the store's columns: paddle_x is column 0 and reads the player's cell
    assert variables["paddle_x"]["address"] == 0
    assert variables["paddle_x"]["category"] == "agent_localization"
    assert {"paddle_x", "ball_x", "ball_y"} <= set(variables)
    # positions are coordinates: a ridge regression's held-out R^2, no classifier
    assert (variables["ball_x"]["kind"], variables["ball_x"]["metric"]) == ("coordinate", "r2")
    assert "f1" not in variables["ball_x"] and variables["ball_x"]["r2"] > 0.5
    assert variables["ball_x"]["score"] == variables["ball_x"]["r2"]
    coordinates = [v["r2"] for v in variables.values() if v["kind"] == "coordinate"]
    assert entry["r2"]["mean"] == pytest.approx(np.mean(coordinates))
    assert entry["headline"]["metric"] == "r2" and summary["headline"] == entry["headline"]
    assert summary["r2"] == entry["r2"]
    # F1 summaries hold the classified labels only (ball_dir), never an R^2
    classified = {n: v["f1"] for n, v in variables.items() if v["metric"] == "f1"}
    if classified:
        assert entry["overall"] == pytest.approx(np.mean(list(classified.values())))
        assert entry["majority"]["overall"] < entry["overall"]
    assert entry["random_init"]["overall"] == entry["overall"]  # the same seed 0
    assert entry["random_init"]["r2"] == entry["r2"]
    assert summary["category_mean_f1"] == entry["across_categories"]
    # the collapse diagnostic beside a random encoder's (here the same encoder: equal)
    collapse = entry["collapse"]
    assert 0 < collapse["encoder"]["projection"] <= 1
    assert collapse["encoder"] == collapse["random_init"] and "step0" not in collapse
    assert summary["cosine"] == {
        "encoder": collapse["encoder"]["projection"],
        "random_init": collapse["random_init"]["projection"],
    }
    # a 600-step Breakout store leaves far under 1,000 test rows: flagged, warned, named
    assert entry["split"]["small_test"] and summary["test_rows"] == entry["split"]["rows"]["test"]
    assert (
        "paddle_x" in summary["warnings"][0] and str(summary["test_rows"]) in summary["warnings"][0]
    )
    assert all(v["small_test"] for v in variables.values())
    # --split-rows measures the same split without an encoder
    assert main(["probe", "--data", str(store.path), "--split-rows"]) == 0
    measured = json.loads(capsys.readouterr().out)
    assert measured["rows"] == entry["split"]["rows"] and measured["small_test"] is True
    assert measured["test_duplicates_removed"] == entry["split"]["test_duplicates_removed"]
    assert main(["probe", str(out), "--data", str(store.path), "--split-rows"]) == 2
    assert "--split-rows measures the store alone" in capsys.readouterr().err
    # the labels the probes read are the store's own, row for row
    from sgi_lab.probes.game_labels import state_labels, state_variables

    rows = np.arange(5)
    columns = state_labels(store, rows, state_variables(store))
    np.testing.assert_array_equal(columns, store.gather_labels(rows).astype(np.int64))


def test_pretraining_probes_a_minatar_encoder_with_the_configs_readout(minatar_stores, tmp_path):
    from sgi_lab.runs.folder import RunDir

    data, probe = minatar_stores
    run = tmp_path / "run"
    overrides = {
        "steps": 4, "batch_size": 8, "log_every": 2, "checkpoint_every": 4, "prefetch": 0,
        "probe_every": 2, "probe_data": str(probe.path), "probe_frames": 300,
        "probe_readout": "logistic", "probe_features": "projection",
    }  # fmt: skip
    argv = ["pretrain", "--params", "params/pretrain/minatar_sgi.yaml", "--data", str(data.path)]
    for key, value in overrides.items():
        argv += ["--set", f"{key}={value}"]
    assert main([*argv, "--out", str(run), "--no-progress"]) == 0
    probed = [r for r in RunDir(run).read_metrics() if "probe/f1" in r]
    assert [r["step"] for r in probed] == [0, 2, 4]  # the initialisation first
    for row in probed:
        assert (row["probe/readout"], row["probe/features"]) == ("logistic", "projection")
        # the positions are read by R^2 (coordinates), the direction by F1
        assert "probe/coordinate_r2" in row and "probe/f1_agent_localization" not in row
    curves = training_probe_curves([run])
    assert list(curves["readout"]) == ["logistic"] * 3
    assert list(curves["features"]) == ["projection"] * 3
    # the run's step 0, rebuilt from its seed, is the encoder its step-0 probe read
    from sgi_lab.analysis.probe_encoders import load_probe_encoder
    from sgi_lab.probes import ProbeEncoder, ProbeSettings, probe_encoder

    encoder = load_probe_encoder(run)
    assert "torch.manual_seed(0)" in encoder.initial_source
    settings = ProbeSettings(readout="logistic", features="projection")
    again = probe_encoder(
        ProbeEncoder(encoder.initial, "step0", "pretrain", tmp_path / "x.json"), probe, settings,
        max_frames=300, random_baseline_seed=None, progress=False,
    )  # fmt: skip
    # (the run computed its features under its CPU settings, channels-last or not: the same
    # weights give features equal to rounding, R^2 to about 1e-3 on these 18 test rows)
    assert again["regression"]["r2"] == pytest.approx(probed[0]["probe/coordinate_r2"], abs=5e-3)
    # sgi-lab probe shows the collapse diagnostic beside random init and that step 0
    argv = ["probe", str(run), "--data", str(probe.path), "--max-frames", "300", "--no-progress"]
    assert main(argv) == 0
    (entry,) = json.loads((run / "probes.json").read_text())["entries"]
    assert set(entry["collapse"]) >= {"encoder", "random_init", "step0", "rows", "sources"}
    assert entry["collapse"]["sources"]["step0"] == encoder.initial_source
    assert 0 < entry["collapse"]["step0"]["projection"] <= 1


def test_paired_changes_subtract_each_runs_own_start():
    from sgi_lab.analysis.probe_study import paired_changes

    rows = [  # run, seed, step, overall: seed 0 loses 0.04, seed 1 0.06 from their own starts
        ("sgi_seed0__Pong", 0, 0, 0.80),
        ("sgi_seed0__Pong", 0, 500, 0.76),
        ("sgi_seed1__Pong", 1, 0, 0.84),
        ("sgi_seed1__Pong", 1, 500, 0.78),
    ]
    curves = pd.DataFrame(
        [
            {"run": r, "objective": "sgi", "seed": s, "game": "Pong", "step": t, "overall": v}
            | {"readout": "lstsq", "features": "renormalized"}
            for r, s, t, v in rows
        ]
    )
    row = paired_changes(curves).iloc[0]
    assert (row["objective"], row["step"], row["seeds"]) == ("sgi", 500, 2)
    # mean -0.05; t(0.975, 1) = 12.706 x sd 0.01414 / sqrt(2) = 0.12706
    assert row["value"] == pytest.approx(-0.05)
    assert row["upper"] - row["value"] == pytest.approx(12.7062 * 0.01, rel=1e-4)
    # Unpaired, the starts' spread (0.80 against 0.84) would be in the interval: not here.
    with pytest.raises(ValueError, match="no step-0 probe in sgi_seed1__Pong"):
        paired_changes(curves.drop(index=2))
