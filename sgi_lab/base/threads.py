"""How many threads a process started to share this machine runs: the one rule for every launcher.

The rule: a thread count the user set explicitly wins, and otherwise each of the processes
running at once gets its share of the cores, ``cores // processes`` (at least one). "Explicitly"
means ``OMP_NUM_THREADS`` or, without it, ``MKL_NUM_THREADS`` in the launcher's environment, the
order torch reads them in when a process starts. Every thread variable the user did not set
(`THREAD_VARIABLES`) is given that same count, so a process's OpenMP, MKL and OpenBLAS pools
agree. A sweep's notebook kernels (`sgi_lab.launch.sweep.thread_budget`) and an experiment's task
processes (`sgi_lab.experiments.executors`) both take their variables from
`thread_environment`, and both warn with `user_oversubscription`.

Why the user's setting wins: whoever sets ``OMP_NUM_THREADS`` knows something `os.cpu_count`
does not (a job given 4 of a node's 64 cores, a benchmark pinned to one thread, test workers
sharing two cores); replacing it would oversubscribe the cores they were given, or starve the
run. When it asks for more threads than the cores hold, a warning says so and names the share.
On a Ray worker, Ray itself sets ``OMP_NUM_THREADS`` to the task's ``num_cpus`` when the user did
not: it is then the count the task runs with, as the rule says.

Low in the house (nothing of sgi_lab imported): a training run checks its own threads against
the cores with `oversubscribed`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

# Every thread pool a process of ours may start: OpenMP (torch's intra-op threads), MKL, OpenBLAS
# (numpy). torch reads the first two, in this order.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def thread_share(processes: int, cores: int | None = None) -> int:
    """The threads each of ``processes`` processes running at once on one machine gets: its
    share of the ``cores`` (default this machine's), at least one."""
    cores = cores or os.cpu_count() or 1
    return max(1, cores // max(1, processes))


def _explicit(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """``(name, value)`` of the thread variable torch would read: the first of
    ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` set to something; None when neither is."""
    for name in THREAD_VARIABLES[:2]:
        value = (environ.get(name) or "").strip()
        if value:
            return name, value
    return None


def user_threads(environ: Mapping[str, str] | None = None) -> int | None:
    """The thread count the user set explicitly: ``OMP_NUM_THREADS``, else ``MKL_NUM_THREADS``
    (torch's order), as a positive number of threads; None when neither is set, or when the one
    set is not a count."""
    explicit = _explicit(os.environ if environ is None else environ)
    if explicit is None:
        return None
    value = explicit[1].split(",")[0].strip()  # OpenMP allows "4,2" (threads per nesting level)
    return int(value) if value.isdigit() and int(value) > 0 else None


def thread_environment(share: int, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The thread variables a process started now runs with: the user's explicit count
    (`user_threads`) when there is one, else ``share``; a variable the user set keeps its value.

    Args:
        share: the threads the launcher gives the process (`thread_share`, a Ray task's CPUs).
        environ: the launcher's environment (default ``os.environ``).

    Returns:
        ``{name: value}`` for every name in `THREAD_VARIABLES`, to merge into the process's
        environment.
    """
    environ = os.environ if environ is None else environ
    count = str(user_threads(environ) or share)
    return {name: environ.get(name) or count for name in THREAD_VARIABLES}


def oversubscribed(
    threads: int, processes: int = 1, extra: int = 0, cores: int | None = None
) -> bool:
    """Whether ``processes`` processes of ``threads`` threads each, beside ``extra`` busy
    single-threaded workers (a finetuning run's environment workers), ask for more threads than
    the ``cores`` (default this machine's): each then slows down several times (two 2-thread
    processes on 2 cores made a 3.2 s pretraining step take 17 s)."""
    cores = cores or os.cpu_count() or 1
    return threads * processes + extra > cores


def user_oversubscription(
    processes: int, cores: int | None = None, environ: Mapping[str, str] | None = None
) -> str | None:
    """A warning when the user's explicit thread count, which `thread_environment` keeps,
    oversubscribes the ``cores`` with ``processes`` processes at once; None otherwise."""
    environ = os.environ if environ is None else environ
    cores = cores or os.cpu_count() or 1
    mine = user_threads(environ)
    if mine is None or not oversubscribed(mine, processes, cores=cores):
        return None
    name, value = _explicit(environ)
    share = thread_share(processes, cores)
    return (
        f"{name}={value} x {processes} parallel runs oversubscribes {cores} cores (each "
        f"run slows down several times); the setting is kept: use {name}={share}, or unset it "
        "to share the cores"
    )


def cpu_times(stat: str = "/proc/stat") -> tuple[int, int] | None:
    """``(busy, total)`` jiffies of all cores since boot (Linux's ``/proc/stat``); None elsewhere."""
    try:
        with open(stat, encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal (guest time is inside user and nice)
    counts = [int(x) for x in fields[1:9]]
    idle = counts[3] + (counts[4] if len(counts) > 4 else 0)
    return sum(counts) - idle, sum(counts)


def load_between(before: tuple[int, int], after: tuple[int, int], cores: int) -> float | None:
    """Cores kept busy between two `cpu_times` readings: the busy share times the cores."""
    total = after[1] - before[1]
    if total <= 0:
        return None
    return cores * (after[0] - before[0]) / total


def current_load(window_s: float = 1.0, cores: int | None = None) -> float | None:
    """The load a run starting now meets: cores kept busy over the next ``window_s`` seconds.

    Where ``/proc/stat`` is missing, the 1-minute load average. The average alone answers for
    the minute before: right after a test suite or another run it reads 1.5 on an idle machine
    (a demo then ran on one thread, idle), and it takes a minute to see a neighbour that just
    started. The caller sleeps through the window, so its own threads are not counted.
    """
    cores = cores or os.cpu_count() or 1
    before = cpu_times()
    if before is not None:
        time.sleep(window_s)
        after = cpu_times()
        if after is not None:
            load = load_between(before, after, cores)
            if load is not None:
                return load
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):  # no load average on this platform
        return None


def busy_machine_threads(
    environ: Mapping[str, str] | None = None,
    load: float | None = None,
    cores: int | None = None,
) -> tuple[int, str] | None:
    """``(1, why)`` when this machine is already busy before a run starts (at least half its
    cores kept busy by other work, `current_load`) and the user set no thread count; else None.

    On a shared CPU, two torch threads per process run far slower than one (measured on a
    2-core machine at load 7-8: 8.97 s against 0.95 s a pretraining step, issue of the demo's
    3-hour run): the threads wait on each other while other work holds the cores. One thread
    then is the faster choice; the message says so and how to override it.
    """
    environ = os.environ if environ is None else environ
    if user_threads(environ) is not None:
        return None
    cores = cores or os.cpu_count() or 1
    if load is None:
        load = current_load(cores=cores)
        if load is None:
            return None
    if cores < 2 or load < cores / 2:
        return None
    return 1, (
        f"this machine is busy (load {load:.1f} on {cores} cores before starting): running one "
        "torch thread a process, which is several times faster than two on shared cores; set "
        "OMP_NUM_THREADS to choose another count"
    )
