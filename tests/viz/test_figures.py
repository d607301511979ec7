"""Training, representation and goal-reward figures, and the computations behind them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
import torch
from conftest import write_notebook

from sgi_lab import notebook, viz
from sgi_lab.analysis import goals, representations
from sgi_lab.data import TransitionStoreWriter
from sgi_lab.data.store import TransitionStore


@pytest.fixture
def small_store(tmp_path):
    """Two episodes of 30 and 20 steps; frame t of an episode is filled with the value 4 t, so the
    pixel distance to the episode's first frame is exactly 4 t."""
    writer = TransitionStoreWriter.create(
        tmp_path / "store", game="Pong", source="synthetic", num_actions=6, chunk_size=16
    )
    for length in (30, 20):
        for t in range(length):
            frame = np.full((84, 84), 4 * t, np.uint8)
            frame[t % 84, :] = 255 - 4 * t  # a moving line, so latents differ over time
            writer.append(frame, t % 6, float(t % 7 == 0), t == length - 1, t == 0)
    return TransitionStore(writer.close())


@pytest.fixture(scope="module")
def model():
    return representations.random_model(6, "nature", seed=0)


# -- computations -------------------------------------------------------------------------------


def test_mean_pairwise_cosine_by_hand():
    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # pairs: (1,2) 0, (1,3) 1/sqrt2, (2,3) 1/sqrt2 -> mean over the 3 pairs
    expected = (0 + 2 / np.sqrt(2)) / 3
    assert representations.mean_pairwise_cosine(x) == pytest.approx(expected, abs=1e-6)
    assert representations.mean_pairwise_cosine(np.ones((4, 3))) == pytest.approx(1.0)


def test_row_table_and_sample_rows(small_store):
    rows = representations.sample_rows(small_store, 10, seed=1)
    assert len(set(rows)) == 10 and np.all(np.diff(rows) > 0)
    table = representations.row_table(small_store, np.array([0, 29, 30, 35]))
    assert table["episode"].tolist() == [0, 0, 1, 1]
    assert table["step"].tolist() == [0, 29, 0, 5]
    only_second = representations.sample_rows(small_store, 100, episodes=[1])
    assert only_second.tolist() == list(range(30, 50))


def test_start_distance_measures_a_reset_frame_episode_from_its_second_frame(tmp_path):
    """With zero no-op starts, the frame stored at reset is the emulator's, shaded unlike the
    game (Pong: 37 gray levels from every later frame): that episode is measured from its second
    frame, named in attrs and in the figure, and the median over episodes ignores it."""
    writer = TransitionStoreWriter.create(
        tmp_path / "store", game="Pong", source="synthetic", num_actions=6, chunk_size=64
    )
    for episode in range(5):
        for t in range(20):
            frame = np.full((84, 84), 100, np.uint8)
            frame[t, :] = 200  # the ball: a line that moves, one gray level of change on average
            if episode == 3 and t == 0:
                frame[:] = 63  # the reset frame
            writer.append(frame, 0, 0.0, t == 19, t == 0)
    store = TransitionStore(writer.close())
    df = representations.start_distance(store)
    assert df.attrs["reset_frame_episodes"] == [3]
    odd = df[df["episode"] == 3]
    assert odd["step"].min() == 1 and odd["pixel_distance"].max() < 3  # not 37 everywhere
    assert df["pixel_distance"].max() < 3
    fig = viz.start_distance_figure({"random": df})
    assert (
        "reset frame" in fig.layout.title.text and "random: episode(s) 3" in fig.layout.title.text
    )
    assert fig.data[0].name == "random median"


def test_start_distance_is_the_pixel_distance_to_the_first_frame(small_store):
    df = representations.start_distance(small_store, stride=1)
    assert len(df) == 50
    # frames are 4 t everywhere except one line of 255 - 4 t (row t) and the first frame's line
    t = 10
    got = df[(df["episode"] == 0) & (df["step"] == t)]["pixel_distance"].item()
    first = np.full((84, 84), 0, np.int16)
    first[0, :] = 255
    frame = np.full((84, 84), 4 * t, np.int16)
    frame[t, :] = 255 - 4 * t
    assert got == pytest.approx(np.abs(frame - first).mean())


@pytest.mark.usefixtures("one_thread")
def test_encode_rows_shapes_and_embedding(small_store, model):
    rows = np.arange(0, 50, 5)
    z = representations.encode_rows(model, small_store, rows)
    y = representations.encode_rows(model, small_store, rows, projected=True)
    assert z.shape == (10, model.latent_size) and y.shape == (10, model.projection_size)
    assert representations.embed_2d(z, "pca").shape == (10, 2)
    df = representations.embedding_frame(model, small_store, rows, "random", method="umap")
    assert list(df.columns[:2]) == ["x", "y"] and len(df) == 10
    assert np.isfinite(df[["x", "y"]].to_numpy()).all()
    # UMAP's numba threads leave torch's count as it was (it had set every core: a suite worker
    # then ran its later tests on two threads beside the other worker, up to 10x slower)
    assert torch.get_num_threads() == 1


def test_diversity_curves_read_metrics(tmp_path):
    for name, values in {"a": [0.9, 0.8], "b": [0.5]}.items():
        folder = tmp_path / name
        folder.mkdir()
        lines = [
            json.dumps({"step": 10 * (i + 1), "charts/cosine_similarity": v})
            for i, v in enumerate(values)
        ]
        (folder / "metrics.jsonl").write_text("\n".join([*lines, json.dumps({"step": 99})]) + "\n")
    df = representations.diversity_curves([tmp_path / "a", tmp_path / "b", tmp_path / "missing"])
    assert df.groupby("run")["cosine_similarity"].apply(list).to_dict() == {
        "a": [0.9, 0.8],
        "b": [0.5],
    }
    fig = viz.diversity_figure(df)
    assert [t.name for t in fig.data] == ["a", "b"]


