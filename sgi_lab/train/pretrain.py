"""Offline pretraining runs over a TransitionStore: SPR + goal-conditioned RL + inverse dynamics.

Any weighted subset of S, G and I (the paper's ablations are params files), or the ATC or BC
baselines. The loss is reward-free: dataset rewards are never read. One step is
`sgi_lab.train.pretrain_step.train_step`; this module is the run around it: resume from the
newest checkpoint, the step loop, metrics rows (with a linear probe of the encoder every
``probe_every`` steps when asked), checkpoints, ``model.pt``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import signal
import time
import warnings
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from tqdm.auto import tqdm

from sgi_lab.base.files import atomic_torch_save
from sgi_lab.config import ConfigError, PretrainConfig, build_config, encoder_problem, to_dict
from sgi_lab.data import StoreError, TransitionStore
from sgi_lab.data.sampler import valid_start_mask
from sgi_lab.envs import grid_observations
from sgi_lab.nets import SGIModel
from sgi_lab.probes.encoder_probe import ProbeEncoder, probe_encoder
from sgi_lab.probes.linear import ProbeSettings
from sgi_lab.probes.probe_data import check_probe_data
from sgi_lab.runs.checkpoints import restore_generator
from sgi_lab.runs.folder import RunDir, recorded_config
from sgi_lab.runs.stopping import Deadline, RunStopped, stop_on_signals
from sgi_lab.runtime.cpu_settings import settle
from sgi_lab.runtime.device import resolve_device
from sgi_lab.train.pretrain_step import (
    GraphedStep,
    PretrainBatch,
    build_state,
    device_batch,
    loss_function,
    make_sampler,
    measure_step,
    model_args,
    train_step,
)
from sgi_lab.train.transfer import load_pretrained, pretrained_target_part


def _window_mean(values: list[Any]) -> float:
    """Mean of a metric over a logging window (tensors read from the device in one go)."""
    tensors = [torch.as_tensor(v, dtype=torch.float64).reshape(()) for v in values]
    return float(torch.stack([t.cpu() for t in tensors]).mean())


def pretrain(
    config: PretrainConfig,
    data: str | Path | TransitionStore,
    out: str | Path,
    progress: bool = True,
    callback: Callable[[dict[str, Any]], None] | None = None,
    overwrite: bool = False,
    params_name: str | None = None,
    stop: Deadline | None = None,
) -> Path:
    """Pretrain (or resume pretraining) into run folder ``out``; returns the path of model.pt.

    Args:
        config: the pretraining config.
        data: a TransitionStore or its folder.
        out: run folder (the shared lifecycle, :meth:`sgi_lab.runs.folder.RunDir.open`): re-running
            into it resumes from its last checkpoint with the same config and store, returns a
            finished run's model as is; a folder that is not a pretraining run is refused.
        progress: show a tqdm bar.
        callback: called with every metrics row (e.g. a live plot's ``update``).
        overwrite: discard an existing pretraining run in ``out`` and start over.
        params_name: the params file's name, recorded in status.json for reports.
        stop: a `sgi_lab.runs.stopping.Deadline` (a first SIGINT, Ctrl-C or a notebook's interrupt,
            asks it to stop; a second interrupts at once): once it passes the run
            checkpoints at the current step and raises `RunStopped`; re-running resumes.

    Raises:
        ConfigError: bad objective weights, or ``out`` holds a run with another config or
            another store (the store is recognised by its content fingerprint).
        RunFolderError: ``out`` is not empty and not a pretraining run of ours.
        RunStopped: ``stop`` passed; checkpointed, resumable.
    """
    store = data if isinstance(data, TransitionStore) else TransitionStore(data)
    check_fits_store(config, store)
    check_can_compile(config)
    # The probe store is checked, and its identity recorded with the run's inputs, before the
    # folder is touched: a resume on another store at the same path is refused naming it.
    probe = PeriodicProbe.of(config, store)
    probe_identity = {} if probe is None else probe.identity
    inputs = {"data": store.fingerprint, **probe_identity}
    run = RunDir.open(out, "pretrain", to_dict(config), overwrite=overwrite, inputs=inputs)
    if run.finished and (run.path / "model.pt").exists():
        return run.path / "model.pt"
    check_store(store)
    with run:
        return _pretrain(config, store, run, progress, callback, params_name, stop, probe)


def check_fits_store(config: PretrainConfig, store: TransitionStore) -> None:
    """The config can train on ``store``, checked before anything is created: its encoder
    reads the store's observations (Atari's 84x84 frames or MinAtar's 10x10 grids), and a batch
    is no larger than the store's valid sequence starts (a typo such as 99999999999 would ask
    numpy for terabytes instead).

    Raises:
        ConfigError: naming ``encoder`` or ``batch_size`` (``atc_sequences`` for ATC).
    """
    spec = store.observation_spec
    problem = encoder_problem(config.encoder, grid_observations(store.game, spec.frame_shape))
    if problem:
        raise ConfigError(
            f"encoder: {problem} (store {store.path}: {spec.stacked_shape} observations)"
        )
    key = "atc_sequences" if config.uses_atc else "batch_size"
    starts = int(valid_start_mask(store).sum())
    if getattr(config, key) > starts:
        raise ConfigError(
            f"{key}: {getattr(config, key)} sequences per batch, but {store.path} holds only "
            f"{starts} valid sequence starts; lower {key} or collect more data"
        )


def check_can_compile(config: PretrainConfig) -> None:
    """``compile: true`` has what inductor needs on a CPU, a C++ compiler (``$CXX``, ``g++``,
    ``clang++`` or ``c++``), checked before anything is created: without one the first step
    would fail deep inside ``torch.compile``.

    Raises:
        ConfigError: naming ``compile`` and the fix.
    """
    if not config.compile or resolve_device(config.device).type != "cpu":
        return
    compilers = (os.environ.get("CXX"), "g++", "clang++", "c++")
    if not any(c and shutil.which(c) for c in compilers):
        raise ConfigError(
            "compile: torch.compile on a CPU needs a C++ compiler and none was found ($CXX, "
            "g++, clang++, c++); install one (e.g. apt install g++) or set compile: false"
        )


def check_store(store: TransitionStore) -> None:
    """Every chunk of ``store`` against the checksums its manifest recorded, before a run
    trains on it: a flipped byte in a frame is refused, not learned from. Reads the whole
    store once (blake2b; the measured cost is in benchmarks/README.md, "Checksums").

    Raises:
        StoreError: naming the store, the first damaged file, and how many problems there are.
    """
    problems = store.verify()
    if problems:
        more = f" (and {len(problems) - 1} more: sgi-lab info {store.path} --verify)"
        raise StoreError(
            f"{store.path}: damaged store, refusing to train on it: {problems[0]}"
            + (more if len(problems) > 1 else "")
        )


def _pretrain(config, store, run, progress, callback, params_name, stop, probe) -> Path:
    device = resolve_device(config.device)
    # "auto" CPU precision and layout: the fastest measured on this machine for this workload.
    objectives = "atc" if config.uses_atc else "sgi"
    workload = (
        f"pretrain-step/{config.encoder}/{objectives}/batch={config.batch_size}"
        f"/K={config.spr_steps}/goal={config.uses_goal_rl}"
    )
    config, choice = settle(
        config, device, workload, lambda bf16, cl: measure_step(config, store, device, bf16, cl)
    )
    run.cpu_choice = choice.to_json()
    loop = _Loop(config, store, run, device, params_name, probe)
    # A first Ctrl-C (or a notebook's interrupt) stops at the next step, checkpointed.
    stop = stop if stop is not None else Deadline()
    try:
        with stop_on_signals(stop, signal.SIGINT):
            return loop.run(progress, callback, stop)
    finally:
        loop.sampler.close()


class _Loop:
    """The pretraining loop of one run: its state, sampler and periodic probe, resumed from the
    run's newest checkpoint; `run` trains to ``config.steps`` and saves ``model.pt``."""

    def __init__(self, config, store, run, device, params_name, probe) -> None:
        self.config, self.store, self.run_dir, self.device = config, store, run, device
        spec = store.observation_spec
        self.args = model_args(config, store.num_actions, spec)
        self.state = build_state(config, store.num_actions, device, spec)
        self.sampler = make_sampler(config, store)
        self.probe = probe
        self.step = self.resume()
        run.start(
            self.step,
            params=params_name,
            data=str(store.path),
            # the Atari env that made the frames (a finetuning run records its own env_protocol)
            data_env_protocol=store.manifest.env_protocol,
            game=store.game,
            cpu_settings=getattr(run, "cpu_choice", {}),
        )

    def resume(self) -> int:
        """Load the newest checkpoint into the state and sampler; its step (0 for a new run)."""
        run, state = self.run_dir, self.state
        # On the CPU: load_state_dict copies onto the parameters' device; RNG states are CPU.
        checkpoint = run.load_latest("pretrain", map_location="cpu")
        self.resumed = checkpoint is not None
        if checkpoint is None:
            return 0
        if checkpoint["model_args"] != self.args:
            raise ConfigError(
                f"{run.path}: checkpoint model {checkpoint['model_args']} does not match "
                f"{self.args}"
            )
        state.model.load_state_dict(checkpoint["model"])
        state.target.load_state_dict(checkpoint["target"])
        state.optimizer.load_state_dict(checkpoint["optimizer"])
        if not restore_generator(state.generator, checkpoint["generator"]):
            warnings.warn(
                f"{run.path}: resumed on another device type; the augmentation random stream "
                "is reseeded, so this run will not match an uninterrupted one bit for bit",
                stacklevel=2,
            )
        torch.set_rng_state(checkpoint["torch_rng"])
        self.sampler.load_state_dict(checkpoint["sampler"])
        # the logging window's steps since the last row (none in older checkpoints): a run
        # resumed between rows logs the means an uninterrupted one logs
        self.pending_window = dict(checkpoint.get("log_window") or {})
        return int(checkpoint["step"])

    def step_function(self) -> Callable[[PretrainBatch], dict[str, torch.Tensor]]:
        """`train_step`, replayed from a CUDA graph where one can be, or with its losses
        compiled (``compile: true``, which takes the graph's place)."""
        if self.config.compile:
            losses = loss_function(self.config)
            return functools.partial(train_step, self.config, self.state, losses=losses)
        if GraphedStep.usable(self.config, self.device):
            return GraphedStep(self.config, self.state)
        return functools.partial(train_step, self.config, self.state)

    def run(self, progress: bool, callback, stop: Deadline) -> Path:
        config, run = self.config, self.run_dir
        logger = run.metrics_logger(resume_step=self.step if self.resumed else None)
        window = self.window = _Window(self.sampler.batch_size)
        window.restore(getattr(self, "pending_window", {}))
        bar = tqdm(
            total=config.steps,
            initial=self.step,
            disable=not progress,
            desc="pretrain",
            unit="step",
        )
        if progress and config.spr_coefficient > 0:  # the bar's "spr=-4.7" is meant: say why
            tqdm.write(spr_loss_note(config.spr_steps, config.spr_coefficient))
        self.state.model.train()
        self.state.target.train()  # as the reference: target BN uses batch statistics
        step_fn = self.step_function()
        if self.probe is not None and self.step == 0:
            # the run's own initialisation, probed before it trains: each later point is paired
            # with its own starting point (the probes leave training's random streams alone)
            row = logger.log(0, **self.probe(self.state.model, 0))
            if callback is not None:
                callback(row)
        try:
            while self.step < config.steps:
                window.add(step_fn(device_batch(self.sampler.sample(), self.device)))
                self.step += 1
                bar.update(1)
                self.log(logger, window, bar, callback)
                why = stop.reason() if self.step < config.steps else None
                # the last step's state goes to model.pt (save_model), not to a checkpoint too
                if why or (self.step % config.checkpoint_every == 0 and self.step < config.steps):
                    self.checkpoint()
                if why:
                    raise RunStopped(self.step, why)
        except FloatingPointError as exc:
            last = run.latest_checkpoint()
            raise FloatingPointError(
                f"{exc} (at step {self.step + 1}; last good checkpoint: {last})"
            ) from None
        finally:
            bar.close()
            logger.close()
        return self.save_model()

    def log(self, logger, window: _Window, bar, callback) -> None:
        """At a logging step (or a probing one): the window's means (and the probe's F1) as a
        metrics row, on the bar and to the callback."""
        step, config = self.step, self.config
        probing = self.probe is not None and self.probe.due(step, config.steps)
        if not (step % config.log_every == 0 or step == config.steps or probing):
            return
        row = window.row()
        if probing:
            row.update(self.probe(self.state.model, step))
            window.restart_clock()  # the probe's time is not training time
        row = logger.log(step, **row)
        bar.set_postfix(
            {k.split("/")[-1]: f"{v:.3g}" for k, v in row.items() if k.startswith("losses/")}
        )
        if callback is not None:
            callback(row)

    def checkpoint(self) -> None:
        config, state, sampler, store = self.config, self.state, self.sampler, self.store
        payload = {
            "model": state.model.state_dict(),
            "target": state.target.state_dict(),
            "optimizer": state.optimizer.state_dict(),
            "generator": state.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "sampler": sampler.state_dict(),
            "model_args": self.args,
            "config": to_dict(config),
            "game": store.game,
            "data": str(store.path),
            "log_window": self.window.state() if hasattr(self, "window") else {},
        }
        self.run_dir.save_checkpoint(self.step, payload, "pretrain")
        self.run_dir.set_status("running", step=self.step)

    def save_model(self) -> Path:
        """``model.pt`` and the run marked finished.

        ``model.pt`` holds the online model whole (finetuning, probes, representations and
        `load_pretrained_model` read it) and, of the EMA target, only SPR's target network,
        the encoder and the projection (`sgi_lab.train.transfer.pretrained_target_part`): all
        that ``spr_target_start: pretrained_target`` reads, as the reference's pretrained state
        holds a target encoder and projection only. The target's transition model, predictor,
        FiLM generator, goal and inverse heads are left out: nothing reads them after
        pretraining, and they were 60 of the Nature CNN's 173 MB (the FiLM generator 52 MB).
        Resuming reads the checkpoints, which keep the whole target.
        """
        model_path = self.run_dir.path / "model.pt"
        atomic_torch_save(
            {
                "format": "sgi-lab",
                "kind": "pretrained_model",
                "step": self.step,
                "model": self.state.model.state_dict(),
                # SPR's part of the EMA target: finetuning can start SPR's target from it
                "target": pretrained_target_part(self.state.target.state_dict()),
                "model_args": self.args,
                "config": to_dict(self.config),
                "game": self.store.game,
            },
            model_path,
        )
        self.run_dir.finish(self.step, model=str(model_path))
        # model.pt counts as the newest of the checkpoints kept: a finished run is returned as
        # it is, never resumed (a 30-step smoke run kept two 318 MB checkpoints beside it)
        checkpoints = self.run_dir.checkpoints()
        for old in checkpoints[: max(0, len(checkpoints) - max(0, self.run_dir.keep - 1))]:
            old.unlink(missing_ok=True)
        return model_path


