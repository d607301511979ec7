"""Running tasks: one ``sgi-lab`` subprocess (`run_command`), and the executors that run them,
`LocalExecutor` (a pool on this machine) and `RayExecutor` (Ray tasks with resource requests)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from pathlib import Path
from typing import Any

from sgi_lab.base.driver import DRIVER_PID_ENV, die_with_driver  # noqa: F401  (re-exported)
from sgi_lab.base.files import LOCK_WAIT_ENV
from sgi_lab.base.threads import thread_environment
from sgi_lab.experiments.graph import (
    Task,
)
from sgi_lab.experiments.spec import (
    RESOURCE_KEYS,
)
from sgi_lab.experiments.storage import run_in_scratch
from sgi_lab.train.capacity import MEMORY_SHARE_ENV

# -- running one command ------------------------------------------------------------------------


def _task_env(threads: int, memory_share: float = 1.0) -> dict[str, str]:

    env = dict(os.environ)
    # The user's explicit thread setting wins, else the task's share (`sgi_lab.base.threads`).
    env.update(thread_environment(threads, env))
    env.setdefault("PYTHONUNBUFFERED", "1")
    # The task dies with this driver (`die_with_driver`), and waits for the folder's lock a
    # task process left by a killed driver holds while it stops at its next checkpoint.
    env[DRIVER_PID_ENV] = str(os.getpid())
    env.setdefault(LOCK_WAIT_ENV, "300")
    # The part of the device's free memory a task may plan for (`sgi_lab.train.capacity`):
    # tasks sharing a machine must not each size their populations to all of it.
    env[MEMORY_SHARE_ENV] = f"{min(max(memory_share, 0.01), 1.0):.4g}"
    return env


_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()


def run_command(
    argv: Sequence[str],
    log: str,
    threads: int,
    cwd: str | None = None,
    memory_share: float = 1.0,
) -> dict:
    """Run ``sgi-lab ARGV`` in a subprocess with ``threads`` torch threads and ``memory_share``
    of the free memory to plan populations for, appending its output to ``log``; never raises.
    Returns ``{returncode, seconds, tail}`` (the log's last lines)."""
    command = [sys.executable, "-m", "sgi_lab.launch.cli", *argv]
    started = time.time()
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as fh:
        fh.write(f"\n== {time.strftime('%Y-%m-%dT%H:%M:%S')} sgi-lab {' '.join(argv)}\n")
        fh.flush()
        try:
            proc = subprocess.Popen(
                command,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=_task_env(threads, memory_share),
                cwd=cwd if cwd and Path(cwd).is_dir() else None,
                # Its own session: a signal to the driver's process group (a terminal's Ctrl-C,
                # ``kill -- -PGID``) reaches the driver alone, which passes on one SIGTERM. In
                # the driver's group, the task got the signal twice (the group's, then the
                # driver's), and a second signal stops a run at once, without its checkpoint.
                # A task still ends with its driver (`die_with_driver`).
                start_new_session=True,
            )
        except OSError as exc:
            fh.write(f"could not start: {exc}\n")
            return {"returncode": -1, "seconds": 0.0, "tail": str(exc)}
        keep_niceness(proc.pid)
        with _LIVE_LOCK:
            _LIVE.add(proc)
        try:
            returncode = proc.wait()
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(proc)
    return {"returncode": returncode, "seconds": time.time() - started, "tail": _tail(log)}


def keep_niceness(pid: int) -> None:
    """Give task ``pid``'s session the driver's niceness, so that ``nice sgi-lab experiment``
    runs its tasks in the background. Each task has a session of its own (`run_command`), and
    under Linux's autogroup scheduling (on in most distributions) a session is a scheduling
    group whose share of the CPU ignores its processes' nice values: two niced tasks took
    about 70 % of a core each beside a test suite's two workers, at 30 % each. Best effort:
    nothing happens without autogroup or when the driver is not niced."""
    niceness = os.nice(0)
    if niceness <= 0:
        return
    try:
        Path(f"/proc/{pid}/autogroup").write_text(str(niceness))
    except OSError:  # no autogroup (not Linux, or a kernel without it), or the task is gone
        pass


def _tail(log: str, lines: int = 15) -> str:
    try:
        text = Path(log).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


def _stop_children(patience: float = 600.0) -> None:
    """SIGTERM to every task process, then wait while each checkpoints and stops (a
    population's checkpoint with its replay can take a minute); one still running after
    ``patience`` seconds, or a second Ctrl-C meanwhile, is killed (it resumes from its last
    periodic checkpoint)."""
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for proc in procs:
        proc.terminate()
    if procs:
        print(
            f"waiting for {len(procs)} task process(es) to checkpoint and stop "
            "(Ctrl-C again to kill them at once)",
            file=sys.stderr,
            flush=True,
        )
    deadline = time.monotonic() + patience
    try:
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
    except KeyboardInterrupt:
        for proc in procs:
            proc.kill()
        raise


# -- executors ----------------------------------------------------------------------------------


class LocalExecutor:
    """At most ``max_parallel`` task processes at a time on this machine."""

    def __init__(self, max_parallel: int, threads: int) -> None:
        self.capacity = max_parallel
        self.threads = threads
        self.pool = ThreadPoolExecutor(max_workers=max_parallel)

    def submit(self, task: Task, log: str, cwd: str, plan: dict | None = None) -> Future:
        # Up to max_parallel tasks share this machine's memory (and GPU).
        run = functools.partial(run_command, memory_share=1.0 / self.capacity)
        if plan is not None:
            return self.pool.submit(run_in_scratch, task.argv, self.threads, cwd, plan, run)
        return self.pool.submit(run, task.argv, log, self.threads, cwd)

    def wait(self, handles: list[Any], timeout: float) -> list[Any]:
        done, _ = wait_futures(handles, timeout=timeout, return_when=FIRST_COMPLETED)
        return list(done)

    @staticmethod
    def result(handle: Future) -> dict:
        return handle.result()

    def check(self, task: Task) -> str | None:
        return None

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _ray_memory_share(resources: dict[str, float]) -> float:
    """A Ray task's part of its node's memory: its GPU fraction (a task holding part of a GPU
    shares it), all of it with a whole GPU, else its CPUs over the node's."""
    gpus = float(resources.get("num_gpus", 0) or 0)
    if gpus > 0:
        return min(gpus, 1.0)
    return min(1.0, float(resources.get("num_cpus", 1) or 1) / (os.cpu_count() or 1))


def _ray_run_command(
    argv: Sequence[str], log: str, threads: int, cwd: str | None, resources: dict | None = None
) -> dict:
    return run_command(argv, log, threads, cwd, _ray_memory_share(resources or {}))


def _ray_run_in_scratch(
    argv: Sequence[str], threads: int, cwd: str | None, plan: dict, resources: dict | None = None
) -> dict:
    run = functools.partial(run_command, memory_share=_ray_memory_share(resources or {}))
    return run_in_scratch(argv, threads, cwd, plan, run)


# Since Ray 2.59 `ray start --head` turns token authentication on by itself when it finds a token
# (~/.ray/auth_token, RAY_AUTH_TOKEN[_PATH]); a driver joining by address does not (by design),
# and is refused with InvalidAuthToken until RAY_AUTH_MODE says so.
RAY_AUTH_HINT = (
    "If the cluster uses token authentication (`ray start` turns it on when ~/.ray/auth_token "
    "exists), set RAY_AUTH_MODE=token here too (and RAY_AUTH_TOKEN when the token is not in "
    "~/.ray/auth_token); see https://docs.ray.io/en/latest/ray-security/token-auth.html"
)


# `ray.init` arguments that start a private local cluster: always a new one, and no dashboard
# (its HTTP server would be one more listener). Ray 2.60 binds its gRPC servers (GCS, raylet,
# workers) to every interface and re-resolves a 127.0.0.1 node address to a routable one, with
# no setting to keep them on the loopback interface; what guards them is Ray's token
# authentication, on by default for a new local cluster since Ray 2.5x (a peer without the
# token, kept in ~/.ray/auth_token, is refused). RAY_AUTH_MODE=disabled turns it off.
LOCAL_RAY = {"address": "local", "include_dashboard": False}


def local_ray(ray: Any, **kwargs: Any) -> None:
    """Start a private local Ray cluster (`LOCAL_RAY`)."""
    ray.init(**LOCAL_RAY, **kwargs)


class RayExecutor:
    """Tasks on a Ray cluster (`ray.remote` with ``num_cpus``/``num_gpus`` per task kind), for
    experiments (`submit`, `wait`, `result`) and sweeps (`map`).

    Run folders are written by the workers: every node must see the experiment folder at the
    same path (a shared filesystem), or the run folders go through a storage URI (``--storage``:
    each task pulls its inputs into a scratch folder and pushes its run folder back).

    Args:
        address: the cluster to join (``ray.init(address=...)``; ``auto``: the one ``ray start``
            runs on this machine); None starts a private local cluster (`local_ray`). Nothing
            happens when Ray is already initialised in this process.
        log_to_driver: show the workers' output here.

    Raises:
        ImportError: Ray is not installed (the message says how to install it).
        ConnectionError: the cluster at ``address`` refused or was not found.
    """

    def __init__(self, address: str | None = None, log_to_driver: bool = False) -> None:
        try:
            import ray
        except ImportError as exc:
            raise ImportError(
                "the Ray executor needs Ray, an optional extra: pip install 'sgi-lab[sweep]' "
                "(or pip install 'ray[default]'; or use the local executor)"
            ) from exc
        self.ray = ray
        if not ray.is_initialized():
            # Without an address: a private cluster of this machine (`local_ray`).
            options = {"ignore_reinit_error": True, "log_to_driver": log_to_driver}
            try:
                if address:
                    ray.init(address=address, **options)
                else:
                    local_ray(ray, **options)
            except ConnectionError as exc:
                raise ConnectionError(f"{exc}. {RAY_AUTH_HINT}") from exc
        self.remote = ray.remote(_ray_run_command)
        self.remote_in_scratch = ray.remote(_ray_run_in_scratch)
        self.capacity = 10**9  # Ray queues by resources
        self.cluster = ray.cluster_resources()

    def check(self, task: Task) -> str | None:
        """Why the cluster can never run ``task`` (a resource it lacks), or None."""
        for key, ray_key in (("num_cpus", "CPU"), ("num_gpus", "GPU")):
            want = float(task.resources.get(key, 0) or 0)
            have = float(self.cluster.get(ray_key, 0))
            if want > have:
                return (
                    f"asks for {key}={want:g} but the Ray cluster has {have:g} {ray_key}; "
                    f"change the experiment's resources.{task.kind}.{key}"
                )
        return None

    def submit(self, task: Task, log: str, cwd: str, plan: dict | None = None) -> Any:
        threads = max(1, int(task.resources.get("num_cpus", 1) or 1))
        options = {k: float(task.resources.get(k, 0) or 0) for k in RESOURCE_KEYS}
        if plan is not None:
            remote = self.remote_in_scratch.options(**options, max_retries=0)
            return remote.remote(task.argv, threads, cwd, plan, options)
        remote = self.remote.options(**options, max_retries=0)
        return remote.remote(task.argv, log, threads, cwd, options)

    def map(self, fn: Callable[..., Any], calls: Sequence[tuple], options: dict[str, Any]) -> list:
        """``fn(*call)`` for every call, each a Ray task with ``options`` (`ray.remote`'s:
        ``num_cpus``, ``num_gpus``), all at once; their results in order (a sweep's points)."""
        remote = self.ray.remote(**options)(fn)
        return self.ray.get([remote.remote(*call) for call in calls])

    def wait(self, handles: list[Any], timeout: float) -> list[Any]:
        done, _ = self.ray.wait(handles, num_returns=1, timeout=timeout)
        return done

    def result(self, handle: Any) -> dict:
        try:
            return self.ray.get(handle)
        except Exception as exc:  # a worker that died, an object lost with its node
            return {"returncode": -1, "seconds": 0.0, "tail": f"{type(exc).__name__}: {exc}"}

    def close(self) -> None:
        pass