def test_diversity_figure_without_runs_says_why_it_is_empty():
    fig = viz.diversity_figure(representations.diversity_curves([]))
    assert not fig.data
    assert "diversity_runs" in fig.layout.annotations[0].text


def test_future_goal_without_noise_is_reached_on_its_own_row(small_store, model):
    rows = goals.trajectory_rows(small_store, episode=0, start=0, length=25)
    goal = goals.make_goal(model, small_store, rows, "future", offset=12, alpha=0.0)
    assert goal.row == 12
    df = goals.goal_analysis(model, small_store, rows, goal)
    assert df.loc[df["row"] == 12, "similarity"].item() == pytest.approx(1.0, abs=1e-4)
    # potential-based: the rewards telescope to s(z_T) - s(z_0), times the scale
    total = df["goal_reward"].sum()
    assert total == pytest.approx(
        10 * (df["similarity"].iloc[-1] - df["similarity"].iloc[0]), abs=1e-3
    )
    assert {f"q_{a}" for a in range(6)} <= set(df.columns)
    nearest = goals.nearest_to_goal(model, small_store, goal, k=3)
    assert nearest["row"].iloc[0] == 12 and nearest["cosine"].iloc[0] == pytest.approx(
        1.0, abs=1e-4
    )


def test_a_collapsed_encoder_is_named_in_the_goal_figures_and_the_notebook_line(small_store):
    """An encoder blind to its input (first conv's weights zeroed: every frame maps to one
    latent) gives cosine 1 to the goal everywhere and a goal reward of 0: the trajectory figure
    says so in red across the reward panel, the nearest frames' title calls the ranking noise,
    and the notebook's line warns; a working encoder gets the cosine range instead."""
    blind = representations.random_model(6, "nature", seed=0)
    with torch.no_grad():
        blind.encoder.layers[0].weight.zero_()
    rows = goals.trajectory_rows(small_store, 0, 0, 20)
    goal = goals.make_goal(blind, small_store, rows, "future", offset=8)
    analysis = goals.goal_analysis(blind, small_store, rows, goal)
    assert np.ptp(analysis["cosine"]) < 1e-6 and analysis["goal_reward"].abs().max() < 1e-5
    fig = viz.goal_trajectory_figure(analysis)
    [warning] = [a for a in fig.layout.annotations if a.name == "collapsed encoder"]
    assert "collapsed encoder" in warning.text and warning.font.color == "#d62728"
    assert (warning.xref, warning.yref) == ("x2 domain", "y2 domain")  # the reward panel
    nearest = goals.nearest_to_goal(blind, small_store, goal, k=3)
    title = viz.nearest_frames_figure(small_store, nearest, goal).layout.title.text
    assert "a collapsed encoder: this ranking is rounding noise" in title
    line = goals.collapse_warning(analysis, nearest)
    assert line.startswith("warning: collapsed encoder: every state on the trajectory has ")
    assert "\n" not in line and goals.goal_summary(analysis, nearest)["cosine_spread"] < 1e-4
    # A working encoder: the range, no warning anywhere.
    model = representations.random_model(6, "nature", seed=0)
    goal = goals.make_goal(model, small_store, rows, "future", offset=8)
    analysis = goals.goal_analysis(model, small_store, rows, goal)
    assert analysis.loc[analysis["row"] == goal.row, "cosine"].item() == pytest.approx(
        1.0, abs=1e-5
    )
    fig = viz.goal_trajectory_figure(analysis)
    assert not [a for a in fig.layout.annotations if a.name == "collapsed encoder"]
    assert goals.collapse_warning(analysis).startswith("cosine to the goal along the trajectory: ")


def test_collapse_note_threshold():
    from sgi_lab.viz.goal_rewards import collapse_note

    assert collapse_note([0.99990, 0.99999], "frame") != ""  # spread 9e-5
    assert collapse_note([0.9998, 0.99999], "frame") == ""  # spread 1.9e-4
    assert collapse_note([1.0], "frame") == "" and collapse_note([1.0, np.nan], "frame") == ""


def test_goal_kinds_and_noise(small_store, model):
    rows = goals.trajectory_rows(small_store, 0, 0, 10)
    other = goals.make_goal(model, small_store, rows, "other_episode", seed=3)
    assert 30 <= other.row < 50
    noise = goals.make_goal(model, small_store, rows, "noise", alpha=0.0)
    assert noise.row is None
    plain = goals.make_goal(model, small_store, rows, "future", offset=5, alpha=0.0)
    noisy = goals.make_goal(model, small_store, rows, "future", offset=5, alpha=0.5)
    assert not torch.allclose(plain.latent, noisy.latent)
    assert float(noisy.latent.min()) == pytest.approx(0.0) and float(
        noisy.latent.max()
    ) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="alpha"):
        goals.make_goal(model, small_store, rows, alpha=1.5)
    with pytest.raises(ValueError, match="kind"):
        goals.goal_row(small_store, rows, "sideways")


def test_goal_explorer_callbacks_redraw(small_store, model):
    rows = goals.trajectory_rows(small_store, 0, 0, 20)
    explorer = goals.GoalExplorer(model, small_store, rows, offset=5, bank_size=40, k=3)
    before = explorer.analysis["similarity"].to_numpy().copy()
    title = explorer.trajectory_view.figure.layout.title.text
    explorer.offset.value = 15  # the widget's callback runs as on a drag
    assert explorer.goal.row == 15
    assert not np.allclose(explorer.analysis["similarity"].to_numpy(), before)
    assert explorer.trajectory_view.figure.layout.title.text != title
    explorer.kind.value = "noise"
    assert explorer.offset.disabled and explorer.goal.row is None
    # noise goal: the frames figure shows only the nearest frames (no goal frame)
    assert len(explorer.frames_view.figure.data) == 3


# -- figures ------------------------------------------------------------------------------------