class _Window:
    """A logging window: every step's logs kept on the device until the row is written (no
    host sync per step on a GPU), and the samples per second since the last row."""

    def __init__(self, samples_per_step: int) -> None:
        self.samples_per_step = samples_per_step
        self.values: dict[str, list[Any]] = defaultdict(list)
        self.restart_clock()

    def restart_clock(self) -> None:
        self.started, self.steps = time.perf_counter(), 0

    def add(self, logs: dict[str, Any]) -> None:
        self.steps += 1
        for key, value in logs.items():
            self.values[key].append(value.detach() if torch.is_tensor(value) else value)

    def state(self) -> dict[str, torch.Tensor]:
        """The steps logged since the last row, one float64 tensor per metric (what a checkpoint
        keeps, so that a resumed run's next row is the uninterrupted run's)."""
        return {
            k: torch.stack([torch.as_tensor(x, dtype=torch.float64).reshape(()).cpu() for x in v])
            for k, v in self.values.items()
            if v
        }

    def restore(self, state: dict[str, torch.Tensor]) -> None:
        """Put back the steps `state` kept (their clock is gone: the row's samples per second
        counts the resumed steps only)."""
        for key, values in state.items():
            self.values[key] = list(values.to(torch.float64).unbind())

    def row(self) -> dict[str, float]:
        """The window's means; raises FloatingPointError on a non-finite total loss."""
        elapsed = time.perf_counter() - self.started
        row = {k: _window_mean(v) for k, v in self.values.items()}
        if not np.isfinite(row.get("losses/total", 0.0)):
            raise FloatingPointError(f"non-finite pretraining loss in the last window: {row}")
        row["charts/samples_per_s"] = self.steps * self.samples_per_step / max(elapsed, 1e-9)
        self.values.clear()
        self.restart_clock()
        return row


