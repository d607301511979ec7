"""Validated, frozen configs, one per stage, built from ``params/*.yaml``.

A params file holds a ``config`` mapping that mirrors the stage's dataclass key for key (plus a
``name`` and a ``description``, and notebook-level literals such as ``game`` and ``seed``)::

    name: sgi_m
    description: SGI-M pretraining (ResNet, S+G+I)
    config:
      encoder: resnet
      spr_weight: 2.0

Unknown keys and wrong types are rejected with a message naming the key. Every field has a
default (the paper's value), a type and a one-line doc in its metadata.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from sgi_lab.base.paths import did_you_mean
from sgi_lab.envs.games import UnknownGameError, canonical_game


class ConfigError(ValueError):
    """A params file or override is malformed: unknown key, wrong type or bad value."""


def F(default: Any, doc: str) -> Any:  # noqa: N802 - reads like a declaration
    """A dataclass field with a default and a one-line doc."""
    return field(default=default, metadata={"doc": doc})


# -- stage configs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PretrainConfig:
    """Offline pretraining (paper Sec. 2, App. C): SPR + goal RL + inverse dynamics, or a baseline."""

    encoder: Literal["nature", "resnet", "resnet_l"] = F("resnet", "encoder architecture")
    spr_weight: float = F(2.0, "SPR weight, read as spr_weight_convention says; 0 disables")
    spr_weight_convention: Literal["text", "reference"] = F(
        "text",
        "'text': lambda_SPR on -sum_k cos (paper: 2); 'reference': the authors' script's weight "
        "on mean_k(2 - 2 cos) (1), i.e. 2w/K on -sum_k cos (docs/paper_vs_code.md)",
    )
    goal_weight: float = F(1.0, "weight of the goal-conditioned RL loss (0 disables)")
    inverse_weight: float = F(1.0, "lambda_IM: weight of the inverse-dynamics loss (0 disables)")
    atc_weight: float = F(0.0, "weight of the ATC baseline loss (exclusive with S/G/I)")
    bc_weight: float = F(0.0, "weight of the behavioural-cloning baseline loss")
    batch_size: int = F(256, "sequences per batch")
    spr_steps: int = F(5, "K: latent prediction steps")
    n_step: int = F(1, "n for the goal-RL n-step return (1 as the reference; at most spr_steps)")
    gamma: float = F(0.99, "discount")
    goal_window: int = F(50, "goals are states 1..goal_window steps ahead")
    goal_offsets: Literal["text", "reference"] = F(
        "text",
        "near an episode's end, 'text': offset uniform over the states that exist; 'reference': "
        "Uniform{1..goal_window} clipped to the episode's last state",
    )
    goal_alpha_max: float = F(0.5, "goal noise weight alpha ~ U(0, goal_alpha_max)")
    goal_noise: Literal["text", "reference"] = F(
        "text",
        "'text': unit noise scaled to the goal's L2 norm (goals pushed off the manifold); "
        "'reference': unit-norm noise mixed into the [0, 1] latent as is (barely moves it)",
    )
    goal_swap_prob: float = F(0.2, "probability to swap in another batch element's goal")
    goal_reward_scale: float = F(10.0, "scale of the potential-based goal reward")
    goal_distance_scale: float = F(
        1.0, "c in the goal reward's s = exp(2c(cos - 1)): 1 the text's, 5 the reference code's"
    )
    goal_film: Literal["text", "reference"] = F(
        "text",
        "FiLM goal conditioning: 'text': a layer norm whose affine parameters FiLM sets; "
        "'reference': the authors' code (no layer norm, value stream from the advantage features)",
    )
    goal_returns: Literal["text", "reference"] = F(
        "text",
        "goal-RL return: 'text': sum_j gamma^j r_j; 'reference': the code's sum_j gamma^(j+1) r_j",
    )
    goal_double_q: bool = F(
        True, "goal RL's bootstrap action picked by the online network (double Q, the code's)"
    )
    atc_sequences: int = F(32, "ATC: sequences per batch")
    atc_seq_len: int = F(8, "ATC: consecutive steps per sequence")
    atc_delta: int = F(3, "ATC: steps between anchor and positive")
    lr: float = F(1.0e-4, "Adam learning rate")
    adam_eps: float = F(1.5e-4, "Adam epsilon")
    grad_clip: float = F(10.0, "max gradient norm (0 disables)")
    grad_clip_groups: Literal["all", "reference"] = F(
        "all",
        "clip the norm of all gradients together, or as the reference: encoder + Q/goal heads "
        "and the transition model each on its own, predictor and inverse model unclipped",
    )
    ema_tau: float = F(0.99, "EMA coefficient of the target encoder/projection and goal target")
    target_batch_norm: Literal["batch", "running"] = F(
        "batch",
        "target/goal encodings normalize with 'batch' statistics (the reference) or the EMA'd "
        "'running' ones (eval mode: norms fold into the convs, ~2x faster passes; not the paper)",
    )
    augment: bool = F(True, "random shift + intensity jitter on every input")
    steps: int = F(234_375, "gradient steps (paper: 10 epochs of 6M samples at batch 256)")
    log_every: int = F(100, "steps between metrics.jsonl rows")
    checkpoint_every: int = F(2_000, "steps between checkpoints")
    probe_every: int = F(
        0, "steps between linear probes of the encoder on probe_data (0: none; sgi_lab.probes)"
    )
    probe_data: str = F(
        "", "store with RAM of the game, other episodes than the data, for probe_every"
    )
    probe_frames: int = F(10_000, "frames each probe_every probe uses at most")
    prefetch: int = F(2, "batches prepared ahead on a background thread")
    cuda_graphs: bool = F(True, "capture the training step once as a CUDA graph and replay it")
    seed: int = F(0, "random seed")
    device: str = F("auto", "'auto' (CUDA when present), 'cpu' or 'cuda[:i]'")
    amp: bool = F(True, "bf16 autocast on CUDA (ignored on CPU)")
    cpu_amp: bool | Literal["auto"] = F(
        "auto",
        "bf16 autocast on a CPU (only where it has native bf16); auto: the faster, measured",
    )
    channels_last: bool | Literal["auto"] = F(
        "auto", "channels-last memory format for conv layers; auto: measured on a CPU, on a GPU"
    )

    def __post_init__(self) -> None:
        validate(self)


@dataclass(frozen=True)
class FinetuneConfig:
    """Online finetuning on Atari 100k with Rainbow + SPR (paper Sec. 4, App. C; SPR's settings)."""

    game: str = F("Pong", "Atari 100k game")
    seed: int = F(0, "random seed")
    encoder: Literal["nature", "resnet", "resnet_l"] = F("resnet", "encoder architecture")
    steps: int = F(100_000, "agent steps in the environment (Atari 100k)")
    batch_size: int = F(32, "replay batch size")
    updates_per_step: int = F(2, "gradient updates per environment step (replay ratio 64)")
    learning_starts: int = F(2_000, "environment steps before learning starts")
    n_step: int = F(10, "n for n-step returns")
    gamma: float = F(0.99, "discount")
    num_atoms: int = F(51, "C51 atoms")
    v_min: float = F(-10.0, "C51 support minimum")
    v_max: float = F(10.0, "C51 support maximum")
    noisy_std: float = F(0.5, "sigma_0 of the noisy linear layers (0 disables noise)")
    dueling: bool = F(True, "dueling head")
    double_q: bool = F(True, "double-Q action selection")
    priority_alpha: float = F(0.5, "prioritized replay exponent alpha")
    priority_beta_start: float = F(0.4, "importance-sampling exponent, annealed to 1")
    eps_start: float = F(1.0, "epsilon-greedy start (on top of noisy nets)")
    eps_end: float = F(0.0, "epsilon-greedy end")
    eps_steps: int = F(2_001, "steps to anneal epsilon over")
    eps_from: Literal["step_0", "learning_starts"] = F(
        "step_0",
        "epsilon annealing starts at step 0, or at learning_starts (rlpyt's schedule, the "
        "reference's: random actions until learning starts)",
    )
    target_update_period: int = F(1, "steps between target network updates")
    target_tau: float = F(1.0, "target = online when 1 (SPR's setting)")
    spr_weight: float = F(
        5.0, "SPR's weight on mean_k(2 - 2 cos), i.e. 2w/K on -sum_k cos (SPR's convention)"
    )
    spr_steps: int = F(5, "K: SPR prediction steps")
    spr_ema_tau: float = F(0.99, "EMA coefficient of SPR's target encoder")
    spr_target_update: Literal["after_step", "before_step"] = F(
        "after_step",
        "EMA step of SPR's target after the Adam step (Alg. 1) or before it, toward the weights "
        "the losses used (the reference: inside its forward pass)",
    )
    spr_target_start: Literal["online", "pretrained_target"] = F(
        "online",
        "SPR's target starts as a copy of the loaded encoder/projection, or as the pretraining "
        "run's own EMA target (the reference loads its whole pretrained state)",
    )
    ssl: Literal["spr", "none", "all"] = F(
        "spr", "finetuning SSL losses: S only, none, or all of SGI"
    )
    goal_weight: float = F(1.0, "goal-RL weight when ssl == 'all'")
    inverse_weight: float = F(1.0, "inverse-dynamics weight when ssl == 'all'")
    lr: float = F(1.0e-4, "Adam base learning rate")
    adam_eps: float = F(1.5e-4, "Adam epsilon")
    grad_clip: float = F(10.0, "max gradient norm (0 disables)")
    augment: bool = F(True, "random shift + intensity jitter")
    scheme: Literal["reduced_lr", "naive", "frozen"] = F(
        "reduced_lr", "how pretrained weights are finetuned"
    )
    encoder_lr_scale: float = F(0.01, "lr multiplier of pretrained encoder + transition model")
    pretrained_lr_scale: float = F(1 / 3, "lr multiplier of other pretrained layers")
    lr_groups: Literal["text", "reference"] = F(
        "text",
        "reduced_lr groups: 'text': encoder + transition model x encoder_lr_scale, other "
        "pretrained layers x pretrained_lr_scale; 'reference': encoder x encoder_lr_scale, the "
        "Q head's first layers x pretrained_lr_scale, everything else (transition model, "
        "predictor) at the base lr (sgim_finetune.sh)",
    )
    pretrained: str | None = F(None, "pretraining run folder to start from (None: SGI-None)")
    eval_episodes: int = F(100, "evaluation episodes at the end")
    eval_eps: float = F(0.001, "evaluation epsilon")
    eval_envs: int = F(8, "environments stepped together in evaluation")
    eval_max_frames: int = F(108_000, "raw-frame cap of an evaluation episode (a multiple of 4)")
    goal_window: int = F(50, "goals lie 1..goal_window steps ahead (ssl == 'all')")
    goal_reward_scale: float = F(10.0, "scale of the potential-based goal reward (ssl == 'all')")
    goal_distance_scale: float = F(
        1.0,
        "c in the goal reward's s = exp(2c(cos - 1)) (ssl == 'all'): 1 the text's, 5 the "
        "reference code's",
    )
    goal_returns: Literal["text", "reference"] = F(
        "text",
        "goal-RL return (ssl == 'all'): 'text': sum_j gamma^j r_j; 'reference': the code's "
        "sum_j gamma^(j+1) r_j",
    )
    goal_double_q: bool = F(
        False,
        "goal RL's bootstrap action picked by the online network (ssl == 'all'; the code's "
        "double Q), else by the network that evaluates it",
    )
    goal_target: Literal["spr_target", "rl_target"] = F(
        "spr_target",
        "network that evaluates goal RL's bootstrap (ssl == 'all'): SPR's EMA target, or the RL "
        "target (the online network when target_tau is 1) with the RL target's noise sample, "
        "as the reference's agent target model",
    )
    log_every: int = F(1_000, "steps between metrics rows")
    checkpoint_every: int = F(10_000, "steps between checkpoints (replay included)")
    device: str = F("auto", "'auto', 'cpu' or 'cuda[:i]'")
    amp: bool = F(True, "bf16 autocast on CUDA (ignored on CPU)")
    cpu_amp: bool | Literal["auto"] = F(
        "auto",
        "bf16 autocast on a CPU (only where it has native bf16); auto: the faster, measured",
    )
    threads: int = F(
        0, "torch CPU threads during the run (0: torch's default; 1 when sharing CPUs)"
    )
    channels_last: bool | Literal["auto"] = F(
        "auto", "channels-last memory format for conv layers; auto: measured on a CPU, on a GPU"
    )
    env_protocol: Literal["dopamine", "rlpyt"] = F(
        "dopamine",
        "Atari env of training and evaluation (make_env's preprocessing): 'dopamine' "
        "(gymnasium's AtariPreprocessing) or 'rlpyt' (the authors' env, docs/paper_vs_code.md "
        "rows 16-21)",
    )
    env_workers: int = F(
        0, "processes stepping the agents' environments (0: the learner's own process)"
    )
    cuda_graphs: bool = F(True, "capture the update once as a CUDA graph and replay it (CUDA only)")
    population_batching: Literal["auto", "vmap", "loop"] = F(
        "auto", "how a population's networks run together: vmap, a loop over agents, or auto"
    )

    def __post_init__(self) -> None:
        # The one place a game name is canonicalised: "pong", "ALE/Pong-v5" and "Pong" are the
        # same config, so they name the same run folder and resume each other.
        object.__setattr__(self, "game", _canonical_game("game", self.game))
        validate(self)


def _canonical_game(key: str, name: Any) -> str:
    try:
        return canonical_game(name)
    except UnknownGameError as exc:
        raise UnknownGameError(f"{key}: {exc}") from None


STAGES: dict[str, type] = {"pretrain": PretrainConfig, "finetune": FinetuneConfig}

# Value ranges, by key, wherever a stage config has the key: counts, intervals and step sizes
# that only make sense above zero, and ones where zero means "none"/"off" but negative is a typo.
POSITIVE_KEYS = frozenset(
    {
        "steps",
        "batch_size",
        "checkpoint_every",
        "log_every",
        "lr",
        "adam_eps",
        "eval_episodes",
        "eval_envs",
        "eval_max_frames",
        "atc_sequences",
        "atc_seq_len",
        "num_atoms",
        "target_update_period",
        "n_step",
        "goal_distance_scale",
        "probe_frames",
    }
)
NON_NEGATIVE_KEYS = frozenset(
    {
        "seed",
        "threads",
        "spr_weight",
        "goal_weight",
        "inverse_weight",
        "atc_weight",
        "bc_weight",
        "env_workers",
        "prefetch",
        "learning_starts",
        "updates_per_step",
        "grad_clip",
        "spr_steps",
        "eps_steps",
        "goal_window",
        "atc_delta",
        "noisy_std",
        "goal_reward_scale",
        "probe_every",
    }
)
TOP_LEVEL_KEYS = {"name", "description", "config", "game", "seed", "data", "pretrained", "stage"}


# -- validation --------------------------------------------------------------------------------


def field_docs(cls: type) -> dict[str, str]:
    """``{field: one-line doc}`` for a config class."""
    return {f.name: f.metadata.get("doc", "") for f in dataclasses.fields(cls)}


def check_value(
    key: str,
    value: Any,
    annotation: Any,
    nested: Callable[[type, Any, str], Any] | None = None,
) -> Any:
    """Type-check one value against its annotation (naming ``key`` in the error); returns it
    converted (ints to float where a float is asked for). Lists, mappings and ``Any`` are
    checked element-wise; a dataclass annotation is built by ``nested(cls, value, key)``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: {value!r} is not one of {list(args)}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return check_value(key, value, arg, nested)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{key}: bad value {value!r}")
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [check_value(f"{key}[{i}]", v, args[0], nested) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return {str(k): check_value(f"{key}.{k}", v, args[1], nested) for k, v in value.items()}
    if nested is not None and dataclasses.is_dataclass(annotation):
        return nested(annotation, value, key)
    if annotation is Any:
        return value
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true/false, got {value!r}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            hint = " (write floats with a dot, e.g. 1.0e-4)" if isinstance(value, str) else ""
            raise ConfigError(f"{key}: expected a number, got {value!r}{hint}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{key}: unsupported annotation {annotation!r}")


def build_config(cls: type, values: dict[str, Any] | None = None, **overrides: Any) -> Any:
    """Validate ``values`` (then ``overrides``) against ``cls`` and build the frozen config."""
    merged = {**(values or {}), **overrides}
    if not isinstance(merged, dict):
        raise ConfigError(f"{cls.__name__}: expected a mapping of keys to values")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(merged) - known)
    if unknown:
        raise ConfigError(
            f"unknown key(s) {unknown} for {cls.__name__}; valid keys: {sorted(known)}"
        )
    checked = {k: check_value(k, v, hints[k]) for k, v in merged.items()}
    return cls(**checked)  # which validates it (`validate`)


def check_key_value(cls: type, key: str, value: Any) -> Any:
    """One key of config class ``cls`` on its own: its type and range, not the checks across
    keys (which need the whole config); returns the converted value."""
    value = check_value(key, value, typing.get_type_hints(cls)[key])
    _check_range(key, value)
    return value


def validate(config: Any) -> None:
    """Every check of a config beyond its keys' types, run once, as the config is constructed
    (`build_config`, a direct call, ``dataclasses.replace``): each numeric field's range
    (`POSITIVE_KEYS`, `NON_NEGATIVE_KEYS`), then the checks across fields of its stage.

    Raises:
        ConfigError: naming the key.
    """
    for f in dataclasses.fields(config):
        _check_range(f.name, getattr(config, f.name))
    if isinstance(config, PretrainConfig):
        _check_pretrain(config)
    elif isinstance(config, FinetuneConfig):
        _check_finetune(config)


OBJECTIVE_WEIGHTS = ("spr_weight", "goal_weight", "inverse_weight", "atc_weight", "bc_weight")
"""PretrainConfig's loss weights; at least one is positive."""


def _check_pretrain(config: PretrainConfig) -> None:
    if not any(getattr(config, key) for key in OBJECTIVE_WEIGHTS):
        raise ConfigError(f"{', '.join(OBJECTIVE_WEIGHTS)}: every weight is 0, nothing to learn")
    if config.atc_weight > 0 and (config.spr_weight or config.goal_weight or config.inverse_weight):
        raise ConfigError(
            "atc_weight: ATC is a baseline on its own; set spr_weight, goal_weight and "
            "inverse_weight to 0"
        )
    if config.goal_weight > 0 and not 1 <= config.n_step <= config.spr_steps:
        raise ConfigError(
            f"n_step: must lie in 1..spr_steps ({config.spr_steps}) while goal_weight > 0, "
            f"got {config.n_step}"
        )
    if config.probe_every > 0 and not config.probe_data:
        raise ConfigError(
            "probe_data: probe_every > 0 needs a store with RAM to probe on (sgi-lab collect "
            "... --seed N: other episodes of the same game)"
        )


def _check_finetune(config: FinetuneConfig) -> None:
    if not config.dueling:
        raise ConfigError(
            "dueling: SGIModel's C51 head is always dueling (dueling=false unsupported)"
        )
    if config.ssl != "none" and config.spr_steps < 1:
        raise ConfigError(f"spr_steps: ssl {config.ssl!r} needs K >= 1 (got {config.spr_steps})")
    if config.eval_max_frames % 4:
        raise ConfigError(
            f"eval_max_frames: must be a multiple of 4 (got {config.eval_max_frames})"
        )


def _check_range(key: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    if key in POSITIVE_KEYS and not value > 0:
        raise ConfigError(f"{key}: must be positive, got {value!r}")
    if key in NON_NEGATIVE_KEYS and not value >= 0:
        raise ConfigError(f"{key}: must be >= 0, got {value!r}")
    if value != value or value in (float("inf"), float("-inf")):
        raise ConfigError(f"{key}: must be a finite number, got {value!r}")


def load_yaml_mapping(path: Path, what: str = "a mapping at the top level") -> dict[str, Any]:
    """``yaml.safe_load`` of an existing file that must hold a mapping (empty file: {})."""
    try:
        payload = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a text file ({exc})") from exc
    if not isinstance(payload, dict):
        raise ConfigError(f"{path}: expected {what}")
    return payload


def read_params(path: str | os.PathLike) -> dict[str, Any]:
    """Read a params YAML file (``yaml.safe_load``) and check its top-level keys."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(did_you_mean(path, "params file"))
    if not path.is_file():
        raise ConfigError(f"{path}: is a folder, not a params file (name a .yaml file)")
    payload = load_yaml_mapping(path)
    unknown = sorted(set(payload) - TOP_LEVEL_KEYS)
    if unknown:
        raise ConfigError(
            f"{path}: unknown top-level key(s) {unknown}; valid: {sorted(TOP_LEVEL_KEYS)}"
        )
    if not isinstance(payload.get("config", {}), dict):
        raise ConfigError(f"{path}: 'config' must be a mapping")
    return payload


def parse_value(raw: str) -> Any:
    """A command-line value as YAML: ``3`` -> 3, ``true`` -> True, ``1e-4`` -> 0.0001."""
    value = yaml.safe_load(raw) if raw != "" else ""
    # '1e-4' is a string to PyYAML; accept it as a number where the user clearly meant one.
    if isinstance(value, str):
        try:
            value = float(value) if any(c in value for c in ".eE") else int(value)
        except ValueError:
            pass  # not a number: the string it is ('adam', 'cuda:0', ...)
    return value


def parse_overrides(pairs: list[str] | None) -> dict[str, Any]:
    """``["lr=3.0e-4", "augment=false"]`` -> ``{"lr": 0.0003, "augment": False}`` (YAML values)."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise ConfigError(f"override {pair!r} must look like key=value")
        key, raw = pair.split("=", 1)
        out[key.strip()] = parse_value(raw)
    return out


def load_config(
    cls: type, params: str | os.PathLike | dict | None = None, overrides: dict | None = None, **kw
) -> Any:
    """Build a config from a params file path (or its ``config`` dict) plus overrides."""
    if params is None:
        values: dict = {}
    elif isinstance(params, dict):
        values = params
    else:
        values = read_params(params).get("config", {})
    try:
        return build_config(cls, values, **(overrides or {}), **kw)
    except ConfigError as exc:
        where = f"{params}: " if isinstance(params, (str, os.PathLike)) else ""
        raise ConfigError(f"{where}{exc}") from None


def to_dict(config: Any) -> dict[str, Any]:
    """Plain dict of a config (for YAML/JSON)."""
    return dataclasses.asdict(config)


@dataclass(frozen=True)
class ExploreConfig:
    """The IDF curiosity agent that collects the Exploratory dataset (paper Sec. 3, "(E)").

    The paper only says "the IDF variant of Burda et al. 2018, first 6M steps"; every other value
    is Burda et al.'s (``openai/large-scale-curiosity``, ``run.py`` defaults and the IDF code),
    named after the source in each doc, or the house protocol where it says so.
    """

    num_envs: int = F(128, "parallel environments (Burda: envs_per_process 128)")
    rollout_steps: int = F(128, "steps per env between PPO updates (Burda: nsteps_per_seg 128)")
    epochs: int = F(3, "PPO epochs over each rollout (Burda: nepochs 3)")
    minibatches: int = F(8, "minibatches per epoch (Burda: nminibatches 8)")
    lr: float = F(1.0e-4, "Adam learning rate of every network (Burda: lr 1e-4)")
    gamma: float = F(0.99, "discount of the intrinsic return (Burda: gamma 0.99)")
    gae_lambda: float = F(0.95, "GAE lambda (Burda: lambda 0.95)")
    clip: float = F(0.1, "PPO ratio clip epsilon (Burda: cliprange 0.1)")
    entropy_coef: float = F(0.001, "entropy bonus weight (Burda: ent_coeff 0.001)")
    normalize_advantages: bool = F(True, "advantages to zero mean, unit std per rollout (Burda)")
    normalize_intrinsic: bool = F(
        True, "divide intrinsic rewards by a running std of the intrinsic return (Burda)"
    )
    feature_dim: int = F(512, "IDF embedding size, the forward model's space (Burda: 512)")
    hidden_size: int = F(512, "width of policy, inverse and forward MLPs (Burda: hidsize 512)")
    conv_width: int = F(32, "channels of the first conv; then 2x, 2x (Burda: 32/64/64)")
    forward_blocks: int = F(4, "residual blocks of the forward model (Burda: 4)")
    ob_norm_steps: int = F(
        10_000, "random-agent steps for the observation mean/std (Burda: 10,000)"
    )
    max_episode_frames: int = F(
        108_000, "raw-frame episode cap (house Atari 100k protocol; Burda capped at 18,000)"
    )
    terminal_on_life_loss: bool = F(False, "record life losses as terminals in the store")
    full_action_space: bool = F(False, "all 18 actions instead of the minimal set (house)")
    max_buffered_steps: int = F(
        27_000,
        "rows an env holds before an unfinished episode is written (a split restarts stacks; "
        "27,000 steps = the episode cap, so episodes are never split)",
    )
    chunk_size: int = F(100_000, "store rows per chunk file (the unit of crash safety)")
    checkpoint_every: int = F(10, "PPO updates between agent checkpoints")
    asynchronous: bool = F(True, "one subprocess per env (else all envs in this process)")
    device: str = F("auto", "'auto' (CUDA when present), 'cpu' or 'cuda[:i]'")
    threads: int = F(0, "torch CPU threads (0: torch's default)")

    def __post_init__(self) -> None:
        validate(self)
