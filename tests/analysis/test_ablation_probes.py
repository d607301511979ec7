"""The ablation explorer's probe columns on results of probes.json format 2: each result's
headline in the column of its metric (R^2 on MinAtar, F1 on Atari, never averaged together), R^2
per label kind and the collapse cosines beside random init and step 0, in the table and in a
figure with one panel per metric."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sgi_lab.analysis.ablation_probes import (
    headline_columns,
    load_probe_scores,
    probe_figure,
    probe_summary,
    probe_table,
)
from sgi_lab.probes.results import write_probes


def _minatar(seed: int, r2: float) -> dict:
    """A MinAtar result: positions and a counter by R^2 (the headline), a direction by F1."""
    return {
        "encoder": {"kind": "random_init", "seed": seed, "encoder": "minatar"},
        "store": {"game": "minatar/seaquest", "fingerprint": "fp-sq", "path": "/data/sq"},
        "settings": {"split_seed": 0},
        "overall": 0.9,
        "across_categories": 0.9,  # the direction's F1: not the headline here
        "categories": {"miscellaneous": 0.9},
        "r2": {
            "variables": {"sub_x": r2 + 0.1, "oxygen": r2 - 0.1},
            "mean": r2,
            "kinds": {"coordinate": r2 + 0.1, "counter": r2 - 0.1},
            "baseline": -0.001,
        },
        "headline": {"metric": "r2", "value": r2, "of": "mean held-out R^2"},
        "random_init": {"overall": 0.85, "r2": {"mean": 0.5}},
        "collapse": {
            "encoder": {"conv": 0.8, "projection": 0.7},
            "random_init": {"conv": 0.8, "projection": 0.69},
            "step0": {"conv": 0.8, "projection": 0.68},
        },
        "split": {"rows": {"train": 7, "val": 1, "test": 2}},
    }


def _atari(seed: int, f1: float) -> dict:
    """An Atari result of format 2: every variable classified, the category-mean F1 leads."""
    return {
        "encoder": {"kind": "random_init", "seed": seed, "encoder": "nature"},
        "store": {"game": "Pong", "fingerprint": "fp-pong", "path": "/data/pong"},
        "settings": {"split_seed": 0},
        "overall": 0.5,
        "across_categories": f1,
        "categories": {"agent_localization": f1},
        "r2": {"variables": {}, "mean": None, "kinds": {}},
        "headline": {"metric": "f1", "value": f1, "of": "mean of the category means of F1"},
        "random_init": {"overall": 0.45},
        "collapse": {"encoder": {"projection": 0.4}, "random_init": {"projection": 0.5}},
        "split": {"rows": {"train": 7, "val": 1, "test": 2}},
    }


@pytest.fixture
def probes(tmp_path) -> pd.DataFrame:
    for seed, (r2, f1) in enumerate(((0.6, 0.2), (0.8, 0.4))):
        for name, entry in (("sq", _minatar(seed, r2)), ("pong", _atari(seed, f1))):
            folder = tmp_path / f"random_{name}_s{seed}"
            folder.mkdir()
            write_probes(folder / "probes.json", entry)
    return load_probe_scores(probe_paths=[str(tmp_path / "random_*")])


def test_each_headline_goes_to_the_column_of_its_metric(probes):
    by_game = probes.set_index(["game", "seed"])
    assert by_game.loc[("minatar/seaquest", 1), "headline_r2"] == pytest.approx(0.8)
    assert np.isnan(by_game.loc[("minatar/seaquest", 1), "headline_f1"])
    assert by_game.loc[("Pong", 1), "headline_f1"] == pytest.approx(0.4)
    assert np.isnan(by_game.loc[("Pong", 1), "headline_r2"])
    # a format-1 row (no headline) has neither
    old = headline_columns(pd.DataFrame({"headline_metric": [None], "headline": [None]}))
    assert old[["headline_f1", "headline_r2"]].isna().all(axis=None)
    assert headline_columns(pd.DataFrame({"overall": [0.5]}))["headline_f1"].isna().all()


def test_the_summary_keeps_r2_and_f1_apart_over_games(probes):
    """Over Seaquest and Pong together: the R^2 headline is Seaquest's alone (seeds 0.6, 0.8),
    the F1 headline Pong's alone (0.2, 0.4); per kind and cosines beside."""
    summary = probe_summary(probes, ["random_init"]).set_index("metric")["value"]
    assert summary["headline_r2"] == pytest.approx(0.7)
    assert summary["headline_f1"] == pytest.approx(0.3)
    assert summary["r2_coordinate"] == pytest.approx(0.8)
    assert summary["r2_counter"] == pytest.approx(0.6)
    assert summary["random_init_r2"] == pytest.approx(0.5)
    # cosine: per seed the mean over the two games (0.7, 0.4) -> 0.55; step 0 Seaquest only
    assert summary["cosine"] == pytest.approx(0.55)
    assert summary["cosine_step0"] == pytest.approx(0.68)
    assert summary["cosine_random_init"] == pytest.approx((0.69 + 0.5) / 2)
    assert "r2_ordinal" not in summary  # no ordinal label in these games
    minatar = probe_summary(probes, games=["minatar/seaquest"]).set_index("metric")
    assert "headline_f1" not in minatar.index and "headline_r2" in minatar.index


def test_table_and_figure_name_each_metric(probes):
    summary = probe_summary(probes, games=["minatar/seaquest"])
    table = probe_table(summary)
    assert table.columns[:2].tolist() == ["Method", "F1 overall"]
    assert table["headline R² (mean)"].item().startswith("0.700 (")
    assert "R² coordinates" in table and "cosine step 0" in table
    fig = probe_figure(summary)
    assert fig.layout.yaxis.title.text == "test F1"
    assert fig.layout.yaxis2.title.text == "held-out R²"
    assert fig.layout.yaxis3.title.text == "mean pairwise cosine"
    assert fig.layout.title.text.startswith("probe F1, R², cosines of the encoders")
    r2 = next(t for t in fig.data if t.xaxis == "x2")
    assert list(r2.x) == ["headline: mean R²", "coordinates", "counters"]
    assert r2.y[0] == pytest.approx(0.7)
    assert not any("headline: category mean" in t.x for t in fig.data)  # no F1 headline here
