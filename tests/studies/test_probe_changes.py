"""The probe-change tables (sgi_lab.studies.probe_changes) on hand-made runs: paired
changes from each run's own step 0, and the readout table's cells."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from sgi_lab.studies import probe_changes
from sgi_lab.studies.probe_changes import (
    change_curve_table,
    change_table,
    per_run_table,
    readout_table,
)


def _run(root, name, seed, curve):
    """A pretraining run folder that probed itself: {step: (across_categories, reward_f1)}."""
    folder = root / name
    folder.mkdir()
    (folder / "config.yaml").write_text(f"seed: {seed}\n")
    rows = [
        {"step": step, "probe/f1": value, "probe/f1_across_categories": value}
        | {"probe/reward_f1": reward, "probe/readout": "lstsq", "probe/features": "renormalized"}
        for step, (value, reward) in curve.items()
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_change_table_pairs_each_run_with_its_own_start(tmp_path):
    runs = [
        _run(
            tmp_path, "i_seed0__Pong", 0, {0: (0.90, 0.95), 500: (0.85, 0.95), 1000: (0.80, 0.90)}
        ),
        _run(
            tmp_path, "i_seed1__Pong", 1, {0: (0.86, 0.93), 500: (0.82, 0.93), 1000: (0.78, 0.93)}
        ),
        # S's seed 0 reached step 500 only: it is in the table at step 500, not at step 1000
        _run(tmp_path, "s_seed0__Pong", 0, {0: (0.90, 0.95), 500: (0.91, 0.96)}),
    ]
    assert list(change_table(runs).index) == ["i"]  # at the longest run's last step, 1000
    table = change_table(runs, metrics=("across_categories", "reward_f1"), step=500)
    assert table.index.name == "objective (change at step 500)"
    # I: changes -0.05 and -0.04 -> mean -0.045, sd 0.00707, t(1) 12.706 x 0.005 = 0.0635
    assert table.loc["i", "across_categories"] == "-0.045 [-0.109, +0.019]"
    assert table.loc["i", "reward_f1"] == "+0.000 [+0.000, +0.000]"
    assert table.loc["i", "start (across_categories)"] == "0.880"
    assert table.loc["s", "across_categories"] == "+0.010"  # one seed: no interval
    assert table.loc["s", "seeds"] == "1"
    at_1000 = change_table(runs[:2], metrics=("across_categories",), step=1000)
    assert at_1000.loc["i", "across_categories"].startswith("-0.090 ")
    curve = change_curve_table(runs)
    assert list(curve.columns) == [500, 1000]
    assert curve.loc["s", 500] == "+0.010" and pd.isna(curve.loc["s", 1000])
    assert curve.loc["i", 1000].startswith("-0.090 [")  # -0.10 and -0.08
    each = per_run_table(runs)
    assert each.loc["i_seed1__Pong", 1000] == 0.78 and pd.isna(each.loc["s_seed0__Pong", 1000])


def test_change_table_without_self_probes_says_so(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(ValueError, match="probed itself"):
        change_table([tmp_path / "run"])


def _probe_frame(monkeypatch, rows) -> None:
    """The experiment's probe results as ``(objective, seed, readout, features, F1)`` rows."""
    frame = pd.DataFrame(
        [
            {"objective": o, "seed": s, "readout": r, "features": f, "game": "Pong"}
            | {"across_categories": v, "unfinished": False}
            for o, s, r, f, v in rows
        ]
    )
    monkeypatch.setattr(probe_changes, "experiment_probe_frame", lambda graph: frame)


def test_readout_table_cells_and_order(monkeypatch):
    rows = [
        ("sgi", 0, "lstsq", "renormalized", 0.70),
        ("sgi", 1, "lstsq", "renormalized", 0.74),
        ("random_init", 0, "lstsq", "renormalized", 0.88),
        ("random_init", 1, "lstsq", "renormalized", 0.86),
        ("sgi", 0, "logistic", "projection", 0.80),
    ]
    _probe_frame(monkeypatch, rows)
    table = readout_table(graph=None)
    assert list(table.index) == ["random_init", "sgi"]  # random init first
    # sgi: 0.72, sd 0.0283, t(1) 12.706 x 0.02 = 0.254
    assert table.loc["sgi", "lstsq, renormalized"] == "0.720 [0.466, 0.974]"
    assert table.loc["sgi", "logistic, projection"] == "0.800 (n = 1)"
    assert pd.isna(table.loc["random_init", "logistic, projection"])


