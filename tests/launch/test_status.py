"""`sgi-lab status`: how far runs have got; "did you mean" for mistyped games, params, folders."""

from __future__ import annotations

import json
import time

import pytest

from sgi_lab.config import ConfigError, read_params
from sgi_lab.envs.games import UnknownGameError, canonical_game
from sgi_lab.launch import status
from sgi_lab.launch.cli import main


def _run(folder, state, step, steps, rows, kind="pretrain", age_s=5.0, **extra):
    folder.mkdir(parents=True)
    updated = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - age_s))
    record = {"state": state, "kind": kind, "step": step, "updated": updated, **extra}
    (folder / "status.json").write_text(json.dumps(record))
    (folder / "config.yaml").write_text(f"steps: {steps}\nbatch_size: 32\n")
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "outputs"
    _run(
        root / "runs" / "pretrain__sgi_m__Pong__s0",
        "running",
        1000,
        5000,
        [
            {"step": 900, "losses/total": 2.5, "charts/samples_per_s": 3200.0},
            {"step": 1000, "losses/total": 2.0, "charts/samples_per_s": 6400.0},
        ],
    )
    _run(
        root / "runs" / "finetune__x" / "Pong__s0",
        "running",
        40_000,
        100_000,
        [{"step": 40_000, "episode/return": -19.0, "charts/sps": 20.0}],
        kind="finetune",
        age_s=3 * 3600,
    )
    done = _run(root / "demo" / "pretrain", "finished", 200, 200, [{"step": 200}])
    (done / "checkpoints").mkdir()
    (done / "checkpoints" / "status.json").write_text(json.dumps({"state": "running"}))
    return root


def test_run_progress_rate_eta_and_metrics(runs):
    p = status.run_progress(runs / "runs" / "pretrain__sgi_m__Pong__s0")
    assert (p["stage"], p["state"], p["step"], p["steps"]) == ("pretrain", "running", 1000, 5000)
    assert p["rate"] == pytest.approx(200.0)  # 6400 samples/s at batch 32, the newest row
    assert p["eta_s"] == pytest.approx(20.0)  # 4000 steps left at 200 steps/s
    assert p["metrics"] == {"losses/total": 2.0} and not p["stale"]
    silent = status.run_progress(runs / "runs" / "finetune__x" / "Pong__s0")
    assert silent["stale"] and silent["eta_s"] == pytest.approx(3000.0)
    assert status.run_progress(runs / "demo" / "pretrain")["eta_s"] is None


def test_status_command_lists_every_run(runs, capsys):
    assert main(["status", str(runs)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["run", "stage", "state", "step"]
    pretrain = next(line for line in lines if "pretrain__sgi_m" in line)
    assert "1,000/5,000 (20%)" in pretrain and "200/s" in pretrain and "20s" in pretrain
    assert "total 2" in pretrain
    finetune = next(line for line in lines if "finetune__x" in line)
    assert "silent: killed?" in finetune and "50m00s" in finetune and "return -19" in finetune
    assert "demo/pretrain " in out and "checkpoints" not in out
    assert "3 run(s); 1 running; 1 silent" in out

    assert main(["status", str(runs), "--state", "finished"]) == 0
    assert "pretrain__sgi_m" not in capsys.readouterr().out


def test_info_on_a_run_folder_shows_its_status(runs, capsys):
    assert main(["info", str(runs / "demo" / "pretrain")]) == 0
    out = capsys.readouterr().out
    assert "is a run folder, not a store" in out and "finished" in out
    assert "manifest" not in out


def test_did_you_mean_for_folders_games_and_params(runs, tmp_path, capsys):
    assert main(["status", str(runs / "runs" / "pretrain__sgi_m__Pong__s1")]) == 2
    err = capsys.readouterr().err
    assert "no such folder; did you mean" in err and "pretrain__sgi_m__Pong__s0" in err
    assert main(["report", str(runs / "rnus" / "finetune__x")]) == 2
    assert f"did you mean {runs / 'runs'}?" in capsys.readouterr().err
    assert main(["evaluate", str(runs / "runs" / "finetune__y")]) == 2
    assert "finetune__x" in capsys.readouterr().err

    with pytest.raises(UnknownGameError, match="did you mean MsPacman"):
        canonical_game("MsPackman")
    params = tmp_path / "params"
    params.mkdir()
    (params / "sgi_m.yaml").write_text("name: sgi_m\n")
    with pytest.raises(ConfigError, match="no such params file; did you mean .*sgi_m.yaml"):
        read_params(params / "sgi_n.yaml")


# -- static figures (PNG/SVG/PDF through kaleido) ----------------------------------------------


def test_figure_formats_are_checked_and_refused_with_what_to_install(tmp_path, monkeypatch, capsys):
    import plotly.graph_objects as go

    from sgi_lab import notebook
    from sgi_lab.launch import notebook_runner

    assert notebook.figure_formats("PNG, .svg") == ["png", "svg"]
    monkeypatch.setenv(notebook.FIGURE_FORMATS_ENV, "pdf")
    assert notebook.figure_formats() == ["pdf"]
    with pytest.raises(ValueError, match=r"\['bmp'\] unknown"):
        notebook.figure_formats("png,bmp")
    for module in (notebook, notebook_runner):  # save_figure's, and sgi-lab run's check
        monkeypatch.setattr(module, "static_export_problem", lambda: "kaleido is not installed")
    with pytest.raises(RuntimeError, match="cannot write pdf figures: kaleido is not installed"):
        notebook.save_figure(go.Figure(), tmp_path, "f")
    assert (tmp_path / "figures" / "f.html").exists()  # the HTML is written first
    assert main(["run", "datasets", "--figure-formats", "png", "--out-root", str(tmp_path)]) == 2
    assert "--figure-formats png: kaleido is not installed" in capsys.readouterr().err
    assert not list(tmp_path.glob("datasets*"))  # refused before anything ran


@pytest.mark.smoke
def test_save_figure_writes_static_images_offline(tmp_path):
    """kaleido drives the local Chromium; nothing is fetched (the tier has no network)."""
    import plotly.graph_objects as go

    from sgi_lab import notebook

    problem = notebook.static_export_problem()
    if problem:
        pytest.skip(problem)
    fig = go.Figure(go.Scatter(y=[1, 3, 2])).update_layout(title="a figure")
    notebook.save_figure(fig, tmp_path, "curve", formats="svg,png")
    svg = (tmp_path / "figures" / "curve.svg").read_text()
    assert svg.startswith("<svg") and "a figure" in svg
    assert (tmp_path / "figures" / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
