"""Notebooks as runs: ``sgi-lab run`` executes a notebook with papermill into its own run folder.

`run_notebook` runs one notebook into ``outputs/runs/<notebook>__<config>__<game>__s<seed>/``
(its files: outputs/README.md; the name: `sgi_lab.notebook.run_folder_name`). The run
folder reaches the notebook as its ``out_dir`` parameter. A finished run is never overwritten
unless asked; a run left ``running`` (killed) or ``failed`` is executed again into the same
folder, where the trainers resume from their last checkpoint. What the notebook's own cells call
is `sgi_lab.notebook`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from sgi_lab.base.errors import SgiLabError
from sgi_lab.base.files import atomic_write_text, jsonable, record_provenance
from sgi_lab.base.paths import close_names, did_you_mean
from sgi_lab.config import ConfigError, load_yaml_mapping, parse_value
from sgi_lab.notebook import (
    DEFAULT_OUT_ROOT,
    FIGURE_FORMATS_ENV,
    RESULTS_FILE,
    figure_formats,
    find_project_root,
    run_folder_name,
    static_export_problem,
)
from sgi_lab.runs.checkpoints import CHECKPOINT_RE
from sgi_lab.runs.folder import RunDir
from sgi_lab.runs.progress import ProgressBar

__all__ = [
    "KEEP_CHECKPOINTS",
    "NotebookRunError",
    "RunExistsError",
    "add_run_parser",
    "main_run",
    "notebook_defaults",
    "parse_parameter",
    "prune_checkpoints",
    "read_param_file",
    "resolve_notebook",
    "resolve_parameters",
    "run_notebook",
]

KEEP_CHECKPOINTS = 1
"""Checkpoints a finished run keeps per ``checkpoints/`` folder: the newest one is the whole
training state (optimizer, replay) to go on from; ``model.pt`` is always kept. While a run is
running its trainer keeps two, so that a kill mid-write still leaves one to resume from."""
PARAMS_FILE = "params.yaml"


class RunExistsError(SgiLabError, FileExistsError):
    """The run folder already holds a finished run (pass ``overwrite=True`` to redo it)."""


class NotebookRunError(SgiLabError, RuntimeError):
    """A notebook failed; ``run_dir`` holds the executed notebook showing the failing cell."""

    def __init__(self, message: str, run_dir: Path) -> None:
        super().__init__(message)
        self.run_dir = run_dir


# -- the notebook -------------------------------------------------------------------------------


def resolve_notebook(notebook: str | os.PathLike) -> Path:
    """``"pretrain"``, ``"pretrain.ipynb"`` or a path -> the notebook file (which must exist)."""
    path = Path(notebook)
    candidates = [path]
    if path.suffix != ".ipynb":
        candidates.append(path.with_name(path.name + ".ipynb"))
    root = find_project_root()
    if root is not None and not path.is_absolute():
        candidates += [root / "notebooks" / c.name for c in candidates]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    known = sorted(p.stem for p in (root / "notebooks").glob("*.ipynb")) if root else []
    close = close_names(path.stem, known)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    listed = f" (notebooks: {', '.join(known)})" if known else ""
    raise FileNotFoundError(f"no notebook {str(notebook)!r}{hint}{listed}")


# -- parameters ---------------------------------------------------------------------------------


def read_param_file(path: str | os.PathLike) -> dict[str, Any]:
    """A papermill parameters file: a YAML mapping of notebook parameter names to values."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(
            f"{path}: a folder, expected a YAML parameters file (e.g. "
            "params/notebooks/pretrain_smoke.yaml)"
        )
    if not path.is_file():
        raise FileNotFoundError(did_you_mean(path, "parameters file"))
    return load_yaml_mapping(path, "a mapping of parameter names to values")


def parse_parameter(raw: str) -> Any:
    """A ``-p KEY VALUE`` value as YAML: ``3`` -> 3, ``true`` -> True, ``1e-4`` -> 0.0001."""
    return parse_value(raw)


