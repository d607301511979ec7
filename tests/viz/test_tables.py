"""HTML tables: the explorer's aggregates, a notebook's final results, redrawn in place."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sgi_lab import viz
from sgi_lab.viz.tables import format_number


def test_aggregate_frame_one_column_per_metric_with_cis():
    df = pd.DataFrame(
        {
            "method": ["a", "a", "b"],
            "metric": ["iqm", "games_above_human", "iqm"],
            "value": [0.51234, 3.0, 0.2],
            "lower": [0.4, 2.0, np.nan],
            "upper": [0.6, 5.0, np.nan],
        }
    )
    frame = viz.aggregate_frame(df, ["games_above_human", "iqm"], ["b", "a"])
    assert list(frame.columns) == ["Method", "#Games > Human", "IQM"]
    assert frame.to_dict("records") == [
        {"Method": "b", "#Games > Human": "", "IQM": "0.200"},
        {"Method": "a", "#Games > Human": "3 (2, 5)", "IQM": "0.512 (0.400, 0.600)"},
    ]


class _Handle:
    def __init__(self):
        self.updates = []

    def update(self, bundle, raw=False):
        self.updates.append(bundle)


def test_live_table_redraws_through_its_display_handle():
    table = viz.LiveTable(pd.DataFrame({"Method": ["x"], "IQM": ["1.0"]}), title="t")
    table._handle = _Handle()  # as show() leaves it in a kernel
    table.replace(pd.DataFrame({"Method": ["x"], "Mean": ["2.0"]}))
    html = table._handle.updates[-1]["text/html"]
    assert "<th>Mean</th>" in html and "<td>2.0</td>" in html and "IQM" not in html
    assert table.headers == ["Method", "Mean"]


def test_results_frame_is_short_and_rounded():
    results = {
        "eval_mean": -20.666666666666668,
        "steps": 100000,
        "paper_config": "SGI-M/S",
        "diversity": {"rank": 12.345678, "cosine": 0.99961234},
        "aggregates": [{"method": "a", "value": 0.1234567}] * 150,
        "games": ["Pong", "Breakout", "Alien", "Amidar", "Assault", "Asterix", "BankHeist"],
        "missing": float("nan"),
        "charts/cosine_similarity": 0.99961234,
    }
    frame = viz.results_frame(results)
    values = dict(zip(frame["result"], frame["value"]))
    assert values["eval_mean"] == "-20.67"
    assert values["steps"] == "100,000"
    assert values["diversity / rank"] == "12.35" and values["diversity / cosine"] == "0.9996"
    assert values["aggregates"] == "150 rows"
    assert values["games"].endswith("… (1 more)")
    assert values["missing"] == ""
    assert values["latent cosine similarity"] == "0.9996"
    assert len(frame) == 9
    assert format_number(True) == "True" and format_number(np.float32(2.0)) == "2"


def test_live_table_says_its_empty_sentence_instead_of_an_empty_table():
    from sgi_lab.viz.tables import LiveTable

    table = LiveTable(title="probe F1", empty="no probe results")
    assert "<table" not in table.html and "no probe results" in table.html
    assert "probe F1" in table.html
    table.replace(pd.DataFrame({"method": ["SGI"], "F1": ["0.5"]}))
    assert "<table" in table.html and "no probe results" not in table.html
    assert "<table" in LiveTable(pd.DataFrame()).html  # without a sentence: the empty table