def test_live_curves_update_and_finish():
    curves = viz.LiveCurves(["losses/total", "losses/spr", "never"], columns=2)
    for step in (5, 10):
        curves.update({"step": step, "losses/total": 1.0 / step, "losses/spr": float("nan")})
    total = curves.figure.data[0]
    assert list(total.x) == [5, 10] and list(total.y) == [0.2, 0.1]
    assert not curves.figure.data[1].x  # NaN points are skipped
    final = curves.finish()
    assert [t.name for t in final.data] == ["losses/total"]  # keys without data are dropped
    assert len(curves.frame) == 2


def test_live_curves_of_a_run_finished_earlier_draw_its_recorded_curves(tmp_path, capsys):
    """Re-running a notebook into a finished run trains nothing: the live panels say so and
    show the run's recorded curves instead of staying empty."""
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": s, "losses/total": 1.0 / s, "charts/samples_per_s": 100.0} for s in (5, 10)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    curves = viz.LiveCurves(viz.PRETRAIN_CURVES, title="pretraining x")
    assert curves.show_for(run) is False  # no status: a new run, empty panels
    assert not curves.figure.data[0].x

    (run / "status.json").write_text(json.dumps({"state": "finished", "step": 10}))
    curves = viz.LiveCurves(viz.PRETRAIN_CURVES, title="pretraining x")
    assert curves.show_for(run) is True
    assert list(curves.figure.data[0].y) == [0.2, 0.1]
    assert "finished earlier: showing its recorded curves" in curves.figure.layout.title.text
    assert "finished earlier" in capsys.readouterr().out
    final = curves.finish()
    assert [a.text for a in final.layout.annotations] == ["total loss", "throughput (samples/s)"]
    assert final.layout.yaxis.title.text == "loss" and final.layout.yaxis2.title.text == "samples/s"
    # four columns: the static figure that stays takes the cell's whole width
    assert final.layout.width is None and final.layout.autosize


def test_live_curves_never_wait_on_anywidget(monkeypatch):
    """anywidget (0.11) gives a FigureWidget 2 s to load plotly's 5 MB bundle; on a loaded
    machine the pretraining's live curves went blank. They are a display handle redrawn in
    place, with their traces from the first draw on, whether or not anywidget is installed."""
    from sgi_lab.viz import live
    from sgi_lab.viz.training import STATIC_FIGURES_ENV

    monkeypatch.delenv(STATIC_FIGURES_ENV, raising=False)
    monkeypatch.setattr(live, "figure_widget_available", lambda: True)
    assert live.LiveFigure().widget is not None  # a FigureWidget where one is asked for
    drawn = []

    def show(fig, handle=None):
        drawn.append((handle, fig.to_dict()))
        return handle or "the display handle"

    monkeypatch.setattr(live, "_show", show)
    curves = viz.LiveCurves(["losses/total", "losses/spr"], columns=2, min_interval_s=0)
    assert type(curves.figure) is go.Figure
    curves.show()
    curves.update({"step": 5, "losses/total": 0.2, "losses/spr": -1.5})
    final = curves.finish()
    assert [handle for handle, _ in drawn] == [None, *["the display handle"] * 2]
    assert [list(t["x"]) for t in drawn[0][1]["data"]] == [[], []]  # the empty panels first
    assert [list(t["y"]) for t in drawn[1][1]["data"]] == [[0.2], [-1.5]]  # redrawn in place
    assert drawn[2][1] == final.to_dict()  # the final figure stays where the curves were


def test_four_column_figures_take_the_whole_cell_width():
    """A 4-column figure at 960 px filled 64% of a 1,488 px cell (a 1,920 px
    window, measured in JupyterLab under Chromium); without a set width plotly fills the cell."""
    from sgi_lab.viz.training import figure_width, widget_width

    assert figure_width(4) == {"autosize": True, "width": None}
    assert figure_width(3) == {"width": 850} and figure_width(1, least=640) == {"width": 640}
    assert figure_width(3, per_column=420) == {"width": 960}  # at most FIGURE_MAX_WIDTH
    rows = [{"step": s, "losses/total": 1.0, "losses/spr": 2.0} for s in (1, 2)]
    assert viz.training_curves(rows, columns=4).layout.width is None
    assert viz.training_curves(rows, columns=2).layout.width == 600
    df = pd.DataFrame(
        [{"method": "a", "metric": m, "value": 0.5, "lower": 0.4, "upper": 0.6}
         for m in ("iqm", "median", "mean", "optimality_gap")]
    )  # fmt: skip
    assert viz.interval_plot(df).layout.width is None
    assert viz.interval_plot(df, metrics=["iqm", "mean"]).layout.width == 680
    assert widget_width(go.Figure()).layout.width == 960
    assert widget_width(go.Figure(layout={"width": 500})).layout.width == 500
    live = viz.LiveFigure(viz.training_curves(rows, columns=4))
    if live.widget is not None:  # a widget sizes itself before its cell has a width
        assert live.figure.layout.width == 960
        live.replace(viz.training_curves(rows, columns=4))
        assert live.figure.layout.width == 960


def test_live_curves_follow_a_metrics_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 1, "episode/return": -21.0}) + "\n")
    curves = viz.LiveCurves(["episode/return"])
    callback = curves.follow(path, every=2)
    callback(1, None)
    assert not curves.figure.data[0].x  # read only every 2nd call
    callback(2, None)
    assert list(curves.figure.data[0].y) == [-21.0]
    with open(path, "a") as fh:
        fh.write(json.dumps({"step": 2, "episode/return": -20.0}) + "\n")
    curves.poll(path)
    assert list(curves.figure.data[0].y) == [-21.0, -20.0]


