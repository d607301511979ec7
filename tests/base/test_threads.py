"""A run on a machine already busy takes one torch thread unless the user chose a count."""

from __future__ import annotations

from sgi_lab.base import threads
from sgi_lab.base.threads import busy_machine_threads, thread_environment


def test_a_busy_machine_gets_one_thread_and_a_reason_an_idle_one_or_a_users_count_none():
    threads, why = busy_machine_threads({}, load=7.5, cores=2)
    assert threads == 1 and "load 7.5 on 2 cores" in why and "OMP_NUM_THREADS" in why
    assert busy_machine_threads({}, load=1.0, cores=2)[0] == 1  # half the cores: busy
    assert busy_machine_threads({}, load=0.9, cores=2) is None  # under half the cores
    assert busy_machine_threads({"OMP_NUM_THREADS": "2"}, load=9.0, cores=2) is None  # theirs
    assert busy_machine_threads({}, load=9.0, cores=1) is None  # one core: one thread anyway
    assert thread_environment(1, {})["OMP_NUM_THREADS"] == "1"


def test_cpu_times_reads_busy_and_total_jiffies_of_all_cores(tmp_path):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  10 2 3 100 5 0 1 0 0 0\ncpu0 5 1 1 50 2 0 0 0 0 0\n")
    assert threads.cpu_times(str(stat)) == (16, 121)  # idle and iowait are not busy
    stat.write_text("intr 1 2 3\n")
    assert threads.cpu_times(str(stat)) is None
    assert threads.cpu_times(str(tmp_path / "missing")) is None


def test_load_between_two_readings_is_the_busy_share_times_the_cores():
    assert threads.load_between((100, 1000), (250, 1200), cores=2) == 1.5
    assert threads.load_between((100, 1000), (100, 1000), cores=2) is None  # no time passed


def test_the_load_a_run_meets_is_measured_now_not_the_minute_before(monkeypatch):
    # A machine that was busy a minute ago (load average 1.5) and is idle now gets both
    # threads; one whose neighbour just started (load average still 0.1) gets one.
    readings = iter([(1000, 10000), (1010, 10200)])  # 10 of 200 jiffies busy: 0.1 core
    monkeypatch.setattr(threads, "cpu_times", lambda: next(readings))
    monkeypatch.setattr(threads.time, "sleep", lambda s: None)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (1.5, 1.5, 1.5))
    assert threads.current_load(cores=2) == 0.1
    # Without /proc/stat, the load average answers.
    monkeypatch.setattr(threads, "cpu_times", lambda: None)
    assert threads.current_load(cores=2) == 1.5
    monkeypatch.setattr(threads, "current_load", lambda cores=None: 0.1)
    assert busy_machine_threads({}, cores=2) is None
    monkeypatch.setattr(threads, "current_load", lambda cores=None: 1.0)
    assert busy_machine_threads({}, cores=2)[0] == 1
