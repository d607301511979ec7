"""`make lab` starts JupyterLab, as root too (containers), where Jupyter refuses without a flag."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.smoke


def _lab_command() -> list[str]:
    venv = Path(sys.executable).parent.parent
    # Under `make test` the parent's MAKEFLAGS would make this make print "Entering/Leaving
    # directory" lines: run it as a fresh, quiet make.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    dry = subprocess.run(
        ["make", "--no-print-directory", "-n", "lab", f"VENV={venv}", f"STAMP={venv}/bin/python"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    lines = [line for line in dry.strip().splitlines() if "jupyter" in line]
    return shlex.split(lines[-1])


def test_make_lab_passes_allow_root_only_as_root():
    command = _lab_command()
    assert command[1:3] == ["lab", "--notebook-dir=."]
    assert ("--allow-root" in command) == (os.geteuid() == 0)


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal only happens as root")
def test_make_lab_command_starts_jupyterlab_as_root(tmp_path):
    args = ["--no-browser", "--ServerApp.port=0", "--ServerApp.token=t"]
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path)}
    server = subprocess.Popen(
        [*_lab_command(), *args], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline, seen = time.monotonic() + 90, ""
        while time.monotonic() < deadline and server.poll() is None:
            seen += server.stderr.readline()
            if "is running at" in seen:
                break
        assert "is running at" in seen, seen[-2000:]
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_first_install_says_what_it_does_and_shows_pip_progress(tmp_path):
    """A fresh clone's first `make demo`/`make test` installs for minutes: it says so first and
    lets pip show its progress (no --quiet), so a long install is never a silent one."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    venv = tmp_path / "venv"  # no stamp there: the install recipe is what make would run
    dry = subprocess.run(
        ["make", "--no-print-directory", "-n", f"{venv}/.installed-stamp", f"VENV={venv}"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    install = next(line for line in dry if "pip install" in line)
    assert dry[0].startswith("echo ") and "several minutes" in dry[0]
    assert "--quiet" not in install and "--progress-bar on" in install