def test_paired_readout_table_subtracts_each_seeds_own_random_encoder(monkeypatch):
    rows = [
        ("sgi", 0, "lstsq", "renormalized", 0.70),
        ("sgi", 1, "lstsq", "renormalized", 0.74),
        ("sgi", 2, "lstsq", "renormalized", 0.86),
        ("random_init", 0, "lstsq", "renormalized", 0.88),
        ("random_init", 1, "lstsq", "renormalized", 0.86),
        ("random_init", 1, "lstsq", "renormalized", 0.86),  # a second task of the same reading
        ("random_init", 2, "lstsq", "renormalized", 0.85),
        ("g", 0, "logistic", "projection", 0.91),
        ("random_init", 0, "logistic", "projection", 0.90),
    ]
    _probe_frame(monkeypatch, rows)
    table = probe_changes.paired_readout_table(graph=None)
    # sgi minus its seed's random init: -0.18, -0.12, +0.01; mean -0.0967, sd 0.0971,
    # t(2) 4.303 x 0.0971 / sqrt(3) = 0.2412
    assert table.loc["sgi", "lstsq, renormalized"] == "-0.097 [-0.338, +0.145], 2/3 lower"
    assert table.loc["g", "logistic, projection"] == "+0.010, 0/1 lower"  # one pair: no interval
    assert pd.isna(table.loc["g", "lstsq, renormalized"])


def test_paired_readout_table_pairs_game_by_game(monkeypatch):
    """A seed whose pretraining finished on one game only is paired with its random encoder on
    that game, not with the random encoder's mean over every game."""
    frame = pd.DataFrame(
        [
            {"objective": o, "seed": 0, "game": g, "readout": "lstsq", "features": "renormalized"}
            | {"across_categories": v, "unfinished": False}
            for o, g, v in [
                ("random_init", "Pong", 0.90),
                ("random_init", "Boxing", 0.50),
                ("sgi", "Pong", 0.80),  # Boxing not finished yet
            ]
        ]
    )
    monkeypatch.setattr(probe_changes, "experiment_probe_frame", lambda graph: frame)
    table = probe_changes.paired_readout_table(graph=None)
    # 0.80 - 0.90 on Pong; against the mean over games (0.70) it would read +0.100
    assert table.loc["sgi", "lstsq, renormalized"] == "-0.100, 1/1 lower"


def test_readout_table_shows_the_majority_baseline_of_the_same_splits(monkeypatch):
    frame = pd.DataFrame(
        [
            {"objective": o, "seed": s, "game": g, "readout": "lstsq", "features": "renormalized"}
            | {"across_categories": v, "majority_across_categories": m, "unfinished": False}
            for o, s, g, v, m in [
                ("random_init", 0, "Pong", 0.90, 0.10),
                ("random_init", 0, "Boxing", 0.80, 0.30),
                ("sgi", 0, "Pong", 0.70, 0.10),
                ("sgi", 0, "Boxing", 0.60, 0.30),
            ]
        ]
    )
    monkeypatch.setattr(probe_changes, "experiment_probe_frame", lambda graph: frame)
    table = readout_table(graph=None)
    assert list(table.index) == ["random_init", "sgi", "majority class"]
    # one value per game's split (0.10, 0.30), their mean
    assert table.loc["majority class", "lstsq, renormalized"] == "0.200"
    # (probes that recorded no baseline have no such row: test_readout_table_cells_and_order)


def test_readings_on_different_frame_budgets_stay_apart(monkeypatch):
    """The published study read its encoders on 10k frames and re-reads them on all 20k with
    the same readout: two measurements, two columns, never one mean."""
    frame = pd.DataFrame(
        [
            {"objective": o, "seed": 0, "readout": "lstsq", "features": "renormalized"}
            | {"max_frames": m, "game": "Pong", "across_categories": v, "unfinished": False}
            for o, m, v in [
                ("sgi", 10000, 0.70),
                ("random_init", 10000, 0.90),
                ("sgi", None, 0.80),
                ("random_init", None, 0.85),
            ]
        ]
    )
    monkeypatch.setattr(probe_changes, "experiment_probe_frame", lambda graph: frame)
    table = probe_changes.paired_readout_table(graph=None)
    assert table.loc["sgi", "lstsq, renormalized, 10000 frames"] == "-0.200, 1/1 lower"
    assert table.loc["sgi", "lstsq, renormalized"] == "-0.050, 1/1 lower"
    assert list(readout_table(graph=None).columns) == [
        "lstsq, renormalized",
        "lstsq, renormalized, 10000 frames",
    ]


@pytest.mark.parametrize("objective", ["s", "g", "i", "s_i", "sgi_m", "atc", "bc"])
def test_a_pretraining_run_of_seed_s_starts_from_random_encoder_s(objective):
    """The paired tables subtract random encoder s from the run of seed s: that is its own
    starting point only if both build the weights a probe reads (the encoder and the projection
    in ``head``) identically, whichever heads the objective adds."""
    import torch

    from sgi_lab.config import PretrainConfig, load_config
    from sgi_lab.probes.encoder_probe import random_init_model
    from sgi_lab.train.pretrain_step import build_state

    config = load_config(
        PretrainConfig, f"params/pretrain/{objective}.yaml", {"encoder": "nature", "seed": 2}
    )
    start = build_state(config, 6, torch.device("cpu")).model.state_dict()
    reference = random_init_model(6, "nature", seed=2).state_dict()
    read = [k for k in reference if k.startswith(("encoder.", "head."))]
    assert len(read) >= 8
    for key in read:
        assert torch.equal(start[key].contiguous(), reference[key].contiguous()), key
