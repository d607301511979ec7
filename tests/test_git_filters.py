"""Notebooks stay clean in git: `make setup` (its `git-filters` step) makes nbstripout the clone's
filter, so outputs, execution counts and the kernel's metadata never reach a commit, and a
notebook executed or opened in JupyterLab is not a change."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

pytest.importorskip("nbstripout")
pytestmark = pytest.mark.smoke


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A repository holding the Makefile, .gitattributes and the notebooks, filters set.
    Made once (the filter runs a Python per notebook): the first test only reads it, the
    second edits it."""
    repo = tmp_path_factory.mktemp("filters") / "repo"
    (repo / "notebooks").mkdir(parents=True)
    for name in ("Makefile", ".gitattributes"):
        shutil.copy(ROOT / name, repo / name)
    for nb in NOTEBOOKS:
        shutil.copy(nb, repo / "notebooks" / nb.name)
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    venv = Path(sys.executable).parent.parent
    subprocess.run(["make", "-s", "git-filters", f"VENV={venv}"], cwd=repo, check=True)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "notebooks")
    return repo


def _as_executed_in_lab(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """What JupyterLab saves after Run All: outputs, counts, timing and kernel metadata."""
    nb = copy.deepcopy(nb)
    nb.metadata.language_info.update(version="3.11.2", mimetype="text/x-python")
    nb.metadata.kernelspec["display_name"] = "Python 3 (ipykernel)"  # what Lab's save writes
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        cell.execution_count = i + 1
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * 1000)]
        cell.metadata["execution"] = {"iopub.status.busy": "2026-01-01T00:00:00"}
    return nb


def test_notebooks_carry_the_kernel_name_lab_writes_and_are_valid():
    """Committed with ipykernel's own display name ("Python 3 (ipykernel)"), which JupyterLab
    writes when it saves one, so opening and saving a notebook changes nothing; and valid
    against the notebook schema (which requires a display name)."""
    from ipykernel.kernelspec import get_kernel_dict

    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        assert nb.metadata.kernelspec.display_name == get_kernel_dict()["display_name"], path


def test_committed_notebooks_are_what_the_filter_makes_of_them(clone):
    for nb in NOTEBOOKS:
        committed = git(clone, "show", f"HEAD:notebooks/{nb.name}")
        assert committed == nb.read_text(), f"{nb.name}: the filter rewrites it (run make setup)"


def test_a_notebook_run_in_lab_is_not_a_change_and_edits_commit_without_outputs(clone):
    path = clone / "notebooks" / "pretrain.ipynb"
    nbformat.write(_as_executed_in_lab(nbformat.read(path, as_version=4)), path)
    # git may list it by its changed size until the next `git add`, but there is no change
    assert git(clone, "diff") == ""
    git(clone, "add", "notebooks/pretrain.ipynb")
    assert git(clone, "status", "--porcelain") == ""
    nb = nbformat.read(path, as_version=4)
    code = next(
        c
        for c in nb.cells
        if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", [])
    )
    code.source += "\n# a real edit"
    nbformat.write(nb, path)
    git(clone, "add", "notebooks/pretrain.ipynb")
    staged = nbformat.reads(git(clone, "show", ":notebooks/pretrain.ipynb"), as_version=4)
    assert "# a real edit" in "".join(c.source for c in staged.cells)
    for cell in staged.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
            assert "execution" not in cell.metadata
    assert "widgets" not in staged.metadata and "version" not in staged.metadata.language_info


@pytest.mark.parametrize("target", ["test", "demo"])
def test_the_newcomers_make_targets_set_the_filter_in_a_clone(tmp_path, target):
    """`make test` and `make demo` (a newcomer's path, not only `make setup`) set nbstripout as
    the clone's filter, so runs started from JupyterLab are recorded clean; outside a git clone
    the step is skipped rather than failing."""
    in_clone = subprocess.run(
        ["make", "-n", target], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    assert "git config filter.nbstripout.clean" in in_clone
    plain = tmp_path / "tarball"
    plain.mkdir()
    shutil.copy(ROOT / "Makefile", plain / "Makefile")
    (plain / "pyproject.toml").write_text("")
    outside = subprocess.run(
        ["make", "-n", target],
        cwd=plain,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "GIT_CEILING_DIRECTORIES": str(tmp_path)},
    )
    assert "filter.nbstripout" not in outside.stdout
