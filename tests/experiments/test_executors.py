"""A niced experiment's tasks stay niced: each task runs in a session of its own, which Linux's
autogroup scheduling makes a scheduling group of its own, blind to its processes' nice values;
`run_command` gives the group the driver's niceness (`keep_niceness`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sgi_lab.experiments import executors

AUTOGROUP = Path("/proc/self/autogroup")

NICED_DRIVER = """
import os, subprocess, sys
from sgi_lab.experiments.executors import keep_niceness
os.nice(int(sys.argv[1]))
child = subprocess.Popen(["sleep", "5"], start_new_session=True)
keep_niceness(child.pid)
print(open(f"/proc/{child.pid}/autogroup").read().strip())
child.kill()
"""


@pytest.mark.skipif(not AUTOGROUP.exists(), reason="no autogroup scheduling on this kernel")
@pytest.mark.parametrize("niceness", [0, 7])
def test_a_task_session_gets_the_drivers_niceness(niceness):
    done = subprocess.run(
        [sys.executable, "-c", NICED_DRIVER, str(niceness)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    # the group's nice is the driver's (0: left as the kernel made it, nice 0)
    assert done.stdout.strip().endswith(f"nice {niceness}"), done.stdout


def test_run_command_nices_the_task_it_starts(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(executors, "keep_niceness", started.append)
    result = executors.run_command(["--help"], str(tmp_path / "log"), threads=1)
    assert result["returncode"] == 0 and len(started) == 1 and started[0] > 0
