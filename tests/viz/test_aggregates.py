"""The aggregate figures hold the numbers they are given (data, not pixels)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sgi_lab.metrics import compare_to_paper, paper_aggregates
from sgi_lab.viz import aggregate_table, interval_plot, per_game_bar

DF = pd.DataFrame(
    [
        ("SGI-M", "iqm", 0.567, 0.524, 0.612),
        ("SGI-M", "median", 0.679, 0.473, 0.739),
        ("SGI-M", "games_above_human", 9.0, 7.0, 10.0),
        ("SGI-None", "iqm", 0.242, 0.212, 0.274),
        ("SGI-None", "median", 0.343, 0.268, 0.401),
        ("SGI-None", "games_above_human", 3.0, 2.0, 4.0),
    ],
    columns=["method", "metric", "value", "lower", "upper"],
)


def _trace(fig, name):
    (trace,) = [t for t in fig.data if t.name == name]
    return trace


def test_interval_plot_traces_hold_intervals_and_points():
    fig = interval_plot(DF)
    assert [a.text for a in fig.layout.annotations] == ["IQM", "Median", "#Games > Human"]
    bars = _trace(fig, "iqm CI")
    assert bars.type == "bar" and bars.orientation == "h"
    assert list(bars.y) == ["SGI-M", "SGI-None"]
    base = np.asarray(bars.base, float)  # plotly keeps `base` as an object array
    np.testing.assert_allclose(base, [0.524, 0.212])
    np.testing.assert_allclose(base + np.asarray(bars.x), [0.612, 0.274])
    points = _trace(fig, "median")
    np.testing.assert_allclose(points.x, [0.679, 0.343])
    assert points.xaxis == "x2"  # second panel
    assert _trace(fig, "games_above_human CI").xaxis == "x3"


def test_interval_plot_selects_and_orders_methods_and_metrics():
    fig = interval_plot(DF, metrics=["median"], methods=["SGI-None", "SGI-M"])
    assert [t.name for t in fig.data] == ["median CI", "median", "SGI-None", "SGI-M"]
    assert list(_trace(fig, "median").y) == ["SGI-None", "SGI-M"]
    np.testing.assert_allclose(_trace(fig, "median").x, [0.343, 0.679])
    with pytest.raises(KeyError):
        interval_plot(DF, methods=["SGI-Q"])


def test_interval_plot_overlays_paper_values():
    fig = interval_plot(DF, metrics=["iqm"], paper=paper_aggregates("IQMs", tidy=True))
    ref = _trace(fig, "iqm (paper)")
    got = dict(zip(ref.y, ref.x))
    assert got == {"SGI-M": 0.567, "SGI-None": 0.242}
    np.testing.assert_allclose(np.asarray(ref.x) + np.asarray(ref.error_x.array), [0.612, 0.274])


def test_per_game_bar_holds_both_hns_columns():
    compare = compare_to_paper({"Pong": -3.05, "Breakout": 42.8}, "SGI-M")
    fig = per_game_bar(compare)
    ours, theirs = fig.data
    assert ours.name == "ours" and theirs.name == "paper (SGI-M)"
    assert list(ours.x) == ["Breakout", "Pong"]
    np.testing.assert_allclose(ours.y, compare["ours_hns"])
    np.testing.assert_allclose(theirs.y, compare["paper_hns"])
    assert ours.y[1] == pytest.approx(0.5)


def test_aggregate_table_cells():
    fig = aggregate_table(DF)
    (table,) = fig.data
    assert list(table.header.values) == [
        "Method",
        "IQM (CI)",
        "Median (CI)",
        "#Games > Human (CI)",
    ]
    methods, iqm_cells, median_cells, above_human = table.cells.values
    assert list(methods) == ["SGI-M", "SGI-None"]
    assert list(iqm_cells) == ["0.567 (0.524, 0.612)", "0.242 (0.212, 0.274)"]
    assert median_cells[0] == "0.679 (0.473, 0.739)"
    assert list(above_human) == ["9 (7, 10)", "3 (2, 4)"]


def test_aggregate_table_of_paper_rows_without_ci():
    df = paper_aggregates("controls_hns", tidy=True)
    fig = aggregate_table(df, metrics=["median", "games_above_human"])
    methods, medians, above = fig.data[0].cells.values
    row = list(methods).index("S+G")
    assert medians[row] == "0.029" and above[row] == "0"


def test_interval_plot_axis_titles_legend_and_ticks():
    fig = interval_plot(DF)
    assert [fig.layout[k].title.text for k in ("xaxis", "xaxis2", "xaxis3")] == [
        "human-normalized score",
        "human-normalized score",
        "games",
    ]
    legend = [t.name for t in fig.data if t.showlegend is not False]
    assert legend == ["SGI-M", "SGI-None"]
    assert list(fig.layout.yaxis.tickvals) == ["SGI-M", "SGI-None"]  # no name dropped


def test_interval_plot_without_ci_puts_no_nan_in_json():
    import json

    no_ci = DF.assign(lower=np.nan, upper=np.nan)
    fig = interval_plot(no_ci)
    json.dumps(fig.to_plotly_json(), allow_nan=False, default=list)
    assert list(fig.data[0].base) == [None, None]


def test_per_game_bar_says_whether_the_protocol_is_the_papers():
    smoke = compare_to_paper({"Pong": -20.0}, "SGI-M", protocol={"episodes": 2, "max_frames": 2000})
    assert smoke["comparable"].tolist() == [False]
    assert smoke.attrs["protocol"] == "2 episodes, cap 2,000 frames (500 steps)"
    title = per_game_bar(smoke).layout.title.text
    assert "2 episodes" in title and "not comparable" in title
    full = compare_to_paper(
        {"Pong": -20.0}, "SGI-M", protocol=[{"episodes": 100, "max_frames": 108_000}]
    )
    assert full["comparable"].all() and "not comparable" not in per_game_bar(full).layout.title.text
    unknown = compare_to_paper({"Pong": -20.0}, "SGI-M")
    assert not unknown.attrs["comparable"] and "unknown" in unknown.attrs["note"]


def test_interval_plot_marks_carry_their_legend_colours_and_counts_whole_games():
    """Every mark (CI bar and point) has its method's legend colour; a count axis ticks whole
    games; HNS panels hold few ticks; the subtitle sits above the panel titles."""
    fig = interval_plot(DF, title="aggregate HNS<br><sup>ours: 2 episodes</sup>")
    legend = {t.name: t.marker.color for t in fig.data if t.showlegend is not False}
    assert legend["SGI-M"] != legend["SGI-None"]
    for name in ("iqm", "median", "games_above_human"):
        points, bars = _trace(fig, name), _trace(fig, f"{name} CI")
        expected = [legend[m] for m in points.y]
        assert list(points.marker.color) == expected and list(points.marker.line.color) == expected
        assert list(bars.marker.color) == [legend[m] for m in bars.y]
    assert fig.layout.xaxis3.dtick == 2 and fig.layout.xaxis3.tickformat == "d"  # 2..10 games
    assert fig.layout.xaxis.nticks == 5 and fig.layout.xaxis2.nticks == 5
    assert fig.layout.title.yanchor == "top" and fig.layout.margin.t == 80 + 18


def test_capped_rows_are_set_apart_below_a_line():
    capped = DF[DF["method"] == "SGI-M"].assign(method="demo (capped at 3,000 steps)")
    df = pd.concat([DF, capped], ignore_index=True)
    methods = ["SGI-M", "SGI-None", "demo (capped at 3,000 steps)"]
    fig = interval_plot(df, methods=methods, capped_from=methods[2])
    (line,) = [s for s in fig.layout.shapes if s.name == "capped evaluations below"]
    assert (line.y0, line.y1, line.xref) == (1.5, 1.5, "paper")  # between rows 1 and 2
    assert any("not comparable with the rows above" in a.text for a in fig.layout.annotations)
    assert not interval_plot(df, methods=methods).layout.shapes


def test_per_game_hns_of_26_games_is_drawn_across_with_labels_apart():
    """26 games: one row per game, tall enough to read; the random and human labels at
    opposite ends of their lines. A few games stay as columns."""
    from sgi_lab.envs.games import ATARI_100K_GAMES
    from sgi_lab.viz.ablations import per_game_hns_figure

    rows = [(g, m, 0.1 * i) for i, g in enumerate(ATARI_100K_GAMES) for m in ("a", "b")]
    fig = per_game_hns_figure(pd.DataFrame(rows, columns=["game", "method", "hns"]))
    assert fig.data[0].orientation == "h" and list(fig.data[0].y) == list(ATARI_100K_GAMES)
    assert fig.layout.height >= 18 * 26 and fig.layout.yaxis.autorange == "reversed"
    labels = {a.text: (a.xanchor, a.yanchor) for a in fig.layout.annotations}
    assert labels["random"] != labels["human"]
    few = per_game_hns_figure(pd.DataFrame([("Pong", "a", 0.2)], columns=["game", "method", "hns"]))
    assert few.data[0].orientation != "h" and list(few.data[0].x) == ["Pong"]
