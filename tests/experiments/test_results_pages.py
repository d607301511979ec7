"""The docs/results pages regenerated from results/ (sgi_lab.experiments.results_pages): on a
small copy of the MinAtar objective study's archive (three of its arms), the declared
question's table goes between its page's markers with the numbers its runs give, the forest
plot beside it; a second run changes nothing; the archive is only read."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from sgi_lab.experiments import results_pages as rp
from sgi_lab.experiments.spec import load_experiment

ROOT = Path(__file__).resolve().parents[2]
GAMES = tuple(
    f"minatar/{g}" for g in ("asterix", "breakout", "freeway", "seaquest", "space_invaders")
)
ARMS = ("sgi_none", "reduced_lr__sgi", "naive__sgi")
PAGE = "intro, by hand\n\n<!-- make results: q -->\nstale\n<!-- make results: q, end -->\n\nafter\n"


def small_root(tmp_path: Path) -> Path:
    """A repository root holding a small archive: the objective study's three arms (3 seeds on
    each of its 5 games) with their index entries, and its experiment file with the question
    cut to those arms; a page with one block."""
    root = tmp_path / "repo"
    source = ROOT / "results/minatar_objectives"
    archive = root / "results/minatar_objectives"
    index = json.loads((source / "archive.json").read_text())
    prefixes = tuple(f"finetune/{arm}/" for arm in ARMS)
    index["files"] = {
        rel: sha
        for rel, sha in index["files"].items()
        if rel.startswith(prefixes + ("params/",)) or rel == "experiment.yaml"
    }
    index["tasks"] = {k: v for k, v in index["tasks"].items() if k.startswith(prefixes)}
    for rel in index["files"]:
        (archive / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / rel, archive / rel)
    (archive / "archive.json").write_text(json.dumps(index, indent=1))
    spec = yaml.safe_load((ROOT / rp.STUDIES["minatar_objectives"]).read_text())
    spec["question"]["primary"] = list(ARMS[1:])
    params = root / rp.STUDIES["minatar_objectives"]
    params.parent.mkdir(parents=True)
    params.write_text(yaml.safe_dump(spec, sort_keys=False))
    (root / "docs/results").mkdir(parents=True)
    (root / "docs/results/page.md").write_text(PAGE)
    return root


def tree_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + path.read_bytes())
    return digest.hexdigest()


def p_improvement(root: Path, arm: str) -> float:
    """By hand: per game, the share of (arm, scratch) seed pairs the arm's final evaluation
    wins (ties half), averaged over the games."""
    shares = []
    for game in GAMES:
        name = game.replace("/", "-")

        def means(label, name=name):
            folder = root / "results/minatar_objectives/finetune" / label
            return [json.loads((folder / f"{name}__s{s}/eval.json").read_text())["mean"]
                    for s in range(3)]  # fmt: skip

        x, y = np.array(means(arm)), np.array(means("sgi_none"))
        wins = (x[:, None] > y[None, :]).mean() + 0.5 * (x[:, None] == y[None, :]).mean()
        shares.append(wins)
    return float(np.mean(shares))


def test_the_question_table_regenerates_between_its_markers_from_the_archive(tmp_path):
    root = small_root(tmp_path)
    blocks = [
        rp.Block("docs/results/page.md", "q", rp.question_tables("minatar_objectives", "q.svg"))
    ]
    figures = [rp.Figure("docs/results/q.svg", rp._question_figure("minatar_objectives"))]
    archive = tree_digest(root / "results")
    # --check: what would change, nothing written
    expected = ["docs/results/page.md: q", "docs/results/q.svg"]
    assert rp.regenerate(root, blocks, figures, check=True) == expected
    assert (root / "docs/results/page.md").read_text() == PAGE
    assert not (root / "docs/results/q.svg").exists()
    assert rp.regenerate(root, blocks, figures) == expected
    page = (root / "docs/results/page.md").read_text()
    assert page.startswith("intro, by hand\n\n<!-- make results: q -->\n| arm | against |")
    assert page.endswith("<!-- make results: q, end -->\n\nafter\n") and "stale" not in page
    for arm in ARMS[1:]:
        row = next(line for line in page.splitlines() if line.startswith(f"| `{arm}` | `sgi"))
        assert row.split(" | ")[2].startswith(f"{p_improvement(root, arm):.2f} [")
        assert row.endswith("| 15 vs 15 |")
    assert "![the declared contrasts](q.svg)" in page
    assert "<svg" in (root / "docs/results/q.svg").read_text()
    # byte-identical the second time; the archive only read
    assert rp.regenerate(root, blocks, figures, check=True) == []
    assert tree_digest(root / "results") == archive


def test_a_sealed_question_shows_progress_until_its_last_run_then_the_answer(tmp_path):
    """A pre-registered study's page block (`sealed_question_tables`): with one run of
    ``naive__sgi`` missing, each arm's finished runs against those planned and no value of any
    contrast or arm; with every run in, exactly `question_tables`' answer."""
    root = small_root(tmp_path)
    sealed = rp.sealed_question_tables("minatar_objectives", "q.svg")
    whole = rp.question_tables("minatar_objectives", "q.svg")(root)
    assert sealed(root) == whole and "| arm | against |" in whole
    rereadings = rp.sealed_rereadings("minatar_objectives")
    assert rereadings(root).startswith("Exploratory:") and "| training episodes |" in rereadings(
        root
    )
    missing = root / "results/minatar_objectives/finetune/naive__sgi/minatar-breakout__s2"
    shutil.rmtree(missing)
    text = sealed(root)
    assert text.splitlines()[:2] == ["| arm | finished runs | planned |", "|---|---|---|"]
    assert "| `naive__sgi` | 14 | 15 |" in text and "| `sgi_none` | 15 | 15 |" in text
    assert "44 of 45 runs of the declared arms have finished" in text
    assert "[" not in text and "0." not in text  # no interval, no P(improvement), no IQM
    assert "[" not in rereadings(root) and "0." not in rereadings(root)  # sealed as well
    # the forest plot too: each contrast's row, no value, the runs in its title
    figure = root / "q.svg"
    rp._question_figure("minatar_objectives")(root, figure)
    svg = figure.read_text()
    assert "44 of 45 runs" in svg and svg.count(">sealed<") == 2
    assert "reduced_lr__sgi vs sgi_none" in svg and "<circle" not in svg


