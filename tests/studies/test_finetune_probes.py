"""The MinAtar study's probe-beside-finetuning table: it reads the R^2 headline where the
results have one (probes.json format 2), the category-mean F1 otherwise, never a mean of both."""

from __future__ import annotations

import pandas as pd
import pytest

from sgi_lab.studies.finetune_probes import probe_finetune_table, probe_metric

COLUMNS = ["objective", "game", "seed", "headline_metric", "state_r2", "across_categories"]


def test_probe_metric_is_r2_where_a_result_leads_with_it():
    old = pd.DataFrame({"objective": ["s"], "across_categories": [0.7]})  # format 1
    assert probe_metric(old) == "across_categories"
    assert probe_metric(old.assign(headline_metric=[None])) == "across_categories"
    assert probe_metric(old.assign(headline_metric=["f1"])) == "across_categories"
    assert probe_metric(pd.DataFrame(columns=COLUMNS)) == "across_categories"
    mixed = old.assign(headline_metric=["r2"]).pipe(lambda f: pd.concat([f, old]))
    assert probe_metric(mixed) == "state_r2"


def test_a_game_probed_in_format_1_counts_for_no_objective_under_r2():
    """Asterix read in format 2 (R^2), Breakout in format 1 (F1 only): the table reads R^2 on
    Asterix alone; Breakout's F1 never enters a mean with it."""
    probes = pd.DataFrame(
        [
            ("random_init", "minatar/asterix", 0, "r2", 0.70, 0.95),
            ("random_init", "minatar/asterix", 1, "r2", 0.80, 0.95),
            ("random_init", "minatar/breakout", 0, None, None, 0.99),
            ("s", "minatar/asterix", 0, "r2", 0.90, 0.10),
            ("s", "minatar/breakout", 0, None, None, 0.99),
            ("sgi", "minatar/asterix", 0, "r2", 0.40, 0.50),
        ],
        columns=COLUMNS,
    )
    table = pd.DataFrame({"iqm": [0.5, 0.3, 0.1]}, index=["s", "none", "sgi"])
    frame, corr = probe_finetune_table(probes, table)
    assert frame["probe"].to_dict() == pytest.approx({"s": 0.9, "none": 0.75, "sgi": 0.4})
    assert frame["probe_games"].tolist() == [1, 1, 1]
    assert corr["n"] == 3 and corr["rho"] == pytest.approx(1.0)  # s > none > sgi both ways
    # asked for F1: the category means over both games, as the format-1 tables were read
    f1, _ = probe_finetune_table(probes, table, "across_categories")
    assert f1.loc["s", "probe"] == pytest.approx((0.10 + 0.99) / 2)
    assert f1.loc["s", "probe_games"] == 2
