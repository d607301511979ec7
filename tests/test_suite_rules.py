"""The test suite's own rules: every test runs under a hang guard, and every test that executes
a notebook is in the notebooks tier, which CI runs after the default suite."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_test_has_a_hang_guard(request):
    """pyproject.toml sets pytest-timeout's per-test limit: a test that hangs fails with its
    stack printed instead of holding CI until its 90-minute limit."""
    assert request.config.pluginmanager.hasplugin("timeout")
    limit = float(request.config.getini("timeout"))
    assert 0 < limit <= 1800


def test_a_notebook_executed_outside_the_notebooks_tier_fails_its_test(
    request, tmp_path, monkeypatch
):
    """tests/conftest.py guards papermill's engine: a test without the notebooks marker that
    executes a notebook fails, named, before a kernel starts; with the marker it goes through.
    The engine is stubbed here: no kernel starts either way."""
    import papermill
    from conftest import UNMARKED_EXECUTION, write_notebook
    from papermill.engines import NBClientEngine

    kernels = []

    def no_kernel(cls, nb_man, kernel_name, **kwargs):
        kernels.append(kernel_name)

    monkeypatch.setattr(NBClientEngine, "execute_managed_notebook", classmethod(no_kernel))
    source, out = write_notebook(tmp_path / "one.ipynb", "1 + 1"), tmp_path / "out.ipynb"

    def execute():
        papermill.execute_notebook(str(source), str(out), kernel_name="python3", progress_bar=False)

    expected = f"{request.node.nodeid} executes a notebook without the notebooks marker"
    with pytest.raises(pytest.fail.Exception, match=re.escape(expected)):
        execute()
    assert kernels == [] and not out.exists()
    # A test that swallowed the failure would still fail: the guard's note is on the test.
    assert request.node.stash[UNMARKED_EXECUTION].startswith(expected)
    del request.node.stash[UNMARKED_EXECUTION]  # this test's own, expected
    request.node.add_marker(pytest.mark.notebooks)
    execute()
    assert kernels == ["python3"] and out.exists()


def _make_recipe(target: str) -> list[str]:
    """The pytest arguments of a Makefile target's recipe."""
    recipe = re.search(rf"^{target}:.*\n\t(.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert recipe, f"the Makefile has no {target} target"
    return shlex.split(recipe.group(1))


def test_the_default_suite_leaves_the_notebooks_tier_to_its_target_and_ci_runs_both(request):
    """`make test` (pytest's default -m) excludes the notebooks tier, `make test-notebooks`
    selects it, and CI (.ci/run) runs it after the default suite."""
    addopts = request.config.getini("addopts")
    assert addopts[addopts.index("-m") + 1] == "not slow and not browser and not notebooks"
    notebooks = _make_recipe("test-notebooks")
    notebooks = notebooks[notebooks.index("pytest") :]
    assert notebooks[notebooks.index("-m") + 1] == "notebooks and not slow and not browser"
    steps = [
        line.split("||")[0].strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
    ]
    assert steps.index("make test") < steps.index("make test-notebooks")
