"""What the representations and ablations notebooks show about probes and collapse: the
pretrained run's own probe results, the random-init and majority baselines drawn beside the
bars, a sentence instead of empty axes or an empty table, and a similarity near 1 read against
random init."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from sgi_lab.analysis import representations
from sgi_lab.probes.results import write_probes
from sgi_lab.viz.probes import probe_bars, probe_curve_figure, reference_levels


def _entry(overall: float, random_init: float, majority: float, params: str | None) -> dict:
    return {
        "encoder": {"kind": "pretrain", "params": params, "seed": None, "encoder": "nature"},
        "store": {"game": "Pong", "fingerprint": "fp", "path": "/data/pong"},
        "settings": {"split_seed": 0, "max_frames": None},
        "overall": overall,
        "across_categories": overall,
        "categories": {"agent_localization": overall - 0.1},
        "majority": {"overall": majority},
        "random_init": {"overall": random_init},
        "reward": {"f1": 0.5},
        "split": {"rows": {"train": 7, "val": 1, "test": 2}},
        "seconds": {"total": 1.0},
    }


def _pretrained_run(folder, params: str | None = "demo"):
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("seed: 0\n")
    (folder / "status.json").write_text(json.dumps({"state": "finished", "kind": "pretrain"}))
    write_probes(folder / "probes.json", _entry(0.838, 0.849, 0.5, params))
    return folder


def test_the_pretrained_runs_own_probes_are_read_when_probe_runs_is_empty(tmp_path):
    run = _pretrained_run(tmp_path / "demo" / "pretrain")
    assert representations.probe_sources([], run) == [str(run)]
    assert representations.probe_sources(["a", "b"], run) == ["a", "b"]  # probe_runs win
    assert representations.probe_sources([], "") == []

    frame, summary = representations.load_probes([], run)
    assert len(frame) == 1
    values = summary.set_index("metric")["value"]
    assert values["overall"] == pytest.approx(0.838)
    assert values["random_init"] == pytest.approx(0.849)  # the baseline is summarised too
    assert values["majority"] == pytest.approx(0.5)
    table = representations.probe_table(summary, str(run))
    assert "<table" in table.html and table.frame.loc[0, "objective"] == "demo"
    assert table.frame.loc[0, "random_init"] == "0.849"


def test_an_encoder_without_a_parameter_set_counts_under_its_folder(tmp_path):
    run = _pretrained_run(tmp_path / "mine", params=None)
    _, summary = representations.load_probes([], run)
    assert set(summary["objective"]) == {"mine"}


def test_no_probe_results_is_a_sentence_not_an_empty_table_or_axes(tmp_path):
    unprobed = tmp_path / "run"
    unprobed.mkdir()
    frame, summary = representations.load_probes([], unprobed)
    assert frame.empty and summary.empty
    table = representations.probe_table(summary, str(unprobed))
    assert "<table" not in table.html
    assert f"no probe results for {unprobed} yet: sgi-lab probe" in table.html

    for fig in (probe_bars(summary), probe_curve_figure(pd.DataFrame())):
        assert len(fig.data) == 0 and fig.layout.xaxis.visible is False
        assert "sgi-lab probe" in fig.layout.annotations[0].text


class _Store:  # what the hints read of a TransitionStore
    path = Path("outputs/demo/data/pong_random")
    game = "Pong"


def test_a_run_without_checkpoints_gets_hints_that_work_on_it(tmp_path):
    """The demo keeps model.pt only: the curve's hint is not `RUN/checkpoints/*.pt` (no such
    file) but the final model's probe and probe_every; the table names the run and the store."""
    demo = tmp_path / "pretrain"
    (demo / "checkpoints").mkdir(parents=True)  # the folder exists, empty
    hint = representations.probe_curve_hint([demo], _Store())
    assert "checkpoints/*.pt" not in hint and f"{demo} kept no checkpoints" in hint
    assert f"sgi-lab probe {demo} --data outputs/demo/data/pong_random probes its final" in hint
    assert "--set probe_every=50 --set probe_data=STORE2" in hint
    assert "sgi-lab collect random --game Pong --seed 1" in hint
    fig = probe_curve_figure(pd.DataFrame(), empty=hint)
    assert fig.layout.annotations[0].text == hint and fig.layout.xaxis.visible is False
    table = representations.probe_table(pd.DataFrame(), str(demo), _Store())
    assert f"sgi-lab probe {demo} --data outputs/demo/data/pong_random" in table.html
    # A run that kept checkpoints: probe them.
    (demo / "checkpoints" / "ckpt_00000050.pt").write_bytes(b"")
    assert representations.probe_curve_hint([demo], _Store()) == (
        f"no checkpoint probes yet: sgi-lab probe {demo}/checkpoints/*.pt "
        "--data outputs/demo/data/pong_random"
    )
    assert "set pretrained" in representations.probe_curve_hint([], _Store())


