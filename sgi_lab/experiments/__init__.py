"""Experiments: a table of the paper as a file, run as a task graph, locally or on Ray.

An experiment file (``params/experiments/*.yaml``, validated by `load_experiment`) declares the
games, the seeds, a data source per name, the pretraining and the finetuning configurations.
`expand` turns it into a graph of tasks, each an ordinary run folder under the experiment
folder (its layout: docs/experiments.md). A task runs when its inputs are complete; a
finished task is skipped when the experiment runs again (an interrupted experiment resumes:
unfinished runs resume from their checkpoints); a failed task is retried, then reported with its
log while independent branches go on. Every task but the report is a subprocess running the
``sgi-lab`` CLI (memory is isolated and the command in ``experiment.json`` reproduces it by
hand). The local executor runs ``max_parallel`` of them, each with ``cpu_count // max_parallel``
torch threads unless the user set ``OMP_NUM_THREADS`` (`sgi_lab.base.threads`); the Ray executor
sends them to a Ray cluster as tasks with resource requests (``num_cpus``, fractional
``num_gpus``). Workers write the run folders in place (a shared
filesystem), or, with ``storage=URI`` (``--storage``), in a scratch folder synced with an object
store (`sgi_lab.experiments.storage`).

``sgi-lab experiment FILE --out DIR --dry-run`` prints the graph and its cost at the speeds
measured in ``benchmarks/README.md`` (`SPEEDS`).

The package, in the order a task flows through it:

- `spec`: the experiment file's dataclasses and `load_experiment`;
- `design`: a study's design and its checks: a pretraining config drawn several times (its
  finetuning seeds dealt to the draws), the arms a question compares;
- `graph`: `Task`, `Graph` and `expand` (data sources as tasks: `data_tasks`; probes as
  tasks: `probe_tasks`);
- `cost`: the measured speeds, `estimate_cost`, the ``--dry-run`` plan and what is left at an
  experiment's own pace (`pace_left`);
- `state`: whether a task is done (locally or in a storage URI), what a worker pulls and pushes;
- `executors`: one task as an ``sgi-lab`` subprocess, `LocalExecutor` and `RayExecutor`;
- `order`: `first_order` (what ``--first`` starts first), `branch_order` (``--branch-first``),
  `rebuild_graph` (``--rebuild``), `run_order` (all three, as a run takes them);
- `scheduler`: `run_graph`;
- `experiment_report`: an experiment's report (``report.html``, ``results.csv``, ``results.md``); a
  file that only makes data (agents and the stores of their runs) is reported by `data_report`
  (its makers' scores, hours and curves, its stores);
- `results_pages`: the docs/results pages' generated tables and figures, and each archived
  study's report, regenerated from ``results/`` (``make results``);
- `study_cost`: what a study's tasks cost, from their own logged speeds, by part (a results
  page's block, and the end of each finetuning report's ``results.md``);
- `question`: a study's declared question answered (P(improvement) over the baseline with
  intervals and Holm-adjusted permutation p values) and the power its design had;
- `rereading`: the declared contrasts re-read under the other readout, per game, per half of
  the seeds and per draw (exploratory: what a sentence is tested against before it is written);
- `archive`: `archive` and `restore`, a finished experiment's small result files in a folder
  meant for git;
- `command`: ``sgi-lab experiment``, what it runs; `options`: its options, without torch.

The names below load their module when first used (`__getattr__`): importing the package, or
`options` for ``sgi-lab experiment --help``, loads neither torch nor the finetuning code.
"""

from sgi_lab.base.lazy import lazy_exports

# name -> the module that defines it, imported on first use
_HOMES = {
    "add_experiment_parser": "options",
    "load_graph": "command",
    "main_experiment": "command",
    "run_experiment": "command",
    "MACHINES": "cost",
    "SPEEDS": "cost",
    "Speed": "cost",
    "estimate_cost": "cost",
    "format_plan": "cost",
    "DRIVER_PID_ENV": "executors",
    "LOCAL_RAY": "executors",
    "RAY_AUTH_HINT": "executors",
    "LocalExecutor": "executors",
    "RayExecutor": "executors",
    "_ray_memory_share": "executors",
    "_task_env": "executors",
    "die_with_driver": "executors",
    "local_ray": "executors",
    "run_command": "executors",
    "finished_agent_folders": "experiment_report",
    "write_report": "experiment_report",
    "Graph": "graph",
    "Task": "graph",
    "expand": "graph",
    "branch_order": "order",
    "first_order": "order",
    "rebuild_graph": "order",
    "run_order": "order",
    "STATES": "scheduler",
    "_oversubscription": "scheduler",
    "run_graph": "scheduler",
    "EXECUTORS": "spec",
    "EXPERIMENT_FILE": "spec",
    "KINDS": "spec",
    "NO_PRETRAINING": "spec",
    "PROBE_KEYS": "spec",
    "RESOURCE_KEYS": "spec",
    "STATE_FILE": "spec",
    "DataSpec": "spec",
    "Experiment": "spec",
    "FinetuneSpec": "spec",
    "PretrainSpec": "spec",
    "ProbeSpec": "spec",
    "load_experiment": "spec",
    "check_experiment_folder": "state",
    "pull_results": "state",
    "storage_plan": "state",
    "stored_task_done": "state",
    "task_done": "state",
    "task_left": "state",
}

__all__ = [
    "DRIVER_PID_ENV",
    "EXECUTORS",
    "EXPERIMENT_FILE",
    "KINDS",
    "LOCAL_RAY",
    "MACHINES",
    "NO_PRETRAINING",
    "PROBE_KEYS",
    "RAY_AUTH_HINT",
    "RESOURCE_KEYS",
    "SPEEDS",
    "STATES",
    "STATE_FILE",
    "DataSpec",
    "Experiment",
    "FinetuneSpec",
    "Graph",
    "LocalExecutor",
    "PretrainSpec",
    "ProbeSpec",
    "RayExecutor",
    "Speed",
    "Task",
    "_oversubscription",
    "_ray_memory_share",
    "_task_env",
    "add_experiment_parser",
    "check_experiment_folder",
    "die_with_driver",
    "estimate_cost",
    "expand",
    "finished_agent_folders",
    "format_plan",
    "load_experiment",
    "load_graph",
    "local_ray",
    "main_experiment",
    "pull_results",
    "run_command",
    "run_experiment",
    "branch_order",
    "first_order",
    "rebuild_graph",
    "run_graph",
    "run_order",
    "storage_plan",
    "stored_task_done",
    "task_left",
    "task_done",
    "write_report",
]


# NAME is imported from its module when first asked for (`sgi_lab.base.lazy`).
__getattr__, __dir__ = lazy_exports(__name__, _HOMES, globals(), __all__)