def test_a_page_without_its_markers_is_refused_naming_the_block():
    with pytest.raises(ValueError, match=r"page.md: block 'q' needs one '<!-- make results: q"):
        rp.replace_blocks("no markers\n", {"q": "x"}, "page.md")
    twice = "<!-- make results: q -->\n<!-- make results: q -->\n<!-- make results: q, end -->"
    with pytest.raises(ValueError, match=r"found 2 and 1"):
        rp.replace_blocks(twice, {"q": "x"})
    swapped = "<!-- make results: q, end -->\nx\n<!-- make results: q -->"
    with pytest.raises(ValueError, match="below it"):
        rp.replace_blocks(swapped, {"q": "x"})
    kept = "a\n<!-- make results: q -->\nold\nold\n<!-- make results: q, end -->\nb"
    assert rp.replace_blocks(kept, {"q": "new"}) == kept.replace("old\nold", "new")


def test_every_declared_block_has_its_markers_in_its_page():
    for block in rp.PAGE_BLOCKS:
        text = (ROOT / block.page).read_text()
        begin, end = rp.block_markers(block.name)
        assert text.count(begin) == 1 and text.count(end) == 1, (block.page, block.name)
    for figure in rp.PAGE_FIGURES:
        assert (ROOT / figure.path).is_file()
    for study, params in rp.STUDIES.items():
        assert (ROOT / params).is_file()
        if (ROOT / "results" / study).exists():
            assert (ROOT / "results" / study / "archive.json").is_file()
        else:  # declared, not run yet: a question, which its page shows sealed
            assert load_experiment(ROOT / params).question is not None, study


