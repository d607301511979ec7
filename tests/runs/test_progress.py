"""The one progress poller (`sgi_lab.runs.progress`): its rate and time left against
hand-computed values, warm-up and learning start left out, and the bar that shows them."""

from __future__ import annotations

import io
import json

import pytest

from sgi_lab.runs.progress import (
    MetricsPoller,
    ProgressBar,
    RateMeter,
    eta_seconds,
    last_rows,
    logged_rate,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def write_rows(folder, rows, torn: str = "") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in rows) + torn
    (folder / "metrics.jsonl").write_text(text)


def test_rate_counts_only_the_moments_the_step_changed():
    meter = RateMeter(window_s=120)
    meter.observe(10.0, 100)  # the first row: warm-up ends here
    assert meter.rate() is None  # one change says nothing about the rate
    for t in (12.0, 30.0, 58.0):
        meter.observe(t, 100)  # polls that see the same row again
    meter.observe(60.0, 200)
    assert meter.rate() == pytest.approx(100 / 50)  # (200 - 100) / (60 - 10), not / (60 - 58)
    # 1,000 steps: 800 left at 2/s = 400 s after the row at t=60; at t=70, 390 s
    assert meter.eta(1000, now=70.0) == pytest.approx(390.0)
    assert meter.eta(1000, now=1000.0) == 0.0  # never negative


def test_rate_follows_the_last_window_not_the_whole_run():
    meter = RateMeter(window_s=120)
    for t, step in [(0.0, 0), (100.0, 100), (200.0, 300)]:
        meter.observe(t, step)
    # inside 120 s of t=200: the change at t=100 -> (300 - 100) / (200 - 100) = 2.0, not 1.5
    assert meter.rate() == pytest.approx(2.0)
    meter.observe(500.0, 400)  # none inside the window but the newest: the one before it
    assert meter.rate() == pytest.approx(100 / 300)


def test_restart_forgets_the_rate_before_it():
    meter = RateMeter()
    meter.observe(0.0, 0)
    meter.observe(10.0, 1000)  # acting only: 100 steps/s
    meter.restart(12.0, 1000)
    assert meter.rate() is None
    meter.observe(62.0, 1100)
    assert meter.rate() == pytest.approx(2.0)


def test_eta_seconds_and_the_logged_rate():
    assert eta_seconds(200, 1000, 4.0) == 200.0
    assert eta_seconds(None, 1000, 4.0) is None and eta_seconds(200, 1000, None) is None
    rows = [{"step": 1, "charts/samples_per_s": 640.0}]
    assert logged_rate(rows, {"batch_size": 32}) == 20.0  # samples/s over the batch
    assert logged_rate([*rows, {"step": 2, "charts/sps": 3.5}], {}) == 3.5  # the newest row's
    assert logged_rate(rows, {}) is None


def test_last_rows_skip_a_torn_line_and_rows_without_a_step(tmp_path):
    write_rows(tmp_path, [{"step": 1}, {"note": "x"}, {"step": 2}], torn='{"step": 3, "lo')
    assert last_rows(tmp_path / "metrics.jsonl") == [{"step": 1}, {"step": 2}]
    assert last_rows(tmp_path / "missing.jsonl") == []


def test_the_poller_says_what_the_run_does_before_its_first_row(tmp_path):
    clock = Clock()
    poller = MetricsPoller(tmp_path / "run", clock=clock)
    assert poller.poll().note.startswith("running cells: kernel, imports, data")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("steps: 2000\nlog_every: 100\n")
    write_rows(tmp_path / "run", [])
    first = poller.poll()
    assert (first.step, first.steps) == (0, 2000)
    assert first.note == "training: steps 1-100, then its first row"


def test_the_eta_waits_for_the_measured_rate_after_warm_up(tmp_path):
    """A 43-minute stage whose first row came fast must not be announced as 38 seconds."""
    clock, run = Clock(), tmp_path / "run"
    poller = MetricsPoller(run, steps=2600, clock=clock)
    clock.now = 300.0  # five minutes of kernel, data and first steps
    write_rows(run, [{"step": 100}])
    seen = poller.poll()
    assert seen.eta_s is None and seen.note == "measuring the rate"
    clock.now = 400.0
    write_rows(run, [{"step": 100}, {"step": 200}])
    seen = poller.poll()
    assert seen.rate == pytest.approx(1.0)  # 100 steps in 100 s
    assert seen.eta_s == pytest.approx(2400.0)  # 2,400 steps left at 1/s


def test_finetuning_measures_again_when_learning_starts(tmp_path):
    clock, run = Clock(), tmp_path / "agent"
    poller = MetricsPoller(run, steps=1000, clock=clock)
    write_rows(run, [{"step": 100, "charts/updates": 0}])
    poller.poll()
    clock.now = 1.0
    write_rows(run, [{"step": 200, "charts/updates": 0}])
    assert poller.poll().rate == pytest.approx(100.0)  # acting only
    clock.now = 5.0
    write_rows(run, [{"step": 300, "charts/updates": 40}])
    assert poller.poll().rate is None  # learning started: measured again from here
    clock.now = 55.0
    write_rows(run, [{"step": 400, "charts/updates": 140}])
    seen = poller.poll()
    assert seen.rate == pytest.approx(2.0)
    assert seen.eta_s == pytest.approx(300.0)
    assert seen.note == "2 steps/s, 140 updates"


def test_the_poller_follows_the_newest_metrics_file_below_a_folder(tmp_path):
    agent = tmp_path / "run" / "Pong__s0"
    write_rows(agent, [{"step": 50}, {"step": 120}], torn='{"step": 130, "lo')
    (agent / "config.yaml").write_text("steps: 200\n")
    seen = MetricsPoller(tmp_path / "run").poll()
    assert (seen.step, seen.steps) == (120, 200)


def test_the_bar_shows_step_rate_and_time_left_never_tqdms_guess(tmp_path):
    clock, run, out = Clock(), tmp_path / "run", io.StringIO()
    with ProgressBar(run, "pretrain", steps=2000, every=60, file=out, clock=clock) as bar:
        assert "pretrain [00:00, running cells" in out.getvalue() and "0it" not in out.getvalue()
        write_rows(run, [{"step": 100}])
        clock.now = 10.0
        bar.poll()
        write_rows(run, [{"step": 100}, {"step": 300}])
        clock.now = 110.0
        bar.poll()
        assert bar.bar.n == 300
    shown = out.getvalue()
    assert "300/2000" in shown and "2 steps/s, ~14 min left" in shown  # 1,700 / 2 = 850 s
    assert "?" not in shown and "s/it" not in shown
