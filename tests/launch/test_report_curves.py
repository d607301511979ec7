"""`sgi-lab report RUN... --curves OUT.html`: the runs' training curves overlaid, one colour each."""

from __future__ import annotations

import json

from sgi_lab.launch.cli import main


def fake_run(path, game, seed, scores, params="smoke", pretrain_params="smoke"):
    """A finished, evaluated finetuning run folder (as tests/analysis/test_report.py's)."""
    path.mkdir(parents=True)
    evaluation = {"game": game, "episodes": len(scores), "scores": scores, "step": 100}
    (path / "eval.json").write_text(json.dumps({**evaluation, "mean": sum(scores) / len(scores)}))
    status = {"state": "finished", "params": params, "pretrain_params": pretrain_params}
    (path / "status.json").write_text(json.dumps(status))
    (path / "config.yaml").write_text(f"game: {game}\nseed: {seed}\npretrained: pre\n")
    return path


def _log(run, losses):
    rows = [{"step": 10 * (i + 1), "losses/td": loss} for i, loss in enumerate(losses)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_report_writes_the_runs_curves_side_by_side(tmp_path, capsys):
    a = fake_run(tmp_path / "a", "Pong", 1, [-15.0], params="smoke", pretrain_params="smoke")
    b = fake_run(tmp_path / "b", "Breakout", 1, [12.0], params="smoke", pretrain_params="smoke")
    _log(a, [1.5, 1.25, 1.0])
    _log(b, [2.5, 2.0])
    out = tmp_path / "curves.html"
    assert main(["report", str(a), str(b), "--reps", "50", "--curves", str(out)]) == 0
    page = out.read_text().replace("\\u002f", "/")  # plotly escapes "/" in its JSON
    assert "losses/td" in page and str(a) in page and str(b) in page
    assert "side by side" in capsys.readouterr().out


def test_report_never_overwrites_a_curves_file_and_names_the_option(tmp_path, capsys):
    a = fake_run(tmp_path / "a", "Pong", 1, [-15.0], params="smoke", pretrain_params="smoke")
    _log(a, [1.0])
    mine = tmp_path / "mine.html"
    mine.write_text("a user's page")
    assert main(["report", str(a), "--reps", "50", "--curves", str(mine)]) != 0
    assert mine.read_text() == "a user's page"
    err = capsys.readouterr().err
    assert "--curves" in err and "Traceback" not in err
    assert main(["report", str(a), "--curves", str(tmp_path / "c.png")]) != 0
    assert "--curves" in capsys.readouterr().err


def test_report_never_overwrites_a_csv_and_refuses_a_resample_count_below_one(tmp_path, capsys):
    a = fake_run(tmp_path / "a", "Pong", 1, [-15.0], params="smoke", pretrain_params="smoke")
    for taken in ("t.csv", "t.aggregates.csv"):  # either file --csv would write
        path = tmp_path / taken
        path.write_text("a user's table")
        assert main(["report", str(a), "--reps", "50", "--csv", str(tmp_path / "t.csv")]) == 2
        err = capsys.readouterr().err
        assert f"--csv: {path} exists" in err and "Traceback" not in err
        assert path.read_text() == "a user's table"
        path.unlink()
    for reps in ("0", "-5"):
        assert main(["report", str(a), "--reps", reps]) == 2
        err = capsys.readouterr().err
        assert "--reps: at least 1" in err and "Traceback" not in err


def test_curves_into_a_missing_folder_or_with_a_mistyped_baseline_write_nothing(tmp_path, capsys):
    """--curves into a folder that does not exist names the folder (not a temporary file), and a
    mistyped --baseline stops the report before the curves page is written."""
    a = fake_run(tmp_path / "a", "Pong", 1, [-15.0], params="smoke", pretrain_params="smoke")
    _log(a, [1.0])
    missing = tmp_path / "nowhere" / "c.html"
    assert main(["report", str(a), "--reps", "50", "--curves", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"{missing.parent} is not a folder" in err and ".tmp" not in err
    assert not missing.parent.exists()
    page = tmp_path / "c.html"
    argv = ["report", str(a), "--reps", "50", "--baseline", "smokee", "--curves", str(page)]
    assert main(argv) == 2
    assert "smokee" in capsys.readouterr().err
    assert not page.exists()