def test_study_reports_write_from_a_copy_and_never_over_a_foreign_folder(tmp_path):
    root = small_root(tmp_path)
    out = tmp_path / "reports"
    (out / "minatar_objectives").mkdir(parents=True)
    (out / "minatar_objectives" / "mine.txt").write_text("a user's file")
    with pytest.raises(FileExistsError, match="not a copy of"):
        rp.study_reports(root, out, ["minatar_objectives"], reps=20)
    assert (out / "minatar_objectives" / "mine.txt").read_text() == "a user's file"
    shutil.rmtree(out / "minatar_objectives")
    archive = tree_digest(root / "results")
    (report,) = rp.study_reports(root, out, ["minatar_objectives"], reps=20)
    folder = out / "minatar_objectives"
    assert report == folder / "report.html" and (folder / rp.COPY_MARK).is_file()
    results = (folder / "results.md").read_text()
    assert results.startswith("# minatar_objectives") and "## The declared question" in results
    assert (folder / "question.svg").is_file() and (folder / "scores.json").is_file()
    rp.study_reports(root, out, ["minatar_objectives"], reps=20)  # our copy: replaced
    assert tree_digest(root / "results") == archive


def test_a_study_reusing_another_folders_runs_gets_its_tables_from_the_archive(tmp_path):
    """An experiment whose pretraining is ``run:`` of another experiment's folder (the 2x
    study's), absent here: no graph, so its results.md is the study's tables read from the
    archive's finetuning runs."""
    root = small_root(tmp_path)
    params = root / rp.STUDIES["minatar_objectives"]
    spec = yaml.safe_load(params.read_text())
    spec["pretrain"] = [
        {"name": p["name"], "run": f"{tmp_path}/absent/{p['name']}__{{game}}"}
        for p in spec["pretrain"]
    ]
    spec.pop("question")
    spec.pop("probe", None)
    spec["data"] = {k: v for k, v in spec["data"].items() if k != "probe_data"}
    params.write_text(yaml.safe_dump(spec, sort_keys=False))
    (path,) = rp.study_reports(root, tmp_path / "reports", ["minatar_objectives"], reps=20)
    text = path.read_text()
    assert path.name == "results.md" and text.startswith("# minatar_objectives")
    assert "## The declared question" not in text
    assert "### Objectives (reduced-lr finetuning)" in text
    assert "\n| sgi | " in text and "\n| none | " in text  # the archive's reduced-lr SGI, scratch
    assert (path.parent / rp.COPY_MARK).is_file()


def test_a_declared_study_without_an_archive_yet_has_no_report(tmp_path, capsys):
    out = tmp_path / "reports"
    assert rp.study_reports(tmp_path, out, studies=["minatar_mixed"]) == []
    assert not out.exists() or not any(out.iterdir())
    assert "minatar_mixed: no archive" in capsys.readouterr().err


def test_every_archived_finetuning_study_keeps_its_per_seed_matrices():
    """docs/datasets.md's promise: a study archived in results/ keeps its runs' per-seed scores
    in rliable's shape (scores.npz, scores.json beside), each cell its run's eval.json mean; the
    finished studies hold every archived agent. A data experiment (no finetuning) keeps none;
    one still running has them once its report has run."""
    from sgi_lab.analysis.score_matrices import read_score_matrices

    complete = {"minatar_calibration", "minatar_objectives", "minatar_objectives_2x"}
    kept = set()
    for index in sorted((ROOT / "results").glob("*/archive.json")):
        folder = index.parent
        if not yaml.safe_load((folder / "experiment.yaml").read_text()).get("finetune"):
            assert not (folder / "scores.npz").exists(), folder.name
            continue
        if not (folder / "scores.npz").exists():
            assert folder.name not in complete, folder.name
            continue
        kept.add(folder.name)
        for name in ("scores.npz", "scores.json"):
            matrices = read_score_matrices(folder / name)
            cells = 0
            for method, runs in matrices.runs.items():
                for row, names in enumerate(runs):
                    for col, run in enumerate(names):
                        if run is None:
                            continue
                        mean = json.loads((folder / run / "eval.json").read_text())["mean"]
                        assert matrices.raw[method][row, col] == pytest.approx(mean, rel=1e-12)
                        cells += 1
            if folder.name in complete:
                assert cells == len(list(folder.rglob("eval.json"))), f"{folder.name}/{name}"
    assert kept >= complete