def test_training_curves_and_learning_curve():
    rows = [
        {"step": 1, "losses/total": 2.0, "episode/return": -21.0},
        {"step": 2, "losses/total": 1.0},
        {"step": 3, "episode/return": -19.0},
    ]
    fig = viz.training_curves(rows, ["losses/total", "missing"])
    assert [t.name for t in fig.data] == ["losses/total"]
    two_runs = pd.DataFrame(rows).assign(run=["a", "b", "a"])
    fig = viz.training_curves(two_runs, ["losses/total"], runs="run")
    assert [t.name for t in fig.data] == ["losses/total (a)", "losses/total (b)"]
    learning = viz.learning_curve(rows, window=2, reference={"human": 14.6})
    assert list(learning.data[0].y) == [-21.0, -19.0]
    assert list(learning.data[1].y) == [-21.0, -20.0]


def test_summary_table_formats_values():
    fig = viz.summary_table({"mean": 1.234567, "episodes": 3, "game": "Pong"})
    assert list(fig.data[0].cells.values[1]) == ["1.235", "3", "Pong"]
    named = viz.summary_table({"charts/cosine_similarity": 0.99, "steps": 30})
    assert list(named.data[0].cells.values[0]) == ["latent cosine similarity", "steps"]
    assert named.layout.height < 120  # as tall as two rows, not a blank gap


def test_representation_and_dataset_figures(small_store, model):
    rows = np.arange(0, 50, 2)
    emb = pd.concat(
        [
            representations.embedding_frame(model, small_store, rows, "A", method="pca"),
            representations.embedding_frame(model, small_store, rows, "B", method="pca"),
        ]
    )
    fig = viz.embedding_grid(emb)
    # step and reward: one trace per encoder; action (3 values) and episode (2): one per value
    assert len(fig.data) == 2 * (1 + 3 + 1 + 2)
    assert fig.data[0].name == "A | step"
    distance = representations.start_distance(small_store)
    fig = viz.start_distance_figure({"s": distance})
    assert [t.name for t in fig.data] == ["s median", "s max", "s steps"]
    stores = {"one": small_store, "two": small_store}
    assert {t.name for t in viz.compare_stores_figure(stores).data} == {"one", "two"}
    table = viz.stores_table(stores)
    assert list(table.data[0].header.values) == ["", "one", "two"]


def test_goal_figures(small_store, model):
    rows = goals.trajectory_rows(small_store, 0, 0, 20)
    goal = goals.make_goal(model, small_store, rows, "future", offset=8)
    df = goals.goal_analysis(model, small_store, rows, goal)
    fig = viz.goal_trajectory_figure(df)
    names = [t.name for t in fig.data]
    assert names[:2] == ["similarity", "goal reward"] and names[-1] == "action taken"
    assert sum(n.startswith("Q(") for n in names) == 6
    assert len(fig.layout.shapes) == 3  # the goal's step marked on each panel
    nearest = goals.nearest_to_goal(model, small_store, goal, k=4)
    frames = viz.nearest_frames_figure(small_store, nearest, goal)
    assert len(frames.data) == 5 and "goal" in frames.layout.annotations[0].text
    # the context of "nearest": the cosine over every frame searched
    stats = nearest.attrs["searched_cosine"]
    assert stats["searched"] == len(small_store) and stats["min"] <= stats["median"]
    assert stats["max"] == pytest.approx(nearest["cosine"].iloc[0])
    assert f"over the {len(small_store):,} frames searched" in frames.layout.title.text


def test_nearest_cosines_near_one_are_said_to_say_little(small_store):
    from sgi_lab.viz.goal_rewards import searched_cosine_note

    near = {"searched": 2000, "min": 0.9991, "median": 0.9996, "max": 0.99991}
    assert searched_cosine_note(near).endswith("so 'nearest' says little for this encoder")
    spread = {"searched": 2000, "min": 0.2, "median": 0.6, "max": 0.95}
    assert "says little" not in searched_cosine_note(spread) and searched_cosine_note(None) == ""
    nearest = pd.DataFrame(
        {"row": [1, 2], "episode": [0, 0], "step": [1, 2], "cosine": [0.999991, 0.999984]}
    )
    titles = [a.text for a in viz.nearest_frames_figure(small_store, nearest).layout.annotations]
    assert titles[0].endswith("cos 0.999991") and titles[1].endswith("cos 0.999984")


def test_live_figure_replace():
    view = viz.LiveFigure(go.Figure(go.Scatter(y=[1], name="a")))
    view.replace(go.Figure([go.Bar(y=[1], name="b"), go.Bar(y=[2], name="c")]))
    assert [t.name for t in view.figure.data] == ["b", "c"]


def test_save_figure_and_record_results(tmp_path):
    path = notebook.save_figure(go.Figure(), tmp_path, "empty")
    assert path == tmp_path / "figures" / "empty.html" and path.exists()
    payload = notebook.record_results(tmp_path, {"a": np.float32(1.5), "b": np.arange(2)})
    assert payload == {"a": 1.5, "b": [0, 1]}
    assert json.loads((tmp_path / "results.json").read_text()) == payload


def test_recorded_results_show_as_a_short_table(tmp_path):
    """The last cell of a notebook shows a short table, not the raw dict with 16 digits."""
    from IPython.lib.pretty import pretty

    aggregates = [{"method": "m", "metric": "iqm", "value": 0.123456789}] * 150
    payload = notebook.record_results(
        tmp_path, {"eval_mean": -20.666666666666668, "aggregates": aggregates}
    )
    assert payload["aggregates"] == aggregates  # the dict itself is unchanged
    html = payload._repr_html_()
    assert "<td>-20.67</td>" in html and "<td>150 rows</td>" in html and "0.1234567" not in html
    text = pretty(payload)
    assert len(text.splitlines()) == 3 and "-20.67" in text


