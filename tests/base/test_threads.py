"""A run on a machine already busy takes one torch thread unless the user chose a count."""

from __future__ import annotations

from sgi_lab.base.threads import busy_machine_threads, thread_environment


def test_a_busy_machine_gets_one_thread_and_a_reason_an_idle_one_or_a_users_count_none():
    threads, why = busy_machine_threads({}, load=7.5, cores=2)
    assert threads == 1 and "load 7.5 on 2 cores" in why and "OMP_NUM_THREADS" in why
    assert busy_machine_threads({}, load=1.0, cores=2)[0] == 1  # half the cores: busy
    assert busy_machine_threads({}, load=0.9, cores=2) is None  # under half the cores
    assert busy_machine_threads({"OMP_NUM_THREADS": "2"}, load=9.0, cores=2) is None  # theirs
    assert busy_machine_threads({}, load=9.0, cores=1) is None  # one core: one thread anyway
    assert thread_environment(1, {})["OMP_NUM_THREADS"] == "1"