class PeriodicProbe:
    """Linear probes of the encoder every ``probe_every`` steps (`sgi_lab.probes`): a probe
    curve beside the diversity curve (paper Fig. 4), as metrics ``probe/f1`` (the mean F1 over
    every variable), ``probe/f1_across_categories`` (the mean of the category means, AtariARI's
    headline), ``probe/f1_<category>``, ``probe/coordinate_r2`` and ``probe/coordinate_within``
    (the coordinates' ridge regressions), ``probe/reward_f1``, and the readout and features used
    (``probe/readout``, ``probe/features``: the config's ``probe_readout``, ``probe_features``).

    The probe store is a second store of the run's game, with RAM (other episodes than the
    training data); every probe uses the same episode split and at most ``probe_frames`` of its
    frames. Probing reads the model in eval mode under ``no_grad`` and its own random streams,
    so the training (and its bit-exact resume) is the same with or without it."""

    def __init__(
        self,
        store: TransitionStore,
        every: int,
        frames: int,
        identity: dict[str, str],
        settings: ProbeSettings | None = None,
    ):
        self.store, self.every, self.frames = store, every, frames
        self.identity = identity  # {"probe_data": fingerprint}, for the run's inputs
        self.settings = settings or ProbeSettings()

    @classmethod
    def of(cls, config: PretrainConfig, training: TransitionStore) -> PeriodicProbe | None:
        """The config's probe, or None when ``probe_every`` is 0: its store checked against
        the ``training`` data (`sgi_lab.probes.probe_data.check_probe_data`: probe-able, the same
        game, a warning when it is the training data itself).

        Raises:
            ProbeInputError, UnannotatedGameError, StoreError: the probe store cannot be probed,
                or holds another game.
        """
        if config.probe_every <= 0:
            return None
        store, identity = check_probe_data(config.probe_data, training)
        settings = ProbeSettings(readout=config.probe_readout, features=config.probe_features)
        return cls(store, config.probe_every, config.probe_frames, identity, settings)

    def due(self, step: int, steps: int) -> bool:
        return step % self.every == 0 or step == steps

    def __call__(self, model: SGIModel, step: int) -> dict[str, float]:
        device = next(model.parameters()).device  # the probe reads features where they are
        # ``out`` is where `probe_run` would write; this probe only returns its result.
        encoder = ProbeEncoder(model, "training", "pretrain", Path(), step=step)
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            result = probe_encoder(
                encoder,
                self.store,
                self.settings,
                max_frames=self.frames,
                random_baseline_seed=None,
                device=str(device),
                progress=False,
            )
        model.train()
        return probe_metrics(result)