@pytest.mark.smoke
@pytest.mark.notebooks
def test_live_curves_leave_one_updated_output_in_an_executed_notebook(tmp_path):
    """Display-handle updates replace the figure (plotly's own display would append outputs)."""
    import nbformat
    import papermill

    write_notebook(
        tmp_path / "live.ipynb",
        "from sgi_lab import viz\n"
        "curves = viz.LiveCurves(['loss'], min_interval_s=0.0)\n"
        "curves.show()\n"
        "for step in range(1, 6):\n"
        "    curves.update({'step': step, 'loss': 1.0 / step})\n"
        "curves.finish();",
    )
    papermill.execute_notebook(
        str(tmp_path / "live.ipynb"), str(tmp_path / "out.ipynb"), progress_bar=False
    )
    outputs = nbformat.read(tmp_path / "out.ipynb", as_version=4).cells[0].outputs
    figures = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(figures) == 1
    trace = figures[0]["data"]["application/vnd.plotly.v1+json"]["data"][0]
    assert len(_plotly_array(trace["y"])) == 5


def _plotly_array(value):
    """A JSON figure's array: a list, or plotly's base64 typed array (``dtype``, ``bdata``)."""
    import base64

    if isinstance(value, dict):
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
    return np.asarray(value)


@pytest.mark.smoke
@pytest.mark.notebooks
def test_the_saved_notebook_shows_where_training_ended_not_a_stale_bar(tmp_path):
    """The progress line is one output updated in place: papermill saves its last state,
    "finished at step 5 of 5", where a tqdm widget saves "0% 0/5"."""
    import nbformat
    import papermill

    write_notebook(
        tmp_path / "live.ipynb",
        "from sgi_lab import viz\n"
        "curves = viz.LiveCurves(['loss'], min_interval_s=0.0, total=5, label='pretraining')\n"
        "curves.show()\n"
        "for step in range(1, 6):\n"
        "    curves.update({'step': step, 'loss': 1.0 / step})\n"
        "curves.finish();",
    )
    papermill.execute_notebook(
        str(tmp_path / "live.ipynb"), str(tmp_path / "out.ipynb"), progress_bar=False
    )
    outputs = nbformat.read(tmp_path / "out.ipynb", as_version=4).cells[0].outputs
    texts = [o["data"]["text/plain"] for o in outputs if list(o.get("data", {})) == ["text/plain"]]
    assert len(texts) == 1 and texts[0].startswith("pretraining: finished at step 5 of 5 in ")


def test_progress_line_says_step_of_total_and_rate(monkeypatch):
    from sgi_lab.viz import live

    clock = iter([0.0, 0.0, 10.0, 10.0, 10.0, 20.0, 20.0, 20.0, 20.0])
    monkeypatch.setattr(live.time, "monotonic", lambda: next(clock))
    curves = viz.LiveCurves(["loss"], total=200, label="pretraining")  # started at 0
    assert curves.progress_line() == "pretraining: starting, 200 steps"
    curves.update({"step": 20, "loss": 1.0})  # first row at t=10
    curves.update({"step": 120, "loss": 0.5})  # t=20: 100 steps in 10 s
    assert curves.progress_line() == "pretraining: step 120 of 200 (60%), 10.0 steps/s, 20 s"


def test_static_figures_env_switches_off_figure_widgets(monkeypatch):
    from sgi_lab.launch.notebook_runner import _environment
    from sgi_lab.viz.live import LiveCurves
    from sgi_lab.viz.training import STATIC_FIGURES_ENV, figure_widget_available

    monkeypatch.delenv(STATIC_FIGURES_ENV, raising=False)
    widgets = figure_widget_available()  # True where anywidget is installed
    with _environment({STATIC_FIGURES_ENV: "1"}):
        assert not figure_widget_available()
        curves = LiveCurves(["loss"])
        assert not isinstance(curves.figure, go.FigureWidget)
    assert STATIC_FIGURES_ENV not in os.environ  # restored
    assert figure_widget_available() == widgets


def test_load_encoders_puts_the_pretrained_model_first(small_store, monkeypatch):
    models = representations.load_encoders("", small_store, encoder="nature", seed=0)
    assert list(models) == ["random init (nature)"]
    pretrained = representations.random_model(6, "nature", 1)
    monkeypatch.setattr(representations, "load_pretrained_model", lambda run_dir: pretrained)
    models = representations.load_encoders("runs/pre", small_store, encoder="nature")
    assert list(models) == ["pretrained: pre", "random init (nature)"]
    assert models["pretrained: pre"] is pretrained


def test_goal_summary():
    analysis = pd.DataFrame(
        {"goal_reward": [np.nan, 1.0, -0.5, 2.0], "similarity": [0.1, 0.4, 0.3, 0.9]}
    )
    nearest = pd.DataFrame({"cosine": [0.95, 0.5]})
    assert goals.goal_summary(analysis, nearest) == {
        "goal_reward_sum": 2.5,
        "similarity_start": 0.1,
        "similarity_max": 0.9,
        "positive_reward_share": pytest.approx(2 / 3),
        "nearest_cosine": 0.95,
    }


# -- figures that explain themselves ------------------------------------------------------------

PONG_ACTIONS = ["NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE"]


def _annotations(fig) -> list[str]:
    return [a.text for a in fig.layout.annotations]


def _axis_titles(fig, axis: str) -> list[str]:
    """Titles of every x (or y) axis of a figure, in subplot order."""
    layout = fig.to_plotly_json()["layout"]
    keys = sorted((k for k in layout if k.startswith(axis + "axis")), key=lambda k: (len(k), k))
    return [(layout[k].get("title") or {}).get("text") for k in keys]


def test_action_names_come_from_ale_py():
    from sgi_lab.envs import action_names
    from sgi_lab.viz.common import action_labels

    assert list(action_names("Pong")) == PONG_ACTIONS
    assert len(action_names("Pong", full_action_space=True)) == 18
    assert action_labels("Pong", 6) == PONG_ACTIONS
    assert action_labels("Pong", 18)[2] == "UP"  # the full action set
    assert action_labels("Pong", 4) == ["a0", "a1", "a2", "a3"]  # no action set of that size
    assert action_labels("NotAGame", 2) == ["a0", "a1"] and action_labels(None, 1) == ["a0"]


