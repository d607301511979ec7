"""A task process ends with the experiment driver that started it.

Here, in `base`, so that the CLI's entry point (`sgi_lab.launch.cli.main`, which every command and
every experiment task passes through) arms it without importing `sgi_lab.experiments`, whose
report draws with plotly: a machine with only the training's packages (the GPU image) runs every
training command.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

DRIVER_PID_ENV = "SGI_LAB_DRIVER_PID"


def die_with_driver() -> None:
    """In a task process the experiment driver started (``SGI_LAB_DRIVER_PID`` set): receive
    SIGTERM when the driver dies, however it dies (Linux ``PR_SET_PDEATHSIG``; a finetuning or
    pretraining task then checkpoints and stops), and end at once if it is already gone.
    Elsewhere nothing happens."""
    driver = os.environ.pop(DRIVER_PID_ENV, None)  # not for this process's own children
    if not driver or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != driver:
        os.kill(os.getpid(), signal.SIGTERM)  # the driver died before the signal was armed