def probe_metrics(result: dict[str, Any]) -> dict[str, float | str]:
    """A probes result's F1s (overall, across categories, per category), the coordinates'
    regressions, the labels read by R^2 (mean, per kind: MinAtar's positions, counters and
    ramp), the headline, the collapse diagnostic's cosines (the encoder's, by latent), the
    reward F1, and the readout and features it used, as metrics.jsonl keys."""
    row = {"probe/headline": (result.get("headline") or {}).get("value")}
    r2 = result.get("r2") or {}
    row["probe/r2"] = r2.get("mean")
    row.update({f"probe/r2_{kind}": v for kind, v in (r2.get("kinds") or {}).items()})
    cosines = (result.get("collapse") or {}).get("encoder") or {}
    row.update({f"probe/cosine_{latent}": v for latent, v in cosines.items()})
    row["probe/f1"] = result.get("overall")
    row["probe/f1_across_categories"] = result.get("across_categories")
    for category, value in (result.get("categories") or {}).items():
        row[f"probe/f1_{category}"] = value.get("f1") if isinstance(value, dict) else value
    regression = result.get("regression") or {}
    row["probe/coordinate_r2"] = regression.get("r2")
    row["probe/coordinate_within"] = regression.get("within_accuracy")
    row["probe/reward_f1"] = (result.get("reward") or {}).get("f1")
    row = {k: float(v) for k, v in row.items() if v is not None}
    names = {"probe/readout": result.get("readout"), "probe/features": result.get("features")}
    return {**row, **{k: str(v) for k, v in names.items() if v is not None}}