def notebook_defaults(notebook: str | os.PathLike) -> dict[str, Any]:
    """The literal values of a notebook's ``parameters`` cell (``{}`` when it has none)."""
    import ast

    import nbformat

    nb = nbformat.read(resolve_notebook(notebook), as_version=4)
    cell = next(
        (
            c
            for c in nb.cells
            if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])
        ),
        None,
    )
    defaults: dict[str, Any] = {}
    if cell is None:
        return defaults
    for node in ast.parse(cell.source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                defaults[target.id] = ast.literal_eval(node.value)
    return defaults


def resolve_parameters(
    params_file: str | os.PathLike | None = None,
    parameters: dict[str, Any] | None = None,
    notebook: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """The notebook's defaults (when ``notebook`` is given), updated by the parameters file's
    mapping, updated by ``parameters``: what the notebook will run with.

    Raises:
        ConfigError: a parameter the notebook's ``parameters`` cell does not define (papermill
            would only warn, and the run would silently ignore it).
    """
    resolved = notebook_defaults(notebook) if notebook is not None else {}
    from_file = read_param_file(params_file) if params_file else {}
    if resolved:
        unknown = sorted((set(from_file) | set(parameters or {})) - set(resolved))
        if unknown:
            hints = [
                f"{key} -> {close[0]}"
                for key in unknown
                if (close := close_names(key, list(resolved)))
            ]
            hint = f"; did you mean {', '.join(hints)}?" if hints else ""
            raise ConfigError(
                f"unknown notebook parameter(s) {unknown} for {Path(notebook).name}{hint} "
                f"(its parameters cell defines: {sorted(resolved)})"
            )
        for key, value in {**from_file, **(parameters or {})}.items():
            _check_parameter_type(key, value, resolved[key], Path(notebook).name)
    resolved.update(from_file)
    resolved.update(parameters or {})
    return resolved


def _check_parameter_type(key: str, value: Any, default: Any, notebook: str) -> None:
    """Refuse a value of another type than a numeric or boolean default's (``-p seed abc``),
    before a run folder is named after it; other defaults (text, None, lists) take anything."""
    if isinstance(default, bool):
        ok, what = isinstance(value, bool), "true or false"
    elif isinstance(default, int):
        ok, what = isinstance(value, int) and not isinstance(value, bool), "an integer"
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        what = "a number"
    else:
        return
    if not ok:
        raise ConfigError(
            f"{key}: expected {what} (the default in {notebook} is {default!r}), got {value!r}"
        )


# -- running ------------------------------------------------------------------------------------


def run_notebook(
    notebook: str | os.PathLike,
    params_file: str | os.PathLike | None = None,
    parameters: dict[str, Any] | None = None,
    out_root: str | os.PathLike = DEFAULT_OUT_ROOT,
    overwrite: bool = False,
    name: str | None = None,
    progress: bool = True,
    kernel_name: str | None = None,
    keep_checkpoints: int | None = KEEP_CHECKPOINTS,
) -> Path:
    """Execute a notebook with papermill into its own run folder.

    Args:
        notebook: ``"pretrain"``, ``"notebooks/pretrain.ipynb"``, or any notebook path.
        params_file: a YAML mapping of parameter names to values (papermill's ``-f``); a
            ``params/<stage>/*.yaml`` file works too (its ``name``/``description``/``config``
            keys are parameters of the pretrain and finetune notebooks).
        parameters: values that win over the file's (papermill's ``-p``).
        out_root: where run folders go.
        overwrite: run again from scratch over a finished run (its folder is emptied).
        name: the run folder's name; default ``<notebook>__<config>__<game>__s<seed>``.
        progress: a bar of the training's step, rate and time left (`sgi_lab.runs.progress`),
            on stderr.
        kernel_name: Jupyter kernel; default the notebook's own (``python3``).
        keep_checkpoints: once the run finishes, the newest checkpoints kept in each of its
            ``checkpoints/`` folders (a population's agents included); None keeps all. A failed
            run keeps every checkpoint, to resume from.

    Returns:
        The run folder, its status ``finished``.

    Raises:
        RunExistsError: the folder holds a finished run and ``overwrite`` is false.
        NotebookRunError: a cell raised; status.json says ``failed`` with the error, and the
            executed notebook in the folder shows the failing cell with its traceback.
    """
    from papermill.exceptions import PapermillExecutionError

    nb_path = resolve_notebook(notebook)
    resolved = resolve_parameters(params_file, parameters, nb_path)
    folder = Path(out_root) / (name or run_folder_name(nb_path.stem, resolved, params_file))
    run, resumed = _open_run_folder(folder, overwrite)
    resolved["out_dir"] = str(folder)
    atomic_write_text(folder / PARAMS_FILE, yaml.safe_dump(jsonable(resolved), sort_keys=False))
    out_nb = folder / nb_path.name
    started = time.time()
    _mark_running(run, nb_path, out_nb, params_file, resumed)
    try:
        _execute(nb_path, out_nb, resolved, kernel_name, progress)
    except PapermillExecutionError as exc:
        message = f"{exc.ename}: {exc.evalue}"
        run.set_status(
            "failed",
            error=message,
            failed_cell=exc.exec_count,
            duration_s=round(time.time() - started, 1),
        )
        raise NotebookRunError(
            f"{nb_path.name} failed in cell [{exc.exec_count}]: {message} "
            f"(the executed notebook is {out_nb})",
            folder,
        ) from exc
    except BaseException as exc:  # kernel died, interrupted: the folder can be resumed
        run.set_status(
            "failed",
            error=f"{type(exc).__name__}: {exc}",
            duration_s=round(time.time() - started, 1),
        )
        raise
    _mark_finished(run, keep_checkpoints, started)
    return folder


def _open_run_folder(folder: Path, overwrite: bool) -> tuple[RunDir, bool]:
    """The run folder (created when missing) and whether an earlier attempt is resumed: a
    finished run is emptied to start afresh when ``overwrite``, else refused.

    Raises:
        RunExistsError: the folder holds a finished run and ``overwrite`` is false.
    """
    run = RunDir(folder)
    state = run.status().get("state", "new")
    if state == "finished":
        if not overwrite:
            made = run.status().get("source") or "a notebook run from JupyterLab"
            raise RunExistsError(
                f"{folder} already holds a finished run (from {made}); add --overwrite to run "
                "it again from scratch, or --name NAME for a run folder of its own "
                "(in Python: overwrite=True, name=...)"
            )
        shutil.rmtree(folder)
        return RunDir(folder), False
    return run, state != "new"


def _mark_running(
    run: RunDir,
    nb_path: Path,
    out_nb: Path,
    params_file: str | os.PathLike | None,
    resumed: bool,
) -> None:
    """status.json says ``running``: which notebook, which attempt (a resumed run counts on
    from the last), and the provenance of this attempt; a previous attempt's error is cleared."""
    attempt = int(run.status().get("attempt", 0)) + 1 if resumed else 1
    run.set_status(
        "running",
        notebook=str(out_nb),
        source=str(nb_path),
        params_file=None if params_file is None else str(params_file),
        attempt=attempt,
        resumed=resumed,
        error=None,
        started=time.strftime("%Y-%m-%dT%H:%M:%S"),
        provenance=record_provenance(run.status()),
    )


def _execute(
    nb_path: Path,
    out_nb: Path,
    parameters: dict[str, Any],
    kernel_name: str | None,
    progress: bool,
) -> None:
    """papermill runs ``nb_path`` into ``out_nb`` with ``parameters``, from the project root,
    its kernel on private sockets and drawing static figures."""
    import papermill

    # lazy: viz.training loads pandas and plotly, which the options (--help) need not
    from sgi_lab.viz.training import STATIC_FIGURES_ENV

    # Static figures in the kernel: the executed notebook and its HTML page keep them.
    # papermill's own bar counts cells (stuck on the training cell for minutes): the bar shown
    # follows the training's metrics.jsonl instead, its step, rate and time left.
    follow = ProgressBar(out_nb.parent, nb_path.stem) if progress else None
    with _environment({STATIC_FIGURES_ENV: "1"}), follow or contextlib.nullcontext():
        papermill.execute_notebook(
            str(nb_path),
            str(out_nb),
            parameters=parameters,
            kernel_name=kernel_name,
            progress_bar=False,
            cwd=str(find_project_root(nb_path.parent) or Path.cwd()),
            **_kernel_manager(),
        )


def _mark_finished(run: RunDir, keep_checkpoints: int | None, started: float) -> None:
    """status.json says ``finished`` with the notebook's recorded results, once the checkpoints
    a finished run does not need are gone."""
    results_path = run.path / RESULTS_FILE
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    if keep_checkpoints is not None:
        prune_checkpoints(run.path, keep_checkpoints)
    run.set_status("finished", results=results, duration_s=round(time.time() - started, 1))


def prune_checkpoints(folder: str | os.PathLike, keep: int = KEEP_CHECKPOINTS) -> list[Path]:
    """Delete all but the newest ``keep`` checkpoints in every ``checkpoints/`` under ``folder``.

    A Nature-encoder pretraining checkpoint weighs about 300 MB (weights, target network,
    optimizer) and a finetuning one carries its replay; a finished run needs at most the last.

    Returns:
        The checkpoints deleted.
    """
    removed = []
    for ckpt_dir in sorted(Path(folder).rglob("checkpoints")):
        found = sorted(p for p in ckpt_dir.iterdir() if CHECKPOINT_RE.search(p.name))
        for old in found[: len(found) - max(keep, 0)]:
            old.unlink()
            removed.append(old)
    return removed


def _kernel_manager() -> dict[str, Any]:
    """papermill's kernel manager, where the machine has Unix sockets: the kernel talks over
    sockets in a private temporary folder (mode 0700, removed at shutdown) instead of loopback
    TCP ports, so other users of a shared machine cannot connect to or read its traffic, and
    ipykernel's warning about unencrypted TCP is not printed at every run."""
    if os.name != "posix":
        return {}
    import tempfile

    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class PrivateSocketsKernelManager(AsyncKernelManager):
        @default("transport")
        def _default_transport(self) -> str:
            return "ipc"

        @default("ip")
        def _default_ip(self) -> str:
            # Short on purpose: a Unix socket path holds at most 107 bytes.
            self._socket_folder = tempfile.mkdtemp(prefix="sgi-lab-kernel-")
            return os.path.join(self._socket_folder, "k")

        async def _async_cleanup_resources(self, restart: bool = False) -> None:
            await super()._async_cleanup_resources(restart=restart)
            folder = getattr(self, "_socket_folder", None)
            if folder and not restart:
                with contextlib.suppress(OSError):
                    os.rmdir(folder)  # only once empty: never more than the sockets it made

        cleanup_resources = _async_cleanup_resources

        async def _async_shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:
            # jupyter_client interrupts the kernel (SIGINT) before it asks it to shut down; a
            # kernel handling a message just then logs "ERROR | KeyboardInterrupt caught in
            # kernel" at the end of a run that went well. The shutdown request (and a kill after
            # its grace period) stops a kernel without it.
            self._normal_shutdown = True
            try:
                await super()._async_shutdown_kernel(now=now, restart=restart)
            finally:
                self._normal_shutdown = False

        shutdown_kernel = _async_shutdown_kernel

        async def _async_interrupt_kernel(self) -> None:
            if getattr(self, "_normal_shutdown", False):
                return
            await super()._async_interrupt_kernel()

        interrupt_kernel = _async_interrupt_kernel

    return {"kernel_manager_class": PrivateSocketsKernelManager}


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables (inherited by the kernels started meanwhile), then restore."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# -- command line -------------------------------------------------------------------------------


def _parameters(pairs: list[list[str]] | None) -> dict[str, Any]:
    return {key: parse_parameter(value) for key, value in (pairs or [])}


def main_run(args: argparse.Namespace) -> int:
    """``sgi-lab run NOTEBOOK [-f PARAMS] [-p KEY VALUE]... [--overwrite] [--out-root DIR]``."""
    formats = figure_formats(args.figure_formats or "")
    problem = static_export_problem() if formats else None
    if problem:  # before anything runs: a long notebook must not fail at its first figure
        raise RuntimeError(f"--figure-formats {','.join(formats)}: {problem}")
    env = {FIGURE_FORMATS_ENV: ",".join(formats)} if formats else {}
    try:
        with _environment(env):
            folder = run_notebook(
                args.notebook,
                params_file=args.params_file,
                parameters=_parameters(args.parameter),
                out_root=args.out_root,
                overwrite=args.overwrite,
                name=args.name,
                progress=not args.no_progress,
                keep_checkpoints=args.keep_checkpoints,
            )
    except NotebookRunError as exc:
        print(f"sgi-lab run: error: {exc}", file=sys.stderr)
        return 1
    except RunExistsError as exc:
        print(f"sgi-lab run: error: {exc}", file=sys.stderr)
        return 2
    print(folder)
    return 0


def add_run_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``run`` on an argparse sub-parser set; the handler is ``args.handler``."""
    p = subparsers.add_parser(
        "run",
        help="execute a notebook with papermill into its own run folder",
        description="Execute a notebook into outputs/runs/<notebook>__<config>__<game>__s<seed>/ "
        "(executed notebook, params.yaml, status.json, results, figures). A finished run is kept "
        "unless --overwrite; a failed or interrupted one is resumed.",
    )
    _add_common(p)
    p.add_argument("--name", default=None, help="run folder name (default: derived)")
    p.add_argument(
        "--keep-checkpoints",
        type=lambda raw: None if raw == "all" else int(raw),
        default=KEEP_CHECKPOINTS,
        metavar="N|all",
        help=f"checkpoints a finished run keeps per checkpoints/ folder (default "
        f"{KEEP_CHECKPOINTS}; model.pt is always kept)",
    )
    p.add_argument(
        "--figure-formats",
        default=None,
        metavar="png,svg,pdf",
        help="also write every saved figure in these static formats (needs kaleido: "
        "pip install 'sgi-lab[export]', and a local Chromium; works offline)",
    )
    p.set_defaults(handler=main_run)
    return p


def _add_common(p: argparse.ArgumentParser, run_options: bool = True) -> None:
    p.add_argument("notebook", help="notebook name (pretrain) or path (notebooks/pretrain.ipynb)")
    p.add_argument(
        "-f", "--params-file", dest="params_file", default=None, help="YAML parameters file"
    )
    p.add_argument(
        "-p",
        "--parameter",
        nargs=2,
        action="append",
        metavar=("KEY", "VALUE"),
        help="a parameter (YAML value), repeatable: -p game Breakout -p seed 1",
    )
    p.add_argument("--overwrite", action="store_true", help="redo finished runs from scratch")
    if run_options:
        p.add_argument("--out-root", default=DEFAULT_OUT_ROOT, help="where run folders go")
        p.add_argument(
            "--no-progress", action="store_true", help="hide the training's progress bar"
        )
