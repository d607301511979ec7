"""How far a training run has got, read from its ``metrics.jsonl``: the one poller behind
`sgi-lab status`, `sgi-lab run`'s bar and the demo's.

A run logs a row every ``log_every`` steps, so its step moves in jumps; the rate is measured
from the moments the jumps were seen (`RateMeter`), after warm-up: nothing before the first
row counts (kernel start, imports, loading the data, compiling), and a finetuning run starts
measuring again when learning starts (its first steps only act, hundreds a second; then every
step also updates the networks). A one-off reader (`sgi-lab status`) has no such history and
takes the run's own logged throughput instead (`logged_rate`).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sgi_lab.base.files import read_mapping

TAIL_BYTES = 64 * 1024  # the end of a metrics.jsonl read for its last rows: runs log a lot
UPDATES = "charts/updates"  # a finetuning row's gradient updates so far (0 before learning)


def last_rows(path: str | os.PathLike, count: int = 20) -> list[dict[str, Any]]:
    """The last ``count`` complete rows of a JSON-lines file (read from its end; a torn line,
    being written, is skipped); none when the file is missing."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - TAIL_BYTES))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    rows = []
    for line in lines[-count:]:
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a torn first or last line
        if isinstance(row, dict) and _count(row.get("step")) is not None:
            rows.append(row)
    return rows


def logged_rate(rows: list[dict[str, Any]], config: dict[str, Any]) -> float | None:
    """Steps per second from the run's own throughput metric, the newest row that has it:
    ``charts/sps`` (finetuning, exploration) or ``charts/samples_per_s`` over the config's
    ``batch_size`` (pretraining). Each is measured over its row's window, so it is recent."""
    for row in reversed(rows):
        if isinstance(row.get("charts/sps"), (int, float)):
            return float(row["charts/sps"])
        samples = row.get("charts/samples_per_s")
        batch = config.get("batch_size")
        if isinstance(samples, (int, float)) and isinstance(batch, int) and batch > 0:
            return float(samples) / batch
    return None


def eta_seconds(step: int | None, steps: int | None, rate: float | None) -> float | None:
    """Seconds until step ``steps`` at ``rate`` steps/s; None when any of them is unknown."""
    if step is None or not steps or not rate or rate <= 0:
        return None
    return max(0.0, (steps - step) / rate)


@dataclass
class RateMeter:
    """Steps per second from ``(time, step)`` observations, counting only the moments the step
    changed (a poll that sees the same step again says nothing about the rate).

    The rate is taken over the last ``window_s`` seconds of changes (at least the last two), so
    it follows the run's current speed; `restart` forgets the past, as when learning starts.
    """

    window_s: float = 120.0
    changes: collections.deque[tuple[float, int]] = field(default_factory=collections.deque)

    def observe(self, now: float, step: int) -> None:
        if not self.changes or step != self.changes[-1][1]:
            self.changes.append((now, step))
        cutoff = now - 2 * self.window_s  # older changes are never used again
        while len(self.changes) > 2 and self.changes[1][0] < cutoff:
            self.changes.popleft()

    def restart(self, now: float, step: int) -> None:
        self.changes = collections.deque([(now, step)])

    def rate(self) -> float | None:
        """Steps/s between the oldest change inside the window and the newest; None until two
        changes were seen (the warm-up)."""
        if len(self.changes) < 2:
            return None
        t_new, s_new = self.changes[-1]
        inside = [c for c in list(self.changes)[:-1] if c[0] >= t_new - self.window_s]
        t_old, s_old = inside[0] if inside else self.changes[-2]
        if t_new <= t_old or s_new <= s_old:
            return None
        return (s_new - s_old) / (t_new - t_old)

    def eta(self, steps: int | None, now: float) -> float | None:
        """Seconds left to step ``steps``: the steps after the newest change at `rate`, less the
        time since that change (the run went on since its last row)."""
        rate = self.rate()
        if rate is None or not steps:
            return None
        t_new, s_new = self.changes[-1]
        return max(0.0, (steps - s_new) / rate - (now - t_new))