def spr_loss_note(steps: int, weight: float) -> str:
    """Why SPR's loss (and so the total) is negative, in one line: it is minus the cosine
    similarity summed over the ``steps`` predicted (`sgi_lab.objectives.spr.spr_loss`)."""
    return (
        f"losses: spr is minus the cosine of prediction and target summed over the {steps} "
        f"predicted steps, so it is negative by design: 0 for unrelated predictions, -{steps} "
        f"when all match; the total adds {weight:g} x spr, so it goes below 0 too"
    )


def load_pretrained_model(run_dir: str | Path) -> SGIModel:
    """The pretrained SGIModel of a run folder, in eval mode: its ``model.pt``, or for a run
    still going, its newest checkpoint (`sgi_lab.train.transfer.load_pretrained`)."""
    return load_pretrained(run_dir, allow_unfinished=True).build_model()


def config_from_run(run_dir: str | Path) -> PretrainConfig:
    """The resolved config a run folder was trained with."""
    values = recorded_config(yaml.safe_load((Path(run_dir) / "config.yaml").read_text()))
    known = {f.name for f in dataclasses.fields(PretrainConfig)}
    return build_config(PretrainConfig, {k: v for k, v in values.items() if k in known})


__all__ = [
    "PeriodicProbe",
    "check_store",
    "config_from_run",
    "load_pretrained_model",
    "pretrain",
    "probe_metrics",
    "spr_loss_note",
]
