"""Titles that never meet, by the pixel arithmetic plotly lays them out with (plotly.js 3,
``drawMainTitle``): a figure title of several lines (``<br>``) stays in the top margin above the
panels' titles, and the rows of a 2x2 figure leave room for row 1's tick labels, its axis
titles and row 2's titles."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from sgi_lab import viz
from sgi_lab.data import TransitionStoreWriter
from sgi_lab.data.store import TransitionStore
from sgi_lab.viz import ablations, aggregates, representations

TITLE_FONT = 16.8  # plotly's title font: 1.4 x the 12-px layout font
LINE = 1.3  # plotly's line spacing, in em
PLOTLY_TOP_MARGIN = 100  # plotly's default margin.t


def title_bottom(layout) -> float:
    """Pixels from the figure's top to the bottom of its title's last line.

    plotly places the first line's baseline at ``y + dy`` (``y``: half the top margin when the
    title's y is auto, else from its y, yref and pad; ``dy``: 0.35 em centred, 0.7 em
    top-anchored) and each next line 1.3 em lower; a descender reaches 0.3 em below a baseline.
    """
    title = layout.title
    top = layout.margin.t if layout.margin.t is not None else PLOTLY_TOP_MARGIN
    if title.y is None or title.y == "auto":
        y, dy = top / 2, 0.35
    elif title.yref == "container" and title.yanchor == "top":
        assert title.y == 1 or layout.height, "a title placed from the figure's height"
        y, dy = (1 - title.y) * (layout.height or 0) + (title.pad.t or 0), 0.7
    else:
        pytest.fail(f"a title placement this check does not know: {title}")
    lines = title.text.count("<br>") + 1
    return y + dy * TITLE_FONT + LINE * TITLE_FONT * (lines - 1) + 0.3 * TITLE_FONT


def panel_titles_top(layout) -> float:
    """Pixels from the figure's top to the top of the first row's panel titles: each sits on
    its panel (yanchor bottom), 1.3 em a line and 1 px of padding above and below."""
    top = layout.margin.t if layout.margin.t is not None else PLOTLY_TOP_MARGIN
    titles = [a for a in layout.annotations if a.yanchor == "bottom"]  # not "nothing logged"
    tallest = max(LINE * a.font.size * (a.text.count("<br>") + 1) + 2 for a in titles)
    return top - tallest


def assert_title_clear_of_panels(fig) -> None:
    gap = panel_titles_top(fig.layout) - title_bottom(fig.layout)
    assert gap >= 4, f"the title reaches {-gap:.1f} px into the panels' titles"


def _rows(probe=False):
    """A pretraining's rows: every curve logged, the probe's only when it probes."""
    keys = [k for k in viz.PRETRAIN_CURVES if probe or not k.startswith("probe/")]
    return [{"step": s, **dict.fromkeys(keys, 1.0 / s)} for s in (5, 10)]


@pytest.mark.parametrize("probe", [True, False])
def test_the_pretraining_curves_title_and_its_probe_subtitle_keep_above_the_panels(probe):
    # no probe F1 logged: "not logged in this run: probe F1 ..." is a second line of the title
    fig = viz.training_curves(_rows(probe=probe), viz.PRETRAIN_CURVES, title="pretraining x")
    assert ("not logged in this run" in fig.layout.title.text) is not probe
    assert [a.text for a in fig.layout.annotations][0] == "total loss"
    assert_title_clear_of_panels(fig)


def test_a_finished_runs_live_and_final_curves_keep_three_title_lines_above_the_panels(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    (run / "status.json").write_text(json.dumps({"state": "finished", "step": 10}))
    curves = viz.LiveCurves(viz.PRETRAIN_CURVES, title="pretraining x")
    assert_title_clear_of_panels(curves.figure)  # the empty live figure, one line
    assert curves.show_for(run) is True  # "finished earlier" as a subtitle
    assert_title_clear_of_panels(curves.figure)
    final = curves.finish()  # and "not logged in this run: probe F1 ..." under it
    assert final.layout.title.text.count("<br>") == 2
    assert_title_clear_of_panels(final)


def test_the_title_arithmetic_finds_plotlys_own_overlap():
    # what the pretraining figure had: a two-line title centred in plotly's 100-px margin
    fig = viz.training_curves(_rows(), viz.PRETRAIN_CURVES, title="pretraining x")
    fig.update_layout(title={"y": None, "yref": None, "yanchor": None, "pad": None})
    fig.update_layout(margin={"t": None})
    with pytest.raises(AssertionError, match="reaches"):
        assert_title_clear_of_panels(fig)


@pytest.fixture
def two_stores(tmp_path):
    """Two 600-row Pong-like stores: 18 actions (turned tick labels), some unfinished
    episodes, so the longest panel titles are drawn."""
    stores = {}
    for k, name in enumerate(("random", "expert")):
        writer = TransitionStoreWriter.create(
            tmp_path / name, game="Pong", source="synthetic", num_actions=18, chunk_size=128
        )
        for t in range(600):
            terminal = t % 170 == 169
            writer.append(
                np.zeros((84, 84), np.uint8), (t + k) % 18, float(t % 50 == 0), terminal, t == 0
            )
        stores[name] = TransitionStore(writer.close())
    return stores


def _text_width(text: str, size: float) -> float:
    """A generous width of one line of text in pixels (0.6 em a character)."""
    return 0.6 * size * max(len(line) for line in text.split("<br>"))


def test_no_two_titles_of_the_store_comparison_meet(two_stores):
    fig = representations.compare_stores_figure(two_stores, title="side by side")
    layout = fig.layout
    width = 1000  # the notebook's width (JupyterLab's output area at 100% zoom, about)
    plot_w = width - 160  # plotly's default side margins (and a legend inside them)
    plot_h = layout.height - layout.margin.t - layout.margin.b
    titles = list(layout.annotations)
    assert "unfinished left out" in titles[1].text  # the longest titles are drawn
    for left, right in ((titles[0], titles[1]), (titles[2], titles[3])):
        size = left.font.size
        gap = (right.x - left.x) * plot_w
        assert gap > (_text_width(left.text, size) + _text_width(right.text, size)) / 2
    # between the rows: row 1's tick labels (up to 45 px turned), its axis titles (20 px) and
    # row 2's titles (one line) fit in the spacing
    row1_bottom = layout.yaxis.domain[0]
    row2_top = layout.yaxis3.domain[1]
    assert (row1_bottom - row2_top) * plot_h >= 45 + 20 + titles[2].font.size + 10
    # the figure's title (one line) sits in the top margin, above row 1's titles
    assert_title_clear_of_panels(fig)


def test_the_aggregates_table_has_no_title_to_meet_its_notes():
    """The ablations notebook prints the selection's notes above the table and the explorer
    shows its caption as HTML above it (`LiveTable`): the plotly table itself draws no title,
    and with nothing selected its title and its message sit apart."""
    df = pd.DataFrame(
        [{"method": m, "metric": "iqm", "value": 0.5, "lower": 0.4, "upper": 0.6} for m in "ab"]
    )
    table = aggregates.aggregate_table(df)
    assert table.layout.title.text is None and table.layout.annotations == ()
    view = type("View", (), {"aggregates": pd.DataFrame(), "notes": ["no runs"]})()
    empty = ablations.ablation_figures(view)["table"]
    (message,) = empty.layout.annotations
    assert message.text == "no runs" and message.y == 0.5 and message.yref == "paper"
    # the message's middle: 450-px figure, plotly's margins 100 and 80, half the plot below
    middle = PLOTLY_TOP_MARGIN + (450 - PLOTLY_TOP_MARGIN - 80) / 2
    assert middle - 0.65 * message.font.size > title_bottom(empty.layout) + 4
