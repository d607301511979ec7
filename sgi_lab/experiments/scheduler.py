"""The scheduler: `run_graph` runs every unfinished task of a graph in dependency order (or
the order `sgi_lab.experiments.order` gives), retrying failures and recording each task's state
in ``experiment.json``."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from sgi_lab.base.files import FolderLock, atomic_write_text
from sgi_lab.base.threads import oversubscribed, thread_share, user_oversubscription
from sgi_lab.config import ConfigError
from sgi_lab.experiments import archive as archives
from sgi_lab.experiments.data_report import keep_data_report
from sgi_lab.experiments.executors import (
    LocalExecutor,
    RayExecutor,
    _stop_children,
)
from sgi_lab.experiments.experiment_report import write_report
from sgi_lab.experiments.graph import (
    Graph,
    Task,
    check_inside,
    is_data_experiment,
)
from sgi_lab.experiments.order import REBUILD_NEEDS_ARCHIVE, run_order
from sgi_lab.experiments.spec import (
    EXECUTORS,
    EXPERIMENT_FILE,
    STATE_FILE,
)
from sgi_lab.experiments.state import (
    _log_path,
    _name,
    _report_stale,
    check_experiment_folder,
    pull_results,
    storage_plan,
    stored_task_done,
    task_done,
    unneeded,
)
from sgi_lab.experiments.storage import RunStorage
from sgi_lab.runs.status import rebuilt_record

# -- the scheduler ------------------------------------------------------------------------------


def _oversubscription(graph: Graph, max_parallel: int) -> list[str]:
    """Warnings when the settings ask for more threads than the machine has cores."""
    cores = os.cpu_count() or 1
    notes = []
    if max_parallel > cores:
        notes.append(
            f"--max-parallel {max_parallel} runs more processes than the {cores} cores "
            "(each still gets one torch thread)"
        )
    for path, payload in graph.params_files.items():
        threads = int(payload.get("config", {}).get("threads", 0) or 0)
        if threads and oversubscribed(threads, max_parallel, cores=cores):
            notes.append(
                f"{Path(path).name} sets threads={threads}: {max_parallel} processes x {threads} "
                f"threads > {cores} cores"
            )
    note = user_oversubscription(max_parallel, cores)  # the user's setting is kept per task
    if note:
        notes.append(note)
    return notes


class _Progress:
    """A tqdm bar over tasks with pending / running / done / failed counts."""

    def __init__(self, total: int, enabled: bool) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, desc="tasks", unit="task", disable=not enabled, leave=True)
        self.enabled = enabled

    def update(self, states: dict[str, str]) -> None:
        counts = {s: sum(v == s for v in states.values()) for s in STATES}
        settled = counts["done"] + counts["failed"] + counts["blocked"] + counts["unneeded"]
        self.bar.n = settled
        self.bar.set_postfix_str(
            " ".join(
                f"{s} {counts[s]}" for s in STATES if counts[s] or s not in ("blocked", "unneeded")
            ),
            refresh=True,
        )

    def write(self, line: str) -> None:
        if self.enabled:
            self.bar.write(line)

    def close(self) -> None:
        self.bar.close()


# unneeded: a dataset or pretraining run not done whose every reader is (restored from an
# archive, `sgi_lab.experiments.archive`): nothing is left that would read it.
STATES = ("pending", "running", "done", "failed", "blocked", "unneeded")


def run_graph(
    graph: Graph,
    executor: str = "local",
    max_parallel: int = 1,
    retries: int = 1,
    address: str | None = None,
    progress: bool = True,
    on_event: Callable[[str, Task, dict], None] | None = None,
    storage: str | None = None,
    first: Sequence[str] = (),
    branch_first: bool = False,
    archive: str | os.PathLike | None = None,
    rebuild: Sequence[str] = (),
) -> dict[str, Any]:
    """Run every task of ``graph`` whose folder is not complete, in dependency order.

    Args:
        graph: `expand`'s graph.
        executor: ``"local"`` (subprocesses on this machine) or ``"ray"``.
        max_parallel: local executor: task processes at a time (each gets
            ``cpu_count // max_parallel`` torch threads).
        retries: how many times a failed task is run again before it is reported failed.
        address: Ray executor: the cluster to join (``ray.init(address=...)``; ``auto``: the
            one ``ray start`` runs on this machine); None starts a private local cluster
            (`local_ray`: no dashboard, token authentication).
        progress: the tqdm display of tasks pending / running / done / failed.
        on_event: called as ``on_event(event, task, info)`` for ``started``, ``done``,
            ``retry``, ``failed``, ``skipped`` and ``unneeded`` (tests use it).
        storage: an fsspec URI (``s3://bucket/exp``) holding the run folders, for a cluster
            without a shared filesystem: each task runs in a scratch folder of its worker that
            pulls its inputs from there and pushes its run folder back (`run_in_scratch`);
            finished tasks are read from there; ``experiment.yaml``, ``params/`` and
            ``experiment.json`` are copied there; the finetuning runs and logs are pulled
            into ``graph.out`` for the report. None: workers write ``graph.out`` directly.
        first: task-id patterns (``fnmatch``: ``finetune/sgi_none/*``) whose tasks, with
            everything they read, start before the others, in the patterns' order
            (`first_order`): the comparison a long study is run for is answered early. The
            others fill the free slots.
        branch_first: after ``first``, each finetuning task and what it reads before the next
            (`branch_order`): whole branches land one after another.
        archive: a folder that keeps the experiment's results for a fresh clone
            (`sgi_lab.experiments.archive`, e.g. ``results/NAME`` in git): first
            restored into ``graph.out`` where they are missing (the tasks they complete are
            done; datasets and pretraining runs that only they read are ``unneeded``), then
            every finished task's results are archived, each as it finishes.
        rebuild: pretraining task-id patterns (``pretrain/s__*``; needs ``archive``): run only
            those, with what they read, again where the archive restored them without their
            model, for another experiment to reuse (``run:``; `rebuild_graph`); each is checked
            against the archived run's curve (`_Run.check_rebuilt`: one that differs fails and
            a ``run:`` refuses it), never archived; ``experiment.json`` then records those
            tasks only, until the next whole run.

    Returns:
        The ``experiment.json`` payload: per task its state (done, failed or blocked: an input
        failed), attempts, seconds, error (the log's tail) and log; ``counts`` per state.
    """
    _check_settings(graph, executor, max_parallel, retries, storage, archive, rebuild)
    graph = run_order(graph, first, branch_first, rebuild)
    check_inside(graph)  # a graph built by hand gets the check `expand` makes
    check_experiment_folder(graph.out, graph.experiment.name)
    if archive is not None:  # refused before anything is written
        archives.check_archive_folder(Path(archive), graph)
    graph.out.mkdir(parents=True, exist_ok=True)
    lock = FolderLock(graph.out, f"the experiment {graph.experiment.name!r}", wait=0)
    try:
        with _terminate_as_interrupt():
            return _run_graph(
                graph,
                executor,
                max_parallel,
                retries,
                address,
                progress,
                on_event,
                storage,
                archive,
                bool(rebuild),
            )
    finally:
        lock.release()


def _check_settings(graph, executor, max_parallel, retries, storage, archive, rebuild) -> None:
    """`run_graph`'s settings that cannot go together, and data the graph reads that is not
    made yet (`Graph.missing_data`), refused before anything is written."""
    if graph.missing_data:
        raise ConfigError(graph.missing_data[0])
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {EXECUTORS}, got {executor!r}")
    if max_parallel < 1 or retries < 0:
        raise ValueError("max_parallel must be >= 1 and retries >= 0")
    if archive is not None and storage:
        raise ValueError("archive and storage together are not supported: choose one")
    if rebuild and archive is None:
        raise ValueError(REBUILD_NEEDS_ARCHIVE)


class Terminated(KeyboardInterrupt):
    """SIGTERM while a graph runs: handled as Ctrl-C is (the task processes are stopped,
    each at a checkpoint, and put back to pending), for schedulers, `timeout` and ``kill``."""


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises `Terminated` in the main thread while the graph runs (a shell's
    background job ignores SIGINT, so SIGTERM is how it is stopped cleanly); elsewhere, or
    outside, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, previous)  # a second SIGTERM acts as before
        raise Terminated("SIGTERM")

    # None: a handler not installed from Python (restored as the default)
    previous = signal.signal(signal.SIGTERM, handler) or signal.SIG_DFL
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_graph(
    graph,
    executor,
    max_parallel,
    retries,
    address,
    progress,
    on_event,
    storage,
    archive,
    rebuild=False,
):
    out = graph.out
    write_inputs(graph, out)
    conflicts: list[Path] = []
    if archive is not None:
        conflicts = _restore(graph, Path(archive), progress)
    if executor == "local":
        for note in _oversubscription(graph, max_parallel):
            warnings.warn(note, RuntimeWarning, stacklevel=2)
    store = _open_storage(out, storage)
    runner = (
        LocalExecutor(max_parallel, thread_share(max_parallel))
        if executor == "local"
        else RayExecutor(address)
    )
    run = _Run(graph, executor, store, storage, retries, on_event, archive)
    run.rebuild = bool(rebuild)
    run.skip_finished()
    run.refuse_conflicts(conflicts)
    display = _Progress(len(graph.tasks), progress)
    run.display = display
    try:
        while True:
            run.start_ready(runner)
            run.save()
            display.update(run.states)
            if not run.running:
                if all(s != "pending" for s in run.states.values()):
                    break
                if not any(
                    run.states[t.id] == "pending" and t.kind == "report" for t in graph.tasks
                ):
                    break  # nothing can start (cannot happen in a DAG; a guard)
                continue
            for handle in runner.wait(list(run.running), timeout=1.0):
                run.finish(handle, runner.result(handle))
    except BaseException:
        if executor == "local":
            _stop_children()
        run.interrupted()
        raise
    finally:
        runner.close()
        display.close()
    return run.save()


def _restore(graph: Graph, archive: Path, progress: bool) -> list[Path]:
    """`archives.restore` when the archive has an index yet, saying what it did; returns the
    run folders it left as they were (their files differ from the archive's)."""
    if not (archive / archives.ARCHIVE_FILE).is_file():
        return []
    result = archives.restore(graph, archive)
    lines = [f"restored {len(result['restored'])} tasks' results from {archive}"]
    if result["changed"]:
        lines.append(
            f"  not restored (command or params changed since archived): {len(result['changed'])}"
            f" tasks, e.g. {result['changed'][0]}"
        )
    for folder in result["conflicts"]:
        lines.append(f"  left as it is (its files differ from the archive's): {folder}")
    if progress or result["changed"] or result["conflicts"]:
        print("\n".join(lines), flush=True)
    return list(result["left_alone"])


def write_inputs(graph: Graph, out: Path) -> None:
    """``experiment.json`` (first: what marks the folder as ours), ``experiment.yaml`` and the
    resolved params files of the tasks."""
    if not (out / STATE_FILE).exists():
        marker = {"name": graph.experiment.name, "out": str(out), "tasks": {}}
        atomic_write_text(out / STATE_FILE, json.dumps(marker, indent=2))
    atomic_write_text(
        out / EXPERIMENT_FILE, yaml.safe_dump(_experiment_dict(graph), sort_keys=False)
    )
    for path, payload in graph.params_files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, yaml.safe_dump(payload, sort_keys=False))


def _open_storage(out: Path, storage: str | None) -> RunStorage | None:
    """The storage URI's `RunStorage`, holding ``experiment.yaml`` and ``params/``; None
    without one."""
    if not storage:
        return None
    store = RunStorage(storage)
    if store.is_folder(out):
        raise ValueError(f"--storage {storage} is --out itself: leave --storage out instead")
    store.push(out / EXPERIMENT_FILE, EXPERIMENT_FILE)
    store.push(out / "params", "params")
    return store


class _Run:
    """One run of a graph: each task's state and record (``experiment.json``), the tasks
    running (executor handle -> task), and the steps of the scheduler's loop."""

    def __init__(self, graph, executor, store, storage, retries, on_event, archive=None) -> None:
        self.graph = graph
        self.out = graph.out
        self.executor = executor
        self.store = store
        self.storage = storage
        self.retries = retries
        self.emit = on_event or (lambda event, task, data: None)
        self.display: _Progress | None = None
        self.states = {t.id: "pending" for t in graph.tasks}
        self.info: dict[str, dict[str, Any]] = {
            t.id: {
                "kind": t.kind,
                "folder": str(t.folder),
                "attempts": 0,
                "log": str(_log_path(graph, t)),
            }
            for t in graph.tasks
        }
        self.running: dict[Any, Task] = {}
        self.cwd = str(Path.cwd())
        self.started_at = time.strftime("%Y-%m-%dT%H:%M:%S")
        self.pushed = ""
        self.archive = Path(archive) if archive is not None else None  # results kept for git
        self.rebuild = False  # --rebuild: each pretraining run is checked against the archive

    def done(self, task: Task) -> bool:
        if self.rebuild and self.rebuilt_differs(task):
            return False  # rebuilt before, not the archived run: rebuilt again, from its start
        return self.complete(task)

    def complete(self, task: Task) -> bool:
        """The task's folder holds its whole result (`task_done`, or in the storage)."""
        if self.store is None or task.kind == "report":
            return task_done(task)
        return stored_task_done(self.graph, task, self.store)

    def skip_finished(self) -> None:
        """Mark done, without running them, the tasks whose folders are complete (archived,
        with an archive), and ``unneeded`` the unfinished tasks whose every reader is done."""
        for task in self.graph.tasks:
            if task.kind != "report" and self.done(task):
                self.states[task.id] = "done"
                self.info[task.id]["skipped"] = True
                self.emit("skipped", task, self.info[task.id])
        left_out = unneeded(self.graph, {t for t, state in self.states.items() if state == "done"})
        for task in self.graph.tasks:
            if task.id in left_out:
                self.states[task.id] = "unneeded"
                self.info[task.id]["skipped"] = True
                self.emit("unneeded", task, self.info[task.id])
        self.keep()

    def refuse_conflicts(self, folders: list[Path]) -> None:
        """Fail, without running them, the unfinished tasks that would write into a run folder
        the restore left as it was (its files differ from the archive's: someone's edits, or
        another run's): running would overwrite what "left as it is" promised to keep."""
        left = {Path(f).resolve() for f in folders}
        for task in self.graph.tasks:
            if self.states[task.id] != "pending" or task.kind == "report":
                continue
            folders = task.agent_folders if task.kind == "finetune" else (task.folder,)
            # (a run --rebuild made differs from the archive's by design: it checks it itself)
            mine = [
                f
                for f in folders
                if f.resolve() in left and not (f / archives.REBUILT_FILE).exists()
            ]
            if mine:
                self.states[task.id] = "failed"
                self.info[task.id]["error"] = (
                    f"{mine[0]} holds files that differ from the archive's and is left as it "
                    "is; running this task would write over them: move the folder away (or "
                    "restore its files with git) and run again"
                )
                self.emit("failed", task, self.info[task.id])

    def keep(self, tasks: list[Task] | None = None) -> None:
        """Archive the finished ``tasks`` (all by default) when the run has an archive; a
        failure to write it is said, not raised (the next run archives them again)."""
        if self.archive is None:
            return
        try:
            archives.archive(self.graph, self.archive, tasks)
        except OSError as exc:
            message = f"archiving into {self.archive} failed ({exc}); the next run tries again"
            if self.display is not None:
                self.display.write(message)
            else:
                warnings.warn(message, RuntimeWarning, stacklevel=2)

    def save(self) -> dict[str, Any]:
        """Write ``experiment.json`` (and push it to the storage when a task's state changed)."""
        for task_id, state in self.states.items():
            self.info[task_id]["state"] = state
        payload = {
            "name": self.graph.experiment.name,
            "out": str(self.out),
            "executor": self.executor,
            "started": self.started_at,
            "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "counts": {s: sum(v == s for v in self.states.values()) for s in STATES},
            "dropped": list(self.graph.dropped),
            "tasks": self.info,
        }
        text = json.dumps(payload, indent=2, default=str)
        atomic_write_text(self.out / STATE_FILE, text)
        state = text.replace(payload["updated"], "")
        if self.store is not None and state != self.pushed:
            self.store.write_text(STATE_FILE, text)
            self.pushed = state
        return payload

    def start_ready(self, runner: Any) -> None:
        """Submit every pending task whose inputs are done (while the executor has room), block
        those with a failed input, and run the report once every other task has settled."""
        for task in self.graph.tasks:
            if self.states[task.id] != "pending":
                continue
            deps = [self.states[d] for d in task.deps]
            if task.kind == "report":
                if all(d in ("done", "failed", "blocked") for d in deps) and not self.running:
                    self.report(task)
                continue
            if any(d in ("failed", "blocked") for d in deps):
                self.states[task.id] = "blocked"
                self.info[task.id]["error"] = "an input failed: " + ", ".join(
                    d for d in task.deps if self.states[d] != "done"
                )
                continue
            if all(d == "done" for d in deps) and len(self.running) < runner.capacity:
                self.submit(runner, task)

    def submit(self, runner: Any, task: Task) -> None:
        problem = runner.check(task)
        if problem:
            self.states[task.id] = "failed"
            self.info[task.id]["error"] = problem
            self.display.write(f"failed  {task.id}: {problem}")
            self.emit("failed", task, self.info[task.id])
            return
        self.info[task.id]["attempts"] += 1
        plan = storage_plan(self.graph, task, self.storage) if self.storage else None
        submitted = task
        if self.rebuild and self.rebuilt_differs(task):  # its finished run is not the one
            submitted = dataclasses.replace(task, argv=(*task.argv, "--overwrite"))
        handle = runner.submit(submitted, self.info[task.id]["log"], self.cwd, plan)
        self.running[handle] = task
        self.states[task.id] = "running"
        self.emit("started", task, self.info[task.id])

    def report(self, task: Task) -> None:
        store, out = self.store, self.out
        if store is not None:
            pull_results(self.graph, store)
        _run_report(self.graph, task, self.states, self.info, self.display, self.emit)
        done = self.states[task.id] == "done"
        if done and self.archive is not None:
            keep_report_files(self.graph, self.archive)
        if store is not None and done:
            for name in ("report.html", "results.csv", "results.aggregates.csv"):
                if (out / name).exists():
                    store.push(out / name, name)

    def finish(self, handle: Any, result: dict) -> None:
        """Record a task's result: done, retried (while attempts are left) or failed."""
        task = self.running.pop(handle)
        entry = self.info[task.id]
        entry["seconds"] = round(entry.get("seconds", 0.0) + result["seconds"], 1)
        if self.store is not None:  # the log, where experiment.json says it is
            log = _log_path(self.graph, task)
            self.store.pull(_name(self.graph, log), log)
        if result["returncode"] == 0 and self.rebuild and self.complete(task):
            problem = self.check_rebuilt(task)
            if problem:
                entry["error"] = problem
                self.states[task.id] = "failed"
                self.display.write(f"failed  {task.id}: {problem}")
                self.emit("failed", task, entry)
                return
        if result["returncode"] == 0 and self.done(task):
            self.states[task.id] = "done"
            entry.pop("error", None)
            self.keep([task])
            self.display.write(f"done    {task.id} ({result['seconds']:.0f} s)")
            self.emit("done", task, entry)
            return
        entry["error"] = result["tail"] or f"exit status {result['returncode']}"
        if entry["attempts"] <= self.retries:
            self.states[task.id] = "pending"
            self.display.write(f"retry   {task.id} (attempt {entry['attempts']} failed)")
            self.emit("retry", task, entry)
        else:
            self.states[task.id] = "failed"
            self.display.write(f"failed  {task.id}: see {entry['log']}")
            self.emit("failed", task, entry)

    @staticmethod
    def rebuilt_differs(task: Task) -> bool:
        """A pretraining run rebuilt before whose curve was not the archived run's."""
        record = rebuilt_record(task.folder) if task.kind == "pretrain" else None
        return record is not None and not record["same"]

    def check_rebuilt(self, task: Task) -> str:
        """A rebuilt pretraining run against the run the archive kept (``rebuilt.json``):
        "" when they are the same run (or the archive has none to compare), else why not."""
        if task.kind != "pretrain" or self.archive is None:
            return ""
        kept_folder = self.archive / _name(self.graph, task.folder)
        if not (kept_folder / "metrics.jsonl").is_file():
            return ""  # never archived: a first run, not a rebuild
        if not (task.folder / "metrics.jsonl").is_file():
            return "rebuilt, but its metrics.jsonl is missing: nothing to check it against"
        record = archives.compare_rebuilt(task.folder, kept_folder)
        record["archive"] = str(kept_folder)
        text = json.dumps(record, indent=1) + "\n"
        atomic_write_text(task.folder / archives.REBUILT_FILE, text)
        if record["same"]:
            self.display.write(
                f"rebuilt {task.id}: the archived run again ({record['steps']} logged steps, "
                f"largest relative difference {record['max_difference']:.1e})"
            )
            return ""
        return (
            f"rebuilt, but not the archived run: {record['first_difference']} (its "
            f"{archives.REBUILT_FILE}); the experiment's results came from the archived "
            "encoder, so an experiment reusing this one (run:) refuses it. Pretraining "
            "reproduces its run at the same code, on the same kind of CPU, with the same torch "
            "threads a task (OMP_NUM_THREADS, --max-parallel) and SGI_LAB_CPU_SETTINGS as the "
            "archived run: rebuild with the command that made it"
        )

    def interrupted(self) -> None:
        """Put the running tasks back to pending (a run again resumes them) and save."""
        for task in self.running.values():
            self.states[task.id] = "pending"
            self.info[task.id]["error"] = "interrupted (run the experiment again to resume)"
        self.save()


def keep_report_files(graph: Graph, archive: Path) -> list[Path]:
    """What of a written report an archive keeps beside its run files: a data experiment's
    report (`keep_data_report`: the stores' only record, for they are not archived), a
    finetuning study's per-seed score matrices (`archive.keep_study_scores`)."""
    if is_data_experiment(graph):
        return [keep_data_report(graph.out, archive)]
    return archives.keep_study_scores(graph.out, archive)


def _run_report(graph, task, states, info, display, emit) -> None:
    entry = info[task.id]
    finished = [d for d in task.deps if states[d] == "done"]
    if task.kind == "report" and not finished:
        states[task.id] = "blocked"
        kinds = sorted({graph.task(d).kind for d in task.deps}) or ["finetuning"]
        entry["error"] = f"no {' or '.join(kinds)} task finished (see their logs)"
        return
    if all(states[d] == "done" for d in task.deps) and not _report_stale(graph) and task_done(task):
        states[task.id] = "done"
        entry["skipped"] = True
        emit("skipped", task, entry)
        return
    entry["attempts"] += 1
    started = time.time()
    try:
        write_report(graph)
    except Exception as exc:
        states[task.id] = "failed"
        entry["error"] = f"{type(exc).__name__}: {exc}"
        display.write(f"failed  report: {entry['error']}")
        emit("failed", task, entry)
        return
    entry["seconds"] = round(time.time() - started, 1)
    states[task.id] = "done"
    display.write(f"done    report -> {graph.out / 'report.html'}")
    emit("done", task, entry)


def _experiment_dict(graph: Graph) -> dict[str, Any]:
    return json.loads(json.dumps(dataclasses.asdict(graph.experiment), default=str))