def test_the_probe_curve_falls_back_on_the_probes_a_run_made_as_it_trained(tmp_path):
    """A run pretrained with probe_every and never probed afterwards: its metrics' probe/f1
    rows are the curve; a run with probes.json keeps its own."""
    logged = tmp_path / "logged"
    logged.mkdir()
    (logged / "status.json").write_text(json.dumps({"state": "finished", "game": "Pong"}))
    rows = [{"step": 50, "probe/f1": 0.31}, {"step": 60, "losses/total": 1.0}]
    rows.append({"step": 100, "probe/f1": 0.42})
    (logged / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    probed = _pretrained_run(tmp_path / "probed")
    curves = representations.pretraining_probe_curves([logged, probed])
    mine = curves[curves["run"] == "logged"]
    assert mine["step"].tolist() == [50, 100] and mine["overall"].tolist() == [0.31, 0.42]
    assert curves.loc[curves["run"] == "probed", "overall"].tolist() == [0.838]
    fig = probe_curve_figure(curves)
    assert [t.name for t in fig.data] == ["logged (Pong)", "probed (Pong)"]
    assert representations.pretraining_probe_curves([tmp_path / "none"]).empty


def test_probe_bars_draw_the_random_init_and_majority_references_over_overall():
    summary = pd.DataFrame(
        [
            ("sgi", "overall", 0.838),
            ("sgi", "reward_f1", 0.3),
            ("sgi", "random_init", 0.849),
            ("sgi", "majority", 0.5),
            ("s", "overall", 0.9),
            ("s", "random_init", 0.851),
            ("s", "majority", 0.5),
        ],
        columns=["objective", "metric", "value"],
    ).assign(lower=lambda f: f["value"], upper=lambda f: f["value"])
    assert reference_levels(summary) == pytest.approx({"random_init": 0.85, "majority": 0.5})
    fig = probe_bars(summary)
    assert [t.name for t in fig.data] == ["sgi", "s"]  # baselines are lines, not bars
    assert list(fig.data[0].x) == ["overall", "reward f1"]
    lines = {shape.name: shape for shape in fig.layout.shapes}
    assert set(lines) == {"random init 0.850", "majority class 0.500"}
    line = lines["random init 0.850"]
    # over the overall group (category 0 spans -0.5..0.5) at the mean of the baselines
    assert (line.x0, line.x1, line.y0, line.y1) == pytest.approx((-0.5, 0.5, 0.85, 0.85))
    assert line.showlegend and line.line.dash == "dash"
    # an encoder under random init's line: the bar (0.838) is below it
    assert fig.data[0].y[0] < line.y0


def test_collapse_is_read_against_random_init():
    near = representations.collapse_note({"pretrained": 0.9999, "random init (nature)": 0.9988})
    assert "random init is itself at 0.9988" in near and "says nothing about collapse" in near
    collapsed = representations.collapse_note({"pretrained": 0.995, "random init": 0.6})
    assert collapsed.endswith("pretrained near 1 while random init is not: collapse")
    fine = representations.collapse_note({"pretrained": 0.4, "random init": 0.6})
    assert "no collapse" in fine and "pretrained 0.4000, random init 0.6000" in fine