def test_store_figures_title_their_axes_and_name_actions(small_store):
    fig = viz.store_summary_figure(small_store)
    assert all(_axis_titles(fig, "x")) and all(_axis_titles(fig, "y"))
    assert list(fig.data[0].x) == PONG_ACTIONS
    comparison = viz.compare_stores_figure({"one": small_store})
    assert list(comparison.data[0].x) == PONG_ACTIONS
    assert all(_axis_titles(comparison, "x")) and all(_axis_titles(comparison, "y"))
    distance = viz.start_distance_figure(representations.start_distance(small_store))
    assert all(_axis_titles(distance, "x")) and all(_axis_titles(distance, "y"))


def test_the_store_histograms_count_whole_episodes_in_bins_centred_on_scores(tmp_path):
    """Pong-like returns -21 and -20 and a last episode the collection cut off (-4 over 4
    steps): the cut one is left out (and said so), and the return bins centre on -21 and -20,
    never on a score below the game's lowest."""
    writer = TransitionStoreWriter.create(
        tmp_path / "s", game="Pong", source="synthetic", num_actions=6, chunk_size=16
    )
    episodes = ([-1.0] * 21, [-1.0] * 21 + [1.0], [-1.0] * 4)  # the last one cut off
    for e, rewards in enumerate(episodes):
        for t, reward in enumerate(rewards):
            terminal = e < 2 and t == len(rewards) - 1
            writer.append(np.zeros((84, 84), np.uint8), 0, reward, terminal, t == 0)
    store = TransitionStore(writer.close())
    fig = viz.store_summary_figure(store)
    returns, lengths = fig.data[1], fig.data[2]
    assert sorted(returns.x) == [-21.0, -20.0] and sorted(lengths.x) == [21, 22]
    assert (returns.xbins.start, returns.xbins.size) == (-21.5, 1.0)
    titles = [a.text for a in fig.layout.annotations]
    assert "returns of whole episodes (1 unfinished left out)" in titles
    both = viz.compare_stores_figure({"cut": store, "same": store})
    assert [sorted(t.x) for t in both.data[1:3]] == [[-21.0, -20.0], [21, 22]]
    assert both.data[1].xbins.start == -21.5
    assert "returns of whole episodes (2 unfinished left out)" in _annotations(both)
    from sgi_lab.viz.datasets import integer_bins

    assert integer_bins(np.array([760, 1000])) == {"start": 755.5, "end": 1004.5, "size": 9.0}
    assert integer_bins(np.array([0.5, 2.0])) is None  # not whole numbers: plotly's bins


def test_frame_strips_keep_square_pixels(small_store):
    strip = viz.frame_strip(small_store, episode=0, count=3, stride=5)
    layout = strip.layout
    for i, suffix in enumerate(["", "2", "3"]):
        assert layout[f"yaxis{suffix}"].scaleanchor == f"x{suffix}", i
        assert layout[f"yaxis{suffix}"].scaleratio == 1
    frames = viz.frames_figure(small_store.gather_frames(np.array([0, 1])), ["a", "b"])
    assert frames.layout.yaxis2.scaleanchor == "x2"
    missing = viz.frame_strip(small_store, episode=7)
    assert not missing.data and "no episode 7" in _annotations(missing)[0]


def test_training_figures_title_axes_and_say_when_empty():
    rows = [{"step": 1, "losses/total": 2.0, "charts/sps": 10.0}]
    fig = viz.training_curves(rows, ["losses/total", "charts/sps"])
    assert _axis_titles(fig, "y")[:2] == ["loss", "steps/s"]
    assert [a.text for a in fig.layout.annotations] == ["total loss", "speed (agent steps/s)"]
    assert _axis_titles(fig, "x")[0] == "step"
    live = viz.LiveCurves(["losses/total"], columns=1)
    assert _axis_titles(live.figure, "y")[0] == "loss"
    empty = viz.training_curves([{"step": 1}], ["losses/total"])
    assert _annotations(empty) == ["no metrics logged yet"]
    nothing = viz.learning_curve([], reference={"human": 14.6})
    assert _annotations(nothing) == ["no episode has finished yet"]
    assert not nothing.layout.shapes  # no reference line over empty axes
    curve = viz.learning_curve([{"step": 5, "episode/return": -21.0}])
    assert curve.layout.xaxis.title.text == "agent step"
    assert curve.layout.yaxis.title.text == "episode return (raw score)"
    # the demo's one episode: shown from step 0 and said, not a lone dot on an axis of 961-963
    one = viz.learning_curve([{"step": 962, "episode/return": -21.0}])
    assert one.layout.xaxis.rangemode == "tozero"
    assert _annotations(one) == ["1 episode finished in this run"]


def test_goal_figure_names_actions_and_skips_the_goal_line_for_noise(small_store, model):
    rows = goals.trajectory_rows(small_store, 0, 0, 20)
    future = goals.make_goal(model, small_store, rows, "future", offset=8)
    fig = viz.goal_trajectory_figure(goals.goal_analysis(model, small_store, rows, future))
    assert [t.name for t in fig.data if t.name.startswith("Q(")] == [
        f"Q({a})" for a in PONG_ACTIONS
    ]
    assert _axis_titles(fig, "y") == ["similarity (0 to 1)", "goal reward", "expected return"]
    assert len(fig.layout.shapes) == 3
    noise = goals.make_goal(model, small_store, rows, "noise")
    df = goals.goal_analysis(model, small_store, rows, noise)
    df.attrs["goal_row"] = int(rows[8])  # even a stale row must not draw a goal line
    assert not viz.goal_trajectory_figure(df).layout.shapes
    df.attrs["goal_kind"] = "other_episode"  # another episode's state has no step here
    assert not viz.goal_trajectory_figure(df).layout.shapes


