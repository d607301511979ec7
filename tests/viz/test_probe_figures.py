"""The probe figures' structure on small hand-made summaries: one panel per metric family (F1,
held-out R^2, collapse cosines), each axis naming its metric, F1 and R^2 never on one axis, and
a result of probes.json format 1 (F1s only) drawn in one F1 panel as before."""

from __future__ import annotations

import pandas as pd
import pytest

from sgi_lab.viz.live import LiveCurves
from sgi_lab.viz.probes import probe_bars, probe_curve_figure, probe_panel_keys, probe_panels
from sgi_lab.viz.training import PRETRAIN_CURVES, metric_axis_title, training_curves

F1_LABELS = {"overall", "reward f1", "headline: category mean", "agent localization"}
R2_LABELS = {"headline: mean R²", "mean R² (headline)", "coordinates", "counters", "ordinal"}
COSINE_LABELS = {"encoder", "step 0", "random init"}


def _summary(rows: list[tuple[str, str, float]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["objective", "metric", "value"])
    return frame.assign(lower=frame["value"] - 0.01, upper=frame["value"] + 0.02)


def _panel_of(trace) -> int:
    return int((trace.xaxis or "x")[1:] or 1)


MINATAR = _summary(
    [
        ("sgi", "overall", 0.6),  # F1 of the classified labels (directions)
        ("sgi", "reward_f1", 0.5),
        ("sgi", "headline_r2", 0.7),
        ("sgi", "r2_coordinate", 0.9),
        ("sgi", "r2_counter", 0.5),
        ("sgi", "random_init_r2", 0.4),
        ("sgi", "cosine", 0.95),
        ("sgi", "cosine_step0", 0.6),
        ("sgi", "cosine_random_init", 0.65),
        ("s", "overall", 0.55),
        ("s", "headline_r2", 0.8),
        ("s", "r2_coordinate", 0.85),
        ("s", "random_init_r2", 0.5),
        ("s", "cosine", 0.7),
    ]
)


def test_a_minatar_summary_draws_f1_r2_and_cosines_in_three_panels_each_axis_named():
    assert [axis for axis, _ in probe_panels(MINATAR)] == [
        "test F1",
        "held-out R²",
        "mean pairwise cosine",
    ]
    fig = probe_bars(MINATAR)
    layout = fig.layout
    assert layout.yaxis.title.text == "test F1" and list(layout.yaxis.range) == [0, 1.05]
    assert layout.yaxis2.title.text == "held-out R²" and layout.yaxis2.range is None
    assert layout.yaxis3.title.text == "mean pairwise cosine"
    by_panel: dict[int, list] = {}
    for trace in fig.data:
        by_panel.setdefault(_panel_of(trace), []).append(trace)
    assert sorted(by_panel) == [1, 2, 3]
    # one bar trace per objective in each panel, each panel's labels of one family only
    for panel, labels in ((1, F1_LABELS), (2, R2_LABELS), (3, COSINE_LABELS)):
        assert [t.name for t in by_panel[panel]] == ["sgi", "s"]
        assert all(set(t.x) <= labels for t in by_panel[panel]), [t.x for t in by_panel[panel]]
    sgi_r2 = by_panel[2][0]
    assert list(sgi_r2.x) == ["headline: mean R²", "coordinates", "counters"]
    assert list(sgi_r2.y) == pytest.approx([0.7, 0.9, 0.5])
    assert list(sgi_r2.error_y.array) == pytest.approx([0.02] * 3)
    s_r2 = by_panel[2][1]
    assert s_r2.y[2] != s_r2.y[2]  # s has no counter R^2: NaN, not 0
    sgi_cosines = by_panel[3][0]
    assert list(sgi_cosines.x) == ["encoder", "step 0", "random init"]
    assert list(sgi_cosines.y) == pytest.approx([0.95, 0.6, 0.65])
    # an objective's colour is the same in every panel; its legend entry appears once
    assert len({t.marker.color for t in fig.data if t.name == "sgi"}) == 1
    assert [t.showlegend for t in fig.data if t.name == "sgi"] == [True, False, False]
    # random init's R^2 (mean over objectives, 0.45) over the R^2 headline group only
    lines = {shape.name: shape for shape in fig.layout.shapes}
    assert set(lines) == {"random init R² 0.450"}
    line = lines["random init R² 0.450"]
    assert (line.xref, line.yref) == ("x2", "y2")
    assert (line.x0, line.x1, line.y0) == pytest.approx((-0.5, 0.5, 0.45))
    assert "F1 and R² never averaged" in fig.layout.title.text


def test_a_format_1_summary_draws_f1_alone_as_before():
    """No R^2 and no cosine: one F1 panel, its axis 0..1.05, the overall-F1 references."""
    summary = _summary(
        [
            ("sgi", "overall", 0.8),
            ("sgi", "agent_localization", 0.7),
            ("sgi", "random_init", 0.75),
            ("sgi", "majority", 0.3),
            ("sgi", "coordinate_r2", 0.9),  # the coordinates' regression: not drawn, as before
        ]
    )
    assert [axis for axis, _ in probe_panels(summary)] == ["test F1"]
    fig = probe_bars(summary)
    assert [t.name for t in fig.data] == ["sgi"]
    assert list(fig.data[0].x) == ["overall", "agent localization"]
    assert fig.layout.yaxis.title.text == "test F1" and "yaxis2" not in fig.layout
    assert fig.layout.title.text == "Probe F1 per category (95% CIs over seeds)"
    assert {s.name for s in fig.layout.shapes} == {"random init 0.750", "majority class 0.300"}
    assert not fig.layout.annotations  # no panel titles for one panel


def test_an_atari_result_of_format_2_leads_its_f1_panel_with_the_headline():
    summary = _summary(
        [
            ("sgi", "headline_f1", 0.62),
            ("sgi", "overall", 0.7),
            ("sgi", "random_init", 0.5),
            ("sgi", "cosine", 0.4),
            ("sgi", "cosine_random_init", 0.5),
        ]
    )
    fig = probe_bars(summary)
    f1, cosines = fig.data
    assert list(f1.x) == ["headline: category mean", "overall"] and f1.xaxis == "x"
    assert list(cosines.x) == ["encoder", "random init"] and cosines.xaxis == "x2"
    assert fig.layout.yaxis.title.text == "test F1"
    assert fig.layout.yaxis2.title.text == "mean pairwise cosine"
    line = next(s for s in fig.layout.shapes if s.name == "random init 0.500")
    assert (line.xref, line.x0, line.x1) == ("x", 0.5, 1.5)  # over the overall group
    assert [a.text for a in fig.layout.annotations] == [
        "F1, classified labels",
        "collapse (projection)",
    ]


def test_an_r2_only_summary_never_draws_an_f1_axis():
    """Freeway's labels are all read by regression: R^2 alone, its baseline across the panel
    when the headline group is absent."""
    summary = _summary([("g", "r2_coordinate", 0.77), ("g", "random_init_r2", 0.38)])
    fig = probe_bars(summary)
    assert [axis for axis, _ in probe_panels(summary)] == ["held-out R²"]
    assert fig.layout.yaxis.title.text == "held-out R²"
    (line,) = fig.layout.shapes
    assert (line.xref, line.x0, line.x1) == ("x domain", 0, 1)


def test_no_results_is_a_sentence():
    fig = probe_bars(pd.DataFrame(columns=["objective", "metric", "value", "lower", "upper"]))
    assert not fig.data and "sgi-lab probe" in fig.layout.annotations[0].text


def test_the_probe_curve_reads_the_r2_headline_where_the_curves_have_it():
    curves = pd.DataFrame(
        {
            "run": ["a", "a"],
            "game": ["minatar/asterix"] * 2,
            "step": [0, 100],
            "overall": [None, None],
            "state_r2": [0.5, 0.7],
        }
    )
    fig = probe_curve_figure(curves)
    assert list(fig.data[0].y) == [0.5, 0.7]
    assert fig.layout.yaxis.title.text == "held-out R²"
    assert "R²" in fig.layout.title.text
    atari = curves.drop(columns="state_r2").assign(overall=[0.3, 0.4], coordinate_r2=0.9)
    fig = probe_curve_figure(atari)
    assert list(fig.data[0].y) == [0.3, 0.4] and fig.layout.yaxis.title.text == "test F1"
    assert probe_curve_figure(atari, "coordinate_r2").layout.yaxis.title.text == "held-out R²"


# -- pretraining's probe panels (``probe_every``) ----------------------------------------------


def _pretraining_rows(r2: bool, f1: bool) -> list[dict]:
    rows = []
    for step in (0, 50, 100):
        row = {"step": step, "losses/total": 1.0 / (step + 1), "charts/cosine_similarity": 0.5}
        if r2:
            row |= {"probe/headline": step / 200, "probe/r2": step / 200, "probe/r2_counter": -0.1}
            row |= {"probe/cosine_projection": 0.7}
        if f1:
            row["probe/f1"] = 0.9
        rows.append(row)
    return rows


def _panels(fig) -> dict[str, tuple[str, list]]:
    """``{panel title: (y-axis title, y values)}`` of a one-trace-per-panel figure."""
    titles = [a.text for a in fig.layout.annotations]
    out = {}
    for i, trace in enumerate(fig.data):
        axis = fig.layout[f"yaxis{i + 1 if i else ''}"]
        out[titles[i]] = (axis.title.text, list(trace.y))
    return out


def test_probe_panel_keys_put_the_r2_headline_where_the_f1_was():
    keys = list(PRETRAIN_CURVES)
    at = keys.index("probe/f1")
    minatar = probe_panel_keys(keys, {"probe/r2", "probe/f1", "losses/total"})
    assert minatar[at : at + 2] == ["probe/r2", "probe/f1"] and len(minatar) == len(keys) + 1
    assert probe_panel_keys(minatar, {"probe/r2", "probe/f1"}) == minatar  # idempotent
    freeway = probe_panel_keys(keys, {"probe/r2"})  # no classified label: no F1 logged
    assert freeway[at] == "probe/r2" and "probe/f1" not in freeway
    assert probe_panel_keys(keys, {"probe/f1"}) == keys  # Atari: as before
    assert probe_panel_keys(["losses/total"], {"probe/r2"}) == ["losses/total"]  # not asked
    assert probe_panel_keys(["probe/headline"], {"probe/r2"}) == []  # MinAtar: it is probe/r2
    assert probe_panel_keys(["probe/headline"], {"probe/f1"}) == ["probe/headline"]  # Atari


def test_pretraining_curves_of_a_minatar_run_draw_r2_and_f1_on_their_own_axes():
    fig = training_curves(_pretraining_rows(r2=True, f1=True), PRETRAIN_CURVES, title="t")
    panels = _panels(fig)
    assert panels["probe R² (state labels, headline)"] == ("R²", [0.0, 0.25, 0.5])
    assert panels["probe F1 (AtariARI state, overall)"] == ("F1", [0.9, 0.9, 0.9])
    titles = list(panels)
    assert titles.index("probe R² (state labels, headline)") == (
        titles.index("latent cosine similarity") + 1
    )
    # Freeway: R^2 alone, and no "not logged" note for an F1 it cannot have
    fig = training_curves(_pretraining_rows(r2=True, f1=False), PRETRAIN_CURVES, title="t")
    assert "probe R² (state labels, headline)" in _panels(fig)
    assert "probe F1" not in fig.layout.title.text
    # Atari (F1 only): as before
    fig = training_curves(_pretraining_rows(r2=False, f1=True), PRETRAIN_CURVES)
    assert ("F1", [0.9, 0.9, 0.9]) in _panels(fig).values()
    assert not any("R²" in t for t in _panels(fig))


def test_every_probe_metric_gets_its_own_unit_on_its_axis():
    fig = training_curves(_pretraining_rows(r2=True, f1=True), columns=3)
    units = {
        t.name: fig.layout[f"yaxis{i + 1 if i else ''}"].title.text for i, t in enumerate(fig.data)
    }
    assert "probe/headline" not in units  # the same R^2 as probe/r2 here, not drawn twice
    assert units["probe/r2"] == "R²" and units["probe/r2_counter"] == "R²"
    assert units["probe/cosine_projection"] == "cosine" and units["probe/f1"] == "F1"
    assert metric_axis_title("probe/r2_coordinate") == "held-out R² (linear probe)"
    assert metric_axis_title("probe/f1_miscellaneous") == "F1 (linear probe)"
    assert metric_axis_title("losses/spr") == "loss" and metric_axis_title("x/y") == "x/y"


def test_the_live_probe_panel_turns_to_r2_at_a_minatar_runs_first_probe():
    curves = LiveCurves(PRETRAIN_CURVES, title="pretraining x")
    at = list(PRETRAIN_CURVES).index("probe/f1")
    axis = f"yaxis{at + 1}"
    assert curves.figure.layout[axis].title.text == "F1"
    rows = _pretraining_rows(r2=True, f1=True)
    curves.update({"step": 10, "losses/total": 0.5})  # no probe yet: the panel waits as F1
    assert curves.keys[at] == "probe/f1"
    for row in rows:
        curves.update(row)
    layout = curves.figure.layout
    assert curves.keys[at] == "probe/r2" and curves.figure.data[at].name == "probe/r2"
    assert layout[axis].title.text == "R²"
    assert list(curves.figure.data[at].y) == [0.0, 0.25, 0.5]
    texts = [a.text for a in layout.annotations]
    assert "probe R² (state labels, headline)" in texts
    assert "probe F1 (AtariARI state, overall)" not in texts
    assert not any(a.name and "probe" in a.name for a in layout.annotations)  # no "no probe yet"
    final = curves.finish()  # the static figure keeps the F1 beside
    assert {"probe R² (state labels, headline)", "probe F1 (AtariARI state, overall)"} <= set(
        _panels(final)
    )
    atari = LiveCurves(PRETRAIN_CURVES)
    atari.update(_pretraining_rows(r2=False, f1=True)[0])
    assert atari.keys == list(PRETRAIN_CURVES)  # an Atari run's panel stays F1
