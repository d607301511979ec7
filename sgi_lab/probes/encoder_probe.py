"""Probing a frozen encoder on a store: AtariARI's state-variable probes, a reward probe and an
action probe, with a majority-class and a random-init baseline on the same split.

Typical use (``sgi-lab probe RUN... --data STORE`` does this for each run)::

    encoder = load_probe_encoder("outputs/runs/pretrain__sgi_m__Pong")
    result = probe_encoder(encoder, TransitionStore("outputs/data/pong_random"))
    write_probes(encoder.out, result)  # sgi_lab.probes.results

The store's episodes are split into train/validation/test (no episode in two splits); the test
split loses the rows whose frame stack also appears in train or validation (AtariARI's
``remove_duplicates``), and variables whose training labels have under 0.6 nats of entropy are
left out (its ``remove_low_entropy_labels``). Scores are weighted F1 on the test split
(`sgi_lab.probes.linear`), with the readout (``lstsq`` or ``logistic``) and the features
(``renormalized``, ``conv`` or ``projection``) of `ProbeSettings`, both recorded in the result.
Coordinates (AtariARI's localization variables) also get a ridge regression onto their value:
R^2 and the accuracy within +-2 units, beside their F1. Two summaries are recorded: ``overall``,
the mean F1 over every variable, and ``across_categories``, the mean of the category means, which
is the headline AtariARI reports.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from sgi_lab.base.files import jsonable, provenance
from sgi_lab.data.store import TransitionStore
from sgi_lab.nets import SGIModel
from sgi_lab.probes.collapse import collapse_record
from sgi_lab.probes.game_labels import state_labels, state_variables
from sgi_lab.probes.kinds import small_test_warnings
from sgi_lab.probes.linear import (
    ProbeSettings,
    accuracy,
    f1_weighted,
    fit_probes,
    majority_predictions,
)
from sgi_lab.probes.probe_data import (
    NON_RANDOM_SOURCES,
    check_store,
    probe_settings_key,
    store_record,
)
from sgi_lab.probes.splits import (
    positions_without_seen_states,
    split_episodes,
    split_record,
    stack_key,
    subsample,
)
from sgi_lab.probes.state_probes import baseline_summary
from sgi_lab.probes.state_probes import state_probes as probe_state_labels
from sgi_lab.runtime.device import resolve_device

__all__ = [
    "PROBES_FILE",
    "ProbeEncoder",
    "encoder_features",
    "probe_encoder",
    "random_init_model",
]

PROBES_FILE = "probes.json"


@dataclass
class ProbeEncoder:
    """A frozen encoder to probe and where its results go.

    Attributes:
        model: the SGIModel (only its encoder is used), in eval mode.
        source: the run folder or file it came from ("random_init" for a fresh one).
        kind: ``pretrain``, ``finetune`` or ``random_init``.
        out: the probes file to write (``RUN/probes.json``).
        params: the run's params name (the objective: ``s``, ``sgi_m``...), when recorded.
        step: training steps behind the weights, when recorded.
        seed: the initialization seed of a random encoder.
        stamp: size and modification time of the weights' file (None: a random encoder): a
            result is reused only for the same file, so a run trained again is probed again.
        unfinished: from a run that had not finished (``--allow-unfinished``): every view says so.
        game: the game the weights were trained on, when recorded (no other game's store).
        initial: the weights a pretraining run started from (its step 0), for the collapse
            diagnostic; ``initial_source`` says where they came from.
    """

    model: SGIModel
    source: str
    kind: str
    out: Path
    params: str | None = None
    step: int | None = None
    seed: int | None = None
    stamp: dict[str, Any] | None = None
    unfinished: bool = False
    game: str | None = None
    initial: SGIModel | None = None
    initial_source: str | None = None

    def describe(self) -> dict[str, Any]:
        return {
            "unfinished": self.unfinished,
            "source": self.source,
            "kind": self.kind,
            "encoder": self.model.encoder_name,
            "params": self.params,
            "step": self.step,
            "seed": self.seed,
            "stamp": self.stamp,
        }


ARCHITECTURE_ARGS = ("in_channels", "image_size", "hidden_size", "width_scale")
"""The `SGIModel` arguments besides the encoder that fix the features' shapes: a random-init
baseline takes the probed model's."""


def random_init_model(
    num_actions: int,
    encoder: str = "nature",
    seed: int = 0,
    goal_head: bool = False,
    **architecture: Any,
) -> SGIModel:
    """A randomly initialized SGIModel (eval mode), built like a pretraining one: the random-init
    baseline.

    Args:
        num_actions: the game's action count (``store.num_actions``).
        encoder: ``"nature"``, ``"resnet"``, ``"resnet_l"``, or a MinAtar encoder.
        seed: torch seed of the initialization.
        goal_head: build the goal-conditioned Q head (for `sgi_lab.analysis.goals`).
        architecture: `ARCHITECTURE_ARGS` (input channels and size, hidden size, width), when
            not the Atari defaults (a MinAtar model's).
    """
    torch.manual_seed(seed)
    model = SGIModel(
        encoder, num_actions, noisy=False, rl_head=False, goal_head=goal_head, inverse_model=True,
        **architecture,
    )  # fmt: skip
    return model.eval()


@torch.no_grad()
def _features(
    model: SGIModel,
    store: TransitionStore,
    rows: np.ndarray,
    batch_size: int,
    device: str,
    progress: bool,
    desc: str,
    features: str = "renormalized",
) -> tuple[np.ndarray, list[bytes]]:
    """The features (`encoder_features`) of the states at ``rows``, and a hash of each row's
    frame stack (to find test states that training saw)."""
    dev = resolve_device(device)
    model = model.to(dev).eval()
    out: np.ndarray | None = None
    keys: list[bytes] = []
    with tqdm(total=len(rows), disable=not progress, desc=desc, unit="frame") as bar:
        for i in range(0, len(rows), batch_size):
            stacks = store.stack(rows[i : i + batch_size])
            keys += [stack_key(s) for s in stacks]
            x = encoder_features(model, torch.from_numpy(stacks).to(dev), features)
            if out is None:
                out = np.zeros((len(rows), x.shape[1]), np.float32)
            out[i : i + len(stacks)] = x.float().cpu().numpy()
            bar.update(len(stacks))
    return (out if out is not None else np.zeros((0, model.latent_size), np.float32)), keys


def encoder_features(model: SGIModel, obs: torch.Tensor, features: str) -> torch.Tensor:
    """Pixels (B, C, H, W) -> the (B, F) features a probe reads (`ProbeSettings.features`):

    - ``renormalized``: the conv map after the per-sample min-max renormalisation
      (`SGIModel.encode`, what the heads and the transition model see), C*H'*W' values;
    - ``conv``: the conv map before it (the encoder's own output);
    - ``projection``: SPR's projection y = p(z) of the renormalized map (`SGIModel.project`,
      the first Q-head layers without noise), which SPR and inverse dynamics train.
    """
    if features == "conv":
        return model.encoder(obs).flatten(1)
    z = model.encode(obs)
    if features == "projection":
        return model.project(z)
    if features != "renormalized":
        raise ValueError(f"features {features!r}: one of renormalized, conv, projection")
    return z.flatten(1)


def _balanced(rows: np.ndarray, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Positions of ``rows`` with as many negatives as positives (the larger class subsampled)."""
    pos, neg = np.flatnonzero(labels), np.flatnonzero(~labels)
    n = min(len(pos), len(neg))
    return np.sort(
        np.concatenate([rng.choice(pos, n, replace=False), rng.choice(neg, n, replace=False)])
    )


def _binary_f1(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(y_true, y_pred, average="binary", zero_division=0))


def _reward_probe(features, store, rows, split, settings, rng) -> dict[str, Any]:
    """Is a nonzero reward coming at the next step (r_t != 0), on balanced splits: binary F1."""
    reward = store.rewards[rows] != 0
    parts = {}
    for name, idx in split.items():
        labels = reward[idx]
        if labels.sum() < 3 or (~labels).sum() < 3:
            return {
                "skipped": f"too few rewarded states in the {name} split "
                f"({int(labels.sum())} of {len(labels)}); collect more steps"
            }
        parts[name] = idx[_balanced(idx, labels, rng)]
    y = reward[:, None].astype(np.int64)
    probe = fit_probes(
        features[parts["train"]], y[parts["train"]], features[parts["val"]], y[parts["val"]],
        settings,
    )  # fmt: skip
    pred = probe.predict(features[parts["test"]])[:, 0]
    truth = y[parts["test"], 0]
    return {
        "f1": _binary_f1(truth, pred),
        "accuracy": accuracy(truth, pred),
        "chance_accuracy": 0.5,
        "rows": {k: int(len(v)) for k, v in parts.items()},
    }


def _action_probe(features, store, rows, split, settings) -> dict[str, Any]:
    """The recording policy's action a_t from s_t: accuracy against the majority action."""
    source = store.manifest.source
    if source not in NON_RANDOM_SOURCES:
        return {
            "skipped": f"the store's policy ({source!r}) is not one worth imitating; the action "
            f"probe runs on {list(NON_RANDOM_SOURCES)} data"
        }
    y = store.actions[rows][:, None]
    train, val, test = (split[k] for k in ("train", "val", "test"))
    probe = fit_probes(features[train], y[train], features[val], y[val], settings)
    pred = probe.predict(features[test])[:, 0]
    majority = majority_predictions(y[train], len(test))[:, 0]
    return {
        "accuracy": accuracy(y[test, 0], pred),
        "majority_accuracy": accuracy(y[test, 0], majority),
        "f1": f1_weighted(y[test, 0], pred),
    }


def probe_encoder(
    encoder: ProbeEncoder,
    store: TransitionStore,
    settings: ProbeSettings | None = None,
    *,
    split_seed: int = 0,
    max_frames: int | None = None,
    random_baseline_seed: int | None = 0,
    state_probes: bool = True,
    batch_size: int = 256,
    device: str = "auto",
    progress: bool = True,
) -> dict[str, Any]:
    """Every probe of one encoder on one store (a probes.json entry).

    Args:
        encoder: the frozen encoder (`load_probe_encoder`, `random_probe_encoder`).
        store: a store with RAM of an AtariARI-annotated game.
        settings: how the linear probes train (default `ProbeSettings()`).
        split_seed: seeds the episode split (the same seed, the same split for every encoder).
        max_frames: rows used at most (each split subsampled in proportion); None: all.
        random_baseline_seed: also probe a random encoder of the same architecture on the same
            split (its summary under ``random_init``); None: skip it.
        state_probes: probe AtariARI's state variables (False: the reward and action probes
            only, for a store without RAM such as a DQN Replay import, or an unannotated game).
        batch_size: frames per encoder forward pass.
        device: ``auto``, ``cpu`` or ``cuda``.
        progress: tqdm bars.

    Returns:
        The result: the readout and features used (``settings``), per-variable scores by each
        label's kind (`sgi_lab.probes.state_probes`: F1 of the classified labels, with
        ``overall``, ``across_categories`` and the category means over them; R^2 of the others
        under ``r2``; the coordinates' ridge regressions; the ``headline``), the majority and
        random-init baselines, the reward and action probes, the collapse diagnostic
        (``collapse``), the split (``small_test``: under 1,000 test rows, with ``warnings``),
        timings.

    Raises:
        UnannotatedGameError: AtariARI does not annotate the store's game (state probes).
        ProbeInputError: the store holds no RAM (state probes), or too few episodes.
    """
    started = time.perf_counter()
    settings = settings or ProbeSettings()
    if state_probes:
        check_store(store)
    rng = np.random.default_rng(split_seed)  # subsamples the split, then balances the reward probe
    split = subsample(split_episodes(store, split_seed), max_frames, rng)
    rows = np.concatenate([split["train"], split["val"], split["test"]])
    features, keys = _features(
        encoder.model, store, rows, batch_size, device, progress, f"features {store.game}",
        settings.features,
    )  # fmt: skip
    positions, duplicates = positions_without_seen_states(split, keys, store)
    seconds = {"features": round(time.perf_counter() - started, 2)}
    variables = state_variables(store) if state_probes else ()
    labels = state_labels(store, rows, variables) if state_probes else None
    result: dict[str, Any] = {
        "encoder": encoder.describe(),
        "readout": settings.readout,
        "features": settings.features,
        "store": store_record(store),
        "settings": probe_settings_key(
            settings, split_seed, max_frames, random_baseline_seed, state_probes
        ),
        "split": split_record(split, positions, duplicates, store),
    }
    inputs = _ProbeInputs(store, rows, positions, features, labels, variables, settings, rng)
    stages = _stages(inputs, encoder, random_baseline_seed, split_seed, batch_size, device)
    with tqdm(total=len(stages), disable=not progress, desc="probes") as bar:
        for name, stage in stages.items():
            since = time.perf_counter()
            result.update(stage())
            seconds[name] = round(time.perf_counter() - since, 2)
            bar.update()
    seconds["total"] = round(time.perf_counter() - started, 2)
    return _finished(result, seconds)


def _finished(result: dict[str, Any], seconds: dict[str, float]) -> dict[str, Any]:
    """The result with its small-test flags and warnings (each also warned), its timings, when
    and by what code it was made, as JSON values."""
    result["warnings"] = small_test_warnings(result)
    for line in result["warnings"]:
        warnings.warn(line, stacklevel=3)
    result["seconds"] = seconds
    result["created"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    result["provenance"] = provenance()
    return jsonable(result)


@dataclass
class _ProbeInputs:
    """What every probe of one encoder reads: the rows, their split, features and labels."""

    store: TransitionStore
    rows: np.ndarray
    positions: dict[str, np.ndarray]
    features: np.ndarray
    labels: np.ndarray | None  # None: no state probes
    variables: tuple
    settings: ProbeSettings
    rng: np.random.Generator


def _stages(
    inputs: _ProbeInputs,
    encoder: ProbeEncoder,
    random_baseline_seed: int | None,
    split_seed: int,
    batch_size: int,
    device: str,
) -> dict[str, Any]:
    """The probes to run, in order, each a call returning its part of the result."""
    x = inputs
    stages = {
        "state": lambda: (
            probe_state_labels(x.features, x.labels, x.positions, x.variables, x.settings)
            if x.labels is not None
            else {"state_probes": "skipped (--no-state-probes)"}
        ),
        "reward": lambda: {
            "reward": _reward_probe(x.features, x.store, x.rows, x.positions, x.settings, x.rng)
        },
        "action": lambda: {
            "action": _action_probe(x.features, x.store, x.rows, x.positions, x.settings)
        },
    }
    stages["collapse"] = lambda: {
        "collapse": _collapse(x, encoder, random_baseline_seed, batch_size, device)
    }
    if random_baseline_seed is not None:
        stages["random_init"] = lambda: {
            "random_init": _random_init_baseline(
                random_baseline_seed,
                encoder.model.init_args,
                x.store,
                x.rows,
                x.positions,
                x.labels,
                x.variables,
                x.settings,
                split_seed,
                batch_size,
                device,
            )  # fmt: skip
        }
    return stages


def _random_init_baseline(
    seed, encoder_args, store, rows, positions, labels, variables, settings, split_seed,
    batch_size, device,
) -> dict[str, Any]:  # fmt: skip
    """The state and reward probes of a random encoder of the same architecture on the same
    rows and split: what the probes read out of the frames with no training at all.
    ``encoder_args``: the probed model's `SGIModel.init_args` (its architecture)."""
    model = _random_model(seed, encoder_args, store)
    features, _ = _features(
        model, store, rows, batch_size, device, False, "random-init features", settings.features
    )
    base = (
        probe_state_labels(features, labels, positions, variables, settings)
        if labels is not None
        else {"categories": {}, "variables": {}}
    )
    reward = _reward_probe(
        features, store, rows, positions, settings, np.random.default_rng(split_seed)
    )
    return {"seed": seed, **baseline_summary(base), "reward_f1": reward.get("f1")}


def _random_model(seed: int, encoder_args: dict[str, Any], store: TransitionStore) -> SGIModel:
    """A random encoder of the architecture of ``encoder_args`` (`SGIModel.init_args`)."""
    architecture = {k: v for k, v in encoder_args.items() if k in ARCHITECTURE_ARGS}
    return random_init_model(store.num_actions, encoder_args["encoder"], seed, **architecture)


def _collapse(x: _ProbeInputs, encoder: ProbeEncoder, seed, batch_size, device) -> dict:
    """The collapse diagnostic (`sgi_lab.probes.collapse`) of the encoder, a random encoder
    of its architecture (seed ``seed``; None: none) and the weights it started from, if known."""
    rows = x.rows[np.sort(np.concatenate(list(x.positions.values())))]
    models = {
        "encoder": encoder.model,
        "random_init": None
        if seed is None
        else _random_model(seed, encoder.model.init_args, x.store),
        "step0": encoder.initial,
    }
    sources = {"step0": encoder.initial_source} if encoder.initial is not None else None
    return collapse_record(models, x.store, rows, batch_size, device, sources)