def test_live_figure_widget_clears_a_line_the_new_figure_lacks():
    """The browser is told to drop shapes the new figure lacks (the goal explorer's goal line
    stayed drawn when the goal moved to another episode)."""
    view = viz.LiveFigure()
    if view.widget is None:
        pytest.skip("no FigureWidget here (anywidget missing or static figures asked for)")
    view.show()
    with_line = go.Figure(go.Scatter(y=[1, 2]))
    with_line.add_vline(x=1)
    view.replace(with_line)
    sent = []
    send = view.figure._send_relayout_msg
    view.figure._send_relayout_msg = lambda data, **kw: (sent.append(data), send(data, **kw))
    view.replace(go.Figure(go.Scatter(y=[3, 4])))
    assert {"shapes": None} in sent
    assert not view.figure.layout.shapes


def test_embedding_legends_name_actions_and_episodes(small_store, model):
    rows = np.arange(0, 50)
    emb = representations.embedding_frame(model, small_store, rows, "A", method="pca")
    fig = viz.embedding_grid(emb, colors=("action", "episode"))
    legend = [t.name for t in fig.data if t.showlegend is not False]
    assert legend == [*PONG_ACTIONS, "0", "1"]  # the run's name is the column title, once
    # two legends, one per colouring, each beside its row: action and episode never mix
    assert {t.legend or "legend" for t in fig.data if t.name in PONG_ACTIONS} == {"legend"}
    assert {t.legend for t in fig.data if t.name in ("0", "1")} == {"legend2"}
    assert (fig.layout.legend.title.text, fig.layout.legend2.title.text) == ("action", "episode")
    assert fig.layout.legend.y == 1.0 and fig.layout.legend2.y == 0.5
    action_colours = {t.marker.color for t in fig.data[: len(PONG_ACTIONS)]}
    episode_colours = {t.marker.color for t in fig.data if t.name in ("0", "1")}
    assert not action_colours & episode_colours, "actions and episodes share colours"
    assert "action NOOP" in fig.data[0].text[0]
    empty = viz.embedding_grid(emb.iloc[0:0])
    assert _annotations(empty) == ["no states were embedded"]
    rewards = viz.embedding_grid(emb, colors=("reward",))
    scale = rewards.data[0].marker.colorscale
    assert scale[1][1] == "#8c8c8c"  # reward 0 is gray, not white on a light background


def test_live_figure_replace_drops_stale_shapes(capsys):
    view = viz.LiveFigure()
    view.replace(go.Figure(go.Scatter(y=[1])).add_vline(x=1))
    view.show()
    view.replace(go.Figure(go.Scatter(y=[2])))
    assert not view.figure.layout.shapes and list(view.figure.data[0].y) == [2]


def test_making_an_env_prints_no_ale_banner(capfd):
    from sgi_lab.envs import make_env

    make_env("Pong", seed=0).reset()
    err = capfd.readouterr().err
    assert "A.L.E" not in err and "Stella" not in err


def _metrics_run(folder, rows):
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_runs_side_by_side_one_colour_per_run(tmp_path):
    """Several runs' curves overlaid, labelled by folder (agents of a population, whose
    folders share a name pattern, by parent/name)."""
    from sgi_lab.viz.training import runs_metrics

    a = _metrics_run(
        tmp_path / "a" / "Pong__s0", [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0}]
    )
    b = _metrics_run(tmp_path / "b" / "Pong__s0", [{"step": 1, "loss": 3.0}])
    empty = tmp_path / "c"
    empty.mkdir()
    df = runs_metrics([a, b, empty])
    assert list(df["run"]) == ["a/Pong__s0", "a/Pong__s0", "b/Pong__s0"]
    fig = viz.compare_runs([a, b, empty], ["loss"])
    assert [t.name for t in fig.data] == ["loss (a/Pong__s0)", "loss (b/Pong__s0)"]
    assert fig.data[0].line.color != fig.data[1].line.color
    assert list(fig.data[1].y) == [3.0] and fig.layout.title.text == "2 runs side by side"
    assert list(runs_metrics({"mine": a})["run"]) == ["mine", "mine"]
    nothing = viz.compare_runs([empty])
    assert not nothing.data and "no" in nothing.layout.annotations[0].text


def test_every_agents_learning_curve(tmp_path):
    rows = [{"step": 10 * i, "episode/return": float(i)} for i in range(1, 5)]
    pong = _metrics_run(tmp_path / "Pong__s0", rows)
    breakout = _metrics_run(tmp_path / "Breakout__s0", [{"step": 5, "episode/return": 7.0}])
    fig = viz.compare_learning_curves([pong, breakout], window=2, reference={"human": 3.0})
    lines = [t for t in fig.data if t.mode == "lines"]
    assert [t.name for t in lines] == ["Pong__s0", "Breakout__s0"]
    np.testing.assert_allclose(lines[0].y, [1.0, 1.5, 2.5, 3.5])  # rolling mean of 2
    assert fig.layout.shapes[0].y0 == 3.0 and fig.layout.annotations[0].text == "human"
    assert not viz.compare_learning_curves([tmp_path / "none"]).data


def test_a_run_without_a_finished_episode_shows_its_q_value_over_training():
    """The notebook's 300-step smoke run on Pong ends no episode: the learning curve draws the
    mean Q value over training steps (the loss when no Q was logged) on visible axes, and the
    title says why; no return-scaled reference line over it."""
    rows = [{"step": 50, "charts/sps": 9.0}] + [
        {"step": s, "losses/total": 4.0 - s / 100, "charts/q_mean": s / 1000} for s in (150, 300)
    ]
    fig = viz.learning_curve(rows, title="Pong: episode returns", reference={"human": 14.6})
    assert [t.name for t in fig.data] == ["Q value (mean)"]
    assert list(fig.data[0].x) == [150, 300] and list(fig.data[0].y) == [0.15, 0.3]
    assert fig.layout.title.text == (
        "Pong: episode returns<br><sup>no episode finished in the 300 steps of this run: "
        "Q value (mean) (the return the agent expects)</sup>"
    )
    assert fig.layout.yaxis.title.text == "Q value (mean)" and fig.layout.xaxis.visible is None
    assert not fig.layout.shapes and not fig.layout.annotations
    loss_only = viz.learning_curve([{"step": 80, "losses/total": 2.5}])
    assert [list(t.y) for t in loss_only.data] == [[2.5]]
    assert "total loss (what training minimizes)" in loss_only.layout.title.text
    bare = viz.learning_curve([{"step": 80, "charts/sps": 9.0}])
    assert _annotations(bare) == ["no episode finished in the 80 steps of this run"]
    assert bare.layout.xaxis.visible is False


