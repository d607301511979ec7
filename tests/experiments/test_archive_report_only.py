"""``sgi-lab experiment --report-only --archive``: the archive keeps the params its runs ran
with. The experiment folder's inputs are written from the working tree, whose params may differ
from the archived ones (a config field added since, which changes nothing of what ran, so the
runs still restore); re-archiving would replace them, and the archive would then say the runs
ran with params they never saw. It refuses, naming the file, unless --overwrite-archive."""

from __future__ import annotations

import json

import pytest
from test_archive import SCRATCH, SGI, STUDY, finish_agents, study

from sgi_lab.experiments import scheduler
from sgi_lab.experiments.archive import ARCHIVE_FILE, archive
from sgi_lab.launch.cli import main
from sgi_lab.runs.status import file_sha256


@pytest.fixture
def archived(tmp_path):
    """The study with scratch and reduced-lr SGI's agents finished on Asterix + Breakout,
    archived (as `test_archive`'s, without the pretraining runs nothing here reads)."""
    graph = study(tmp_path / "first")
    graph.out.mkdir(parents=True)
    scheduler.write_inputs(graph, graph.out)
    finish_agents(graph, SCRATCH, 0.2)
    finish_agents(graph, SGI, 0.4)
    assert sorted(archive(graph, tmp_path / "archive")) == sorted([SCRATCH, SGI])
    return graph, tmp_path / "archive"


def _as_older_code_wrote_it(dest, graph) -> str:
    """The archive's params file of the scratch arm without a key at its default (as written
    before the field existed), its SHA-256 updated in the index; returns its path in the archive."""
    params = next(a for a in graph.task(SCRATCH).argv if a in graph.params_files)
    rel = f"params/{params.rsplit('/', 1)[-1]}"
    text = (dest / rel).read_text()
    assert "\n  cuda_graphs: true\n" in text
    (dest / rel).write_text(text.replace("\n  cuda_graphs: true\n", "\n"))
    index = json.loads((dest / ARCHIVE_FILE).read_text())
    index["files"][rel] = file_sha256(dest / rel)
    (dest / ARCHIVE_FILE).write_text(json.dumps(index, indent=1) + "\n")
    return rel


def test_report_only_refuses_to_rewrite_an_archived_params_file_unless_asked(
    archived, tmp_path, capsys
):
    graph, dest = archived
    rel = _as_older_code_wrote_it(dest, graph)
    old_text, old_index = (dest / rel).read_text(), (dest / ARCHIVE_FILE).read_text()
    out = tmp_path / "clone"
    args = ["experiment", str(STUDY), "--out", str(out), "--archive", str(dest), "--report-only"]

    assert main(args) != 0
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert f"{dest / rel}: archived with other content than {out / rel}" in error
    assert "--overwrite-archive" in error
    # nothing of the archive was touched, though its runs were restored into the clone
    assert (dest / rel).read_text() == old_text
    assert (dest / ARCHIVE_FILE).read_text() == old_index
    assert (out / "finetune").is_dir()

    assert main([*args, "--overwrite-archive"]) == 0
    assert "archived 2 tasks" in capsys.readouterr().out
    assert (dest / rel).read_text() == (out / rel).read_text() != old_text
    assert json.loads((dest / ARCHIVE_FILE).read_text())["files"][rel] == file_sha256(out / rel)


def test_an_unchanged_archive_is_rearchived_without_the_flag(archived, tmp_path, capsys):
    _, dest = archived
    out = tmp_path / "clone"
    args = ["experiment", str(STUDY), "--out", str(out), "--archive", str(dest), "--report-only"]
    before = (dest / ARCHIVE_FILE).read_text()
    assert main(args) == 0
    assert (dest / ARCHIVE_FILE).read_text() == before  # nothing differed: nothing rewritten


def test_overwrite_archive_goes_with_report_only_and_an_archive(tmp_path, capsys):
    args = ["experiment", str(STUDY), "--out", str(tmp_path / "x"), "--overwrite-archive"]
    assert main([*args, "--report-only"]) != 0
    assert "--overwrite-archive goes with --report-only --archive" in capsys.readouterr().err