@dataclass(frozen=True)
class Progress:
    """One reading: ``step`` of ``steps`` (None: not known yet), ``rate`` (steps/s, measured after
    warm-up), ``eta_s`` and ``note`` (what the run is doing, in words)."""

    step: int | None
    steps: int | None
    rate: float | None
    eta_s: float | None
    note: str


class MetricsPoller:
    """Follows the newest ``metrics.jsonl`` at or below ``folder`` (a notebook's run folder, a
    population's agent); ``steps`` is the run's total, else its ``config.yaml``'s."""

    def __init__(
        self,
        folder: str | os.PathLike,
        steps: int | None = None,
        window_s: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.folder, self.steps, self.clock = Path(folder), steps, clock
        self.meter = RateMeter(window_s)
        self._learning = False

    def metrics_file(self) -> Path | None:
        direct = self.folder / "metrics.jsonl"
        if direct.is_file():
            return direct
        found = []
        for path in self.folder.rglob("metrics.jsonl"):
            with contextlib.suppress(OSError):
                found.append((path.stat().st_mtime, str(path), path))
        return max(found)[2] if found else None

    def poll(self) -> Progress:
        now = self.clock()
        path = self.metrics_file()
        if path is None:
            note = "running cells: kernel, imports, data (no training step logged yet)"
            return Progress(None, self.steps, None, None, note)
        config = read_mapping(path.parent / "config.yaml")
        steps = self.steps or _count(config.get("steps"))
        rows = last_rows(path)
        if not rows:
            every = _count(config.get("log_every"))
            note = f"training: steps 1-{every:,}, then its first row" if every else "training"
            return Progress(0, steps, None, None, note)
        last = rows[-1]
        step = int(last["step"])
        updates = _count(last.get(UPDATES))
        if updates and not self._learning:  # learning started: the acting-only rate is past
            self._learning = True
            self.meter.restart(now, step)
        else:
            self.meter.observe(now, step)
        rate = self.meter.rate()
        if steps and step >= steps:
            note = "training done: evaluating, plotting"
        elif rate is None:
            note = "measuring the rate"
        else:
            note = f"{rate:.3g} steps/s"
        if updates and step < (steps or step + 1):
            note += f", {updates:,} updates"
        return Progress(step, steps, rate, self.meter.eta(steps, now), note)


class ProgressBar:
    """A tqdm bar of the training inside ``folder`` while something else (a notebook) runs it:
    its step of its steps, the measured rate and the time left (`MetricsPoller`), or what it is
    doing before it logs; a thread polls every ``every`` seconds. Nothing is written."""

    FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"
    BEFORE = "{desc} [{elapsed}{postfix}]"  # no step, total or rate to show yet

    def __init__(
        self,
        folder: str | os.PathLike,
        label: str,
        steps: int | None = None,
        every: float = 2.0,
        file: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.poller = MetricsPoller(folder, steps, clock=clock)
        self.label, self.every = label, every
        self.file = file if file is not None else sys.stderr
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.bar: Any = None

    def poll(self) -> Progress:
        """Read the run and show it."""
        progress = self.poller.poll()
        bar = self.bar
        if progress.step is None or not progress.steps:
            bar.bar_format = self.BEFORE
        else:
            bar.total = progress.steps  # set, not reset: the elapsed time runs on
            bar.bar_format = self.FORMAT
            bar.n = min(progress.step, progress.steps)
        left = "" if progress.eta_s is None else f", ~{_duration(progress.eta_s)} left"
        bar.set_postfix_str(f"{progress.note}{left}", refresh=False)
        bar.refresh()  # the elapsed time moves even while no row was logged
        return progress

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            with contextlib.suppress(OSError, ValueError):
                self.poll()

    def __enter__(self) -> ProgressBar:
        from tqdm import tqdm

        self.bar = tqdm(
            total=self.poller.steps, desc=self.label, bar_format=self.BEFORE, file=self.file
        )
        with contextlib.suppress(OSError, ValueError):
            self.poll()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with contextlib.suppress(OSError, ValueError):
            self.poll()
        self.bar.close()


def _duration(seconds: float) -> str:
    """``"45 s"``, ``"12 min"``, ``"2.5 h"``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _count(value: Any) -> int | None:
    """A step or total as recorded, when it is a whole number (a bool, a dict, a string: None)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