def test_agents_without_a_finished_episode_show_their_q_values(tmp_path):
    rows = [{"step": 60, "charts/q_mean": 0.5}, {"step": 120, "charts/q_mean": 0.7}]
    pong = _metrics_run(tmp_path / "Pong__s0", rows)
    breakout = _metrics_run(tmp_path / "Breakout__s0", [{"step": 120, "charts/q_mean": 0.1}])
    fig = viz.compare_learning_curves([pong, breakout], title="2 agents")
    assert [(t.name, list(t.y)) for t in fig.data] == [
        ("Pong__s0", [0.5, 0.7]),
        ("Breakout__s0", [0.1]),
    ]
    assert "no episode finished in the 120 steps of these runs" in fig.layout.title.text
    assert fig.layout.showlegend is True


def test_inverse_dynamics_accuracy_has_its_chance_line():
    """1 / number of actions, in the accuracy's own panel only (once with several runs)."""
    rows = [{"step": s, "losses/total": 1.0, "charts/inverse_accuracy": 0.3} for s in (1, 2)]
    fig = viz.training_curves(rows, ["losses/total", "charts/inverse_accuracy"])
    viz.chance_lines(fig, {"charts/inverse_accuracy": 1 / 6})
    [line] = fig.layout.shapes
    assert (line.xref, line.yref, line.y0, line.y1) == ("x2 domain", "y2", 1 / 6, 1 / 6)
    assert [
        a.text for a in fig.layout.annotations if a.name == "chance:charts/inverse_accuracy"
    ] == ["chance 0.17"]
    two = viz.training_curves(
        pd.DataFrame(rows * 2).assign(run=["a", "a", "b", "b"]),
        ["charts/inverse_accuracy"],
        runs="run",
    )
    assert len(viz.chance_lines(two, {"charts/inverse_accuracy": 0.25}).layout.shapes) == 1


def test_long_titles_wrap_instead_of_running_off_the_edge():
    from sgi_lab.viz.training import wrap_title

    title = (
        "evaluation of the final agent (raw scores): 2 episodes, cap 2,000 frames (500 steps): "
        "not comparable with the paper (100 episodes, cap 108,000 frames (27,000 steps))"
    )
    wrapped = wrap_title(title)
    assert wrapped.startswith("evaluation of the final agent (raw scores)<br><sup>2 episodes")
    assert all(len(line) <= 91 + 5 for line in wrapped.split("<br>"))
    assert wrap_title("short") == "short" and wrap_title(None) is None
    table = viz.summary_table({"a": 1}, title=title)
    assert table.layout.title.text == wrapped and table.layout.margin.t == 40 + 16 * 2


def test_empty_live_panels_say_so_in_words_and_the_final_figure_drops_them():
    """Probing off: the live probe F1 panel says why it is empty, never bare axes; a panel's
    words go at its first value; the figure left in the notebook names what was not logged."""
    curves = viz.LiveCurves(["losses/total", "probe/f1", "episode/return"], columns=3)
    words = {a.name: a.text for a in curves.figure.layout.annotations if a.name}
    assert words["empty:probe/f1"].startswith("no probe yet (probing is off")
    assert words["empty:episode/return"] == "no episode has finished yet"
    assert curves.figure.layout.annotations[-1].xref == "x3 domain"
    curves.update({"step": 1, "losses/total": 1.0})
    names = {a.name for a in curves.figure.layout.annotations if a.name}
    assert names == {"empty:probe/f1", "empty:episode/return"}
    curves.title = "pretraining x"
    final = curves.finish()
    assert [t.name for t in final.data] == ["losses/total"]
    assert final.layout.title.text.endswith(
        "not logged in this run: probe F1 (AtariARI state, overall), episode return</sup>"
    )


def test_static_copies_take_the_figures_size_and_a_failure_costs_only_the_copy(
    tmp_path, monkeypatch
):
    """save_figure passes the figure's own width and height to the static export, and an
    export that fails (kaleido or Chromium) warns in one line: the HTML and the notebook stay."""
    monkeypatch.setattr(notebook, "static_export_problem", lambda: None)
    monkeypatch.setattr(notebook, "_kaleido_server", lambda: None)
    calls = []

    def write_image(self, path, format, **size):  # noqa: A002  (plotly's keyword)
        calls.append((Path(path).name, format, size))
        if format == "pdf":
            raise RuntimeError("Chromium crashed\nlong trace")
        Path(path).write_bytes(b"x")

    monkeypatch.setattr(go.Figure, "write_image", write_image)
    fig = go.Figure(layout={"width": 1400, "height": 420})
    with pytest.warns(UserWarning, match=r"^wide\.pdf not written: Chromium crashed$"):
        path = notebook.save_figure(fig, tmp_path, "wide", formats=["png", "pdf"])
    assert path.exists() and (tmp_path / "figures" / "wide.png").exists()
    assert calls[0] == ("wide.png", "png", {"width": 1400, "height": 420})
    notebook.save_figure(go.Figure(), tmp_path, "plain", formats="png")
    assert calls[-1] == ("plain.png", "png", {})  # no size set: kaleido's default
