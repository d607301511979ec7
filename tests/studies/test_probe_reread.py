"""The published probe study re-read several ways: one column per reading,
counts of objectives below random init and the correlations with the paper, per reading."""

from __future__ import annotations

import pandas as pd
import pytest

from sgi_lab.studies import probe_changes, probe_reread

# (objective, F1 under the published reading, under the logistic probe on all frames)
VALUES = [("random_init", 0.90, 0.90), ("s", 0.80, 0.92), ("g", 0.85, 0.91), ("i", 0.70, 0.95)]


@pytest.fixture
def graph(monkeypatch):
    rows = []
    for objective, published, logistic in VALUES:
        for seed in (0, 1):
            for readout, frames, value in (
                ("lstsq", 10000, published),
                ("logistic", None, logistic),
            ):
                rows.append(
                    {"objective": objective, "seed": seed, "game": "Pong", "unfinished": False}
                    | {"readout": readout, "features": "renormalized", "max_frames": frames}
                    | {"across_categories": value, "agent_localization": value - 0.1}
                    | {"reward_f1": 0.9}
                )
    frame = pd.DataFrame(rows)
    for module in (probe_changes, probe_reread):
        monkeypatch.setattr(module, "experiment_probe_frame", lambda graph: frame)
    return None


def test_objectives_below_random_init_are_counted_per_reading(graph):
    counts = probe_reread.below_random_counts(graph)
    published = counts.loc["lstsq, renormalized, 10000 frames"]
    assert published["objectives below random init"] == "3 of 3"
    assert published["above or level"] == "none"
    logistic = counts.loc["logistic, renormalized"]
    assert logistic["objectives below random init"] == "0 of 3"
    assert logistic["above or level"] == "g, i, s"


def test_rank_correlation_with_the_paper_per_reading(graph):
    # paper medians: SGI-None 0.343, S 0.009, G 0.060, I 0.411 (ranks random 3, s 1, g 2, i 4).
    # published reading ranks random 4, g 3, s 2, i 1: sum d^2 = 12, rho = 1 - 72/60 = -0.2;
    # logistic ranks i 4, s 3, g 2, random 1: sum d^2 = 8, rho = 1 - 48/60 = +0.2.
    table = probe_reread.rank_correlation_table(graph)
    assert table.loc["lstsq, renormalized, 10000 frames", "across_categories"].startswith("-0.20 (")
    assert table.loc["logistic, renormalized", "across_categories"].startswith("+0.20 (")
    assert table.loc["logistic, renormalized", "across_categories"].endswith("n = 4)")
    # a probe equal for every objective has no rank correlation
    assert table.loc["logistic, renormalized", "reward_f1"] == "-"


def test_reread_markdown_holds_every_table(graph):
    text = probe_reread.reread_markdown(graph)
    assert (
        "| objective (across_categories) | lstsq, renormalized, 10000 frames | "
        "logistic, renormalized |" in text
    )
    assert "lstsq, renormalized, 10000 frames" in text
    # i minus its seed's random encoder, published reading: -0.2 in both seeds
    assert "| i | -0.200 [-0.200, -0.200], 2/2 lower | +0.050 [+0.050, +0.050], 0/2 lower |" in text
    assert "Spearman correlation" in text and "below random init" in text
    # tested over seeds: i's two seeds -0.2 each; s and g -0.1 and -0.05: within a seed
    # -0.2 - (-0.075) = -0.125; two seeds cannot give a sign test below p = 0.5
    assert "tested over seeds" in text
    assert (
        "| lstsq, renormalized, 10000 frames: with minus without, within a seed | 6 | "
        "0: -0.125, 1: -0.125 | -0.125 [-0.125, -0.125] | 2 of 2 | 0.50 (at best 0.50) | - |"
    ) in text
