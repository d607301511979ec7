"""How a run stops before it finishes, at a step it can resume from: a time limit or a stop
request (`Deadline`), signals turned into such a request (`stop_on_signals`), the exception that
says so (`RunStopped`), the words a stopped or failed run's ``status.json`` gives
(`failure_reason`), and a time limit read from the command line (`parse_duration`).
"""

from __future__ import annotations

import contextlib
import math
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from sgi_lab.base.files import DiskFullError
from sgi_lab.config import ConfigError


class RunStopped(Exception):
    """A run stopped cleanly before finishing, at a step it has a checkpoint for: its time
    limit passed or it was asked to stop (SIGTERM). The same command resumes it."""

    def __init__(self, step: int | None, why: str) -> None:
        where = "during its evaluation" if step is None else f"at step {step}"
        super().__init__(f"stopped {where}: {why}; re-run the same command to resume")
        self.step = step
        self.why = why


class Deadline:
    """When a long run should stop at its next checkpointable step: ``seconds`` after it was
    made (None: no time limit), or as soon as `request_stop` is called (a SIGTERM handler, a
    scheduler's pre-emption notice).

    A GPU lent for ten-minute commands, a cluster's wall-clock limit: the run checkpoints and
    stops inside the limit instead of being killed and losing the work since its last periodic
    checkpoint.
    """

    def __init__(self, seconds: float | None = None) -> None:
        if seconds is not None and not seconds > 0:
            raise ConfigError(f"a time limit must be a positive number of seconds, got {seconds!r}")
        self.seconds = seconds
        self.end = math.inf if seconds is None else time.monotonic() + seconds
        self.requested: str | None = None

    def request_stop(self, why: str = "asked to stop") -> None:
        self.requested = why

    def left(self) -> float:
        """Seconds until the time limit (inf without one)."""
        return self.end - time.monotonic()

    def reason(self) -> str | None:
        """Why the run must stop now, or None to go on."""
        if self.requested:
            return self.requested
        if self.left() <= 0:
            return f"its time limit of {self.seconds:g} s passed"
        return None


@contextlib.contextmanager
def stop_on_signals(stop: Deadline, *signums: int) -> Iterator[None]:
    """The first of ``signums`` to arrive asks ``stop`` to stop at the next step (every agent
    checkpoints there) instead of acting at once. A second SIGINT acts as it did before
    (KeyboardInterrupt: a second Ctrl-C stops at once); a second SIGTERM is the same request
    again, never a reason to drop the checkpoint: SIGTERMs come in pairs without anyone asking
    twice (a process group's and its experiment driver's, a shutdown's and the driver's death
    signal), and what stops a process at once is SIGKILL. Outside the main thread nothing
    changes.

    SIGINT is Ctrl-C in a terminal and a notebook's "interrupt kernel"; SIGTERM is what
    `timeout` and schedulers send before they kill.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if signum == signal.SIGTERM and stop.requested:
            return  # already stopping at a checkpoint: the same request again
        if signum != signal.SIGTERM:
            for number, before in previous.items():
                signal.signal(number, before)
        stop.request_stop(f"{name} received")
        again = (
            "SIGKILL stops it at once, without one"
            if signum == signal.SIGTERM
            else "send it again to stop at once without one"
        )
        print(
            f"{name}: stopping at the next step, with a checkpoint; {again}",
            file=sys.stderr,
            flush=True,
        )

    for number in signums:
        before = signal.signal(number, handler)
        previous[number] = signal.SIG_DFL if before is None else before
    try:
        yield
    finally:
        for number, before in previous.items():
            signal.signal(number, before)


def failure_reason(exc: BaseException) -> str:
    """The ``message`` of a run that ended with ``exc`` (status.json)."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (re-run the same command to resume)"
    if isinstance(exc, RunStopped):
        return str(exc)
    if isinstance(exc, DiskFullError):
        return f"stopped: {exc}; free some space, then re-run the same command to resume"
    return f"{type(exc).__name__}: {exc}"


def parse_duration(text: str | float) -> float:
    """Seconds from ``540``, ``90s``, ``9m``, ``1.5h``; a clear error otherwise."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([smh]?)\s*", str(text))
    seconds = float(match[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[match[2]] if match else 0
    if not seconds > 0:
        raise ConfigError(f"a duration like 540, 90s, 9m or 1.5h was expected, got {text!r}")
    return seconds
