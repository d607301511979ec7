"""Per-seed score matrices: values against the runs' scores by hand, both file formats, the CLI's
``report --export`` (never over a file), and rliable reading the exported matrix unchanged."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import yaml

from sgi_lab.analysis.score_matrices import (
    read_score_matrices,
    score_matrices,
    write_score_matrices,
)
from sgi_lab.launch.cli import main
from sgi_lab.metrics.minatar import MINATAR_SCORES_FILE

# (label, params, pretrained, game, seed, evaluation episode scores)
RUNS = [
    ("sgi_none", "sgi_none", False, "minatar/breakout", 0, [2.0, 4.0]),
    ("sgi_none", "sgi_none", False, "minatar/breakout", 1, [6.0, 6.0]),
    ("sgi_none", "sgi_none", False, "minatar/asterix", 1, [1.0, 2.0]),
    ("sgi_none", "sgi_none", False, "minatar/asterix", 0, [0.0, 3.0]),
    ("reduced_lr@sgi", "reduced_lr", True, "minatar/breakout", 2, [10.0, 12.0]),
    ("reduced_lr@sgi", "reduced_lr", True, "minatar/breakout", 0, [8.0, 9.0]),
    ("reduced_lr@sgi", "reduced_lr", True, "minatar/asterix", 5, [4.0, 4.0]),
]


def _runs(root):
    folders = []
    for i, (_, params, pretrained, game, seed, scores) in enumerate(RUNS):
        path = root / f"run{i}"
        path.mkdir(parents=True)
        evaluation = {"game": game, "episodes": 2, "scores": scores, "mean": float(np.mean(scores))}
        (path / "eval.json").write_text(json.dumps(evaluation))
        status = {"state": "finished", "params": params, "pretrain_params": "sgi"}
        (path / "status.json").write_text(json.dumps(status))
        config = {"game": game, "seed": seed, "pretrained": "pre" if pretrained else None}
        (path / "config.yaml").write_text(yaml.safe_dump(config))
        folders.append(path)
    return folders


def _minatar(game, raw):
    table = json.loads(MINATAR_SCORES_FILE.read_text())
    low, high = table["random"][game]["mean"], table["reference"]["values"][game]
    return (raw - low) / (high - low)


def test_matrices_hold_each_runs_mean_by_seed_and_the_normalised_score(tmp_path):
    m = score_matrices(_runs(tmp_path))
    assert m.games == ["minatar/asterix", "minatar/breakout"]
    assert m.methods == ["sgi_none", "reduced_lr@sgi"]
    assert m.normalization == "MinAtar score" and m.episodes == 2
    # rows by seed within each game: seed 0 first (the folders were written out of order)
    np.testing.assert_array_equal(m.raw["sgi_none"], [[1.5, 3.0], [1.5, 6.0]])
    np.testing.assert_array_equal(m.seeds["sgi_none"], [[0, 0], [1, 1]])
    # two breakout runs (seeds 0, 2) but one asterix run (seed 5): the missing cell is NaN, -1
    np.testing.assert_array_equal(m.raw["reduced_lr@sgi"], [[4.0, 8.5], [np.nan, 11.0]])
    np.testing.assert_array_equal(m.seeds["reduced_lr@sgi"], [[5, 0], [-1, 2]])
    assert m.runs["reduced_lr@sgi"][1] == [None, str(tmp_path / "run4")]
    want = np.array([[_minatar("minatar/asterix", 1.5), _minatar("minatar/breakout", 3.0)],
                     [_minatar("minatar/asterix", 1.5), _minatar("minatar/breakout", 6.0)]])  # fmt: skip
    np.testing.assert_allclose(m.normalized["sgi_none"], want, rtol=1e-12)
    assert m.references["minatar/breakout"]["random"] == pytest.approx(0.416)


def test_both_files_read_back_and_nothing_is_overwritten(tmp_path):
    m = score_matrices(_runs(tmp_path / "runs"))
    for name in ("scores.npz", "scores.json"):
        path = write_score_matrices(m, tmp_path / name)
        back = read_score_matrices(path)
        assert back.games == m.games and back.methods == m.methods
        for method in m.methods:
            np.testing.assert_array_equal(back.raw[method], m.raw[method])
            np.testing.assert_array_equal(back.normalized[method], m.normalized[method])
            np.testing.assert_array_equal(back.seeds[method], m.seeds[method])
        before = path.read_bytes()
        with pytest.raises(FileExistsError, match="exists"):
            write_score_matrices(m, path)
        assert path.read_bytes() == before
    data = np.load(tmp_path / "scores.npz", allow_pickle=False)  # plain arrays only
    assert list(data["games"]) == m.games
    assert json.loads(str(data["metadata"][0]))["normalization"] == "MinAtar score"
    assert json.loads((tmp_path / "scores.json").read_text())["raw"]["reduced_lr@sgi"][1][0] is None
    with pytest.raises(ValueError, match=".npz or .json"):
        write_score_matrices(m, tmp_path / "scores.csv")


def test_report_exports_matrices_that_rliable_reads_unchanged(tmp_path, capsys):
    runs = [str(p) for p in _runs(tmp_path / "runs")]
    npz, js = tmp_path / "out" / "scores.npz", tmp_path / "out" / "scores.json"
    argv = ["report", *runs, "--reps", "20", "--export", str(npz), "--export", str(js)]
    assert main(argv) == 0
    assert "wrote" in capsys.readouterr().out and npz.is_file() and js.is_file()
    before = npz.read_bytes()
    assert main(argv) == 2  # refused before the report runs: nothing is overwritten
    assert "exists" in capsys.readouterr().err and npz.read_bytes() == before
    assert main(["report", *runs, "--export", str(tmp_path / "x.txt")]) == 2

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        metrics = pytest.importorskip("rliable.metrics", reason="rliable is not installed")
    data = np.load(npz, allow_pickle=False)
    scores = {m: data[f"normalized/{m}"] for m in data["methods"]}
    by_hand = np.array([[_minatar("minatar/asterix", 1.5), _minatar("minatar/breakout", 3.0)],
                        [_minatar("minatar/asterix", 1.5), _minatar("minatar/breakout", 6.0)]])  # fmt: skip
    iqm = metrics.aggregate_iqm(scores["sgi_none"])
    assert iqm == pytest.approx(metrics.aggregate_iqm(by_hand), rel=1e-12)
    assert iqm == pytest.approx(np.mean(np.sort(by_hand.ravel())[1:3]), rel=1e-12)


def test_an_experiments_report_writes_both_files_naming_runs_inside_it(tmp_path):
    from sgi_lab.analysis.score_matrices import write_study_scores

    runs = _runs(tmp_path / "finetune")
    for _ in range(2):  # the report's own files: written again with every report
        npz, js = write_study_scores(runs, tmp_path)
    back = read_score_matrices(js)
    assert back.runs["sgi_none"][0] == ["finetune/run3", "finetune/run0"]
    np.testing.assert_array_equal(read_score_matrices(npz).raw["sgi_none"], back.raw["sgi_none"])
