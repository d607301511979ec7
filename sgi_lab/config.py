"""Validated, frozen configs, one per stage, built from ``params/*.yaml``.

A params file holds a ``config`` mapping that mirrors the stage's dataclass key for key (plus a
``name`` and a ``description``, and notebook-level literals such as ``game`` and ``seed``)::

    name: sgi_m
    description: SGI-M pretraining (ResNet, S+G+I)
    config:
      encoder: resnet
      spr_coefficient: 0.4

Unknown keys and wrong types are rejected with a message naming the key. Every field has a
default (the paper's value), a type and a one-line doc in its metadata. A key renamed since is
still read, with a one-line warning (`read_old_spr_keys`: spr_weight, now spr_coefficient).
How a field is declared and a value checked or read, knowing no stage, is
`sgi_lab.config_values`; its names are importable from here too.
"""

from __future__ import annotations

import dataclasses
import os
import typing
import warnings
from dataclasses import dataclass
from typing import Any, Literal

from sgi_lab.config_values import (  # the unused names: importable from here as before
    TOP_LEVEL_KEYS,  # noqa: F401
    ConfigError,
    F,
    RangeCheck,  # noqa: F401
    check_key_value,
    check_known_keys,
    check_range,
    check_value,
    load_yaml_mapping,  # noqa: F401
    parse_overrides,  # noqa: F401
    parse_value,  # noqa: F401
    read_params,
    stage_default,
)
from sgi_lab.envs import ENV_PROTOCOLS, canonical_env_game, is_minatar, observation_spec
from sgi_lab.envs.games import UnknownGameError
from sgi_lab.envs.minatar import DIFFICULTY_RAMPING, STICKY_ACTION_PROB
from sgi_lab.envs.spec import ObservationSpec

MAX_MINATAR_FRAMES = 16
"""Stacked MinAtar grids at most: more is a typo, not an experiment (the memory grows with it)."""
MAX_MINATAR_CHANNELS = 64
"""Padded MinAtar channels at most (the games have 4-10)."""


# -- stage configs -----------------------------------------------------------------------------

Encoder = Literal["nature", "resnet", "resnet_l", "minatar", "minatar_l"]

SEED_LIMIT = 2**63
"""Seeds lie in [0, 2**63): every generator they seed (numpy, torch) takes a signed 64-bit int."""


@dataclass(frozen=True, kw_only=True)
class StageConfig:
    """The fields pretraining and finetuning share, declared once. Where the stages' defaults
    differ, the field has none here and each stage gives its own (`stage_default`)."""

    seed: int = F(
        0,
        "random seed, in [0, 2**63)",
        non_negative=True,
        check=lambda v: None if v < SEED_LIMIT else "must be below 2**63",
    )
    encoder: Encoder = F("resnet", "encoder network (minatar, minatar_l: MinAtar's 10x10 grids)")
    hidden_size: int = F(512, "heads' hidden layer width (MinAtar: 128 is enough)", positive=True)
    steps: int = F(doc="training length (per stage: gradient steps or agent steps)", positive=True)
    batch_size: int = F(doc="sequences per batch", positive=True)
    n_step: int = F(doc="n of the n-step returns", positive=True)
    gamma: float = F(0.99, "discount")
    spr_coefficient: float = F(
        2.0,
        "lambda_SPR, what multiplies SPR's loss -sum_k cos (0 disables): 2 in the text and in "
        "SPR's finetuning (its 5 on mean_k(2 - 2 cos)); 0.4 in the authors' pretraining (its 1)",
        non_negative=True,
    )
    spr_steps: int = F(5, "K: SPR's latent prediction steps", non_negative=True)
    goal_weight: float = F(
        1.0,
        "weight of the goal-conditioned RL loss (pretraining: 0 disables; finetuning: used "
        "with ssl == 'all')",
        non_negative=True,
    )
    inverse_weight: float = F(
        1.0,
        "lambda_IM: weight of the inverse-dynamics loss (pretraining: 0 disables; finetuning: "
        "used with ssl == 'all')",
        non_negative=True,
    )
    goal_window: int = F(
        50, "goals are states 1..goal_window steps ahead in the episode", non_negative=True
    )
    goal_reward_scale: float = F(10.0, "goal reward scale (potential-based)", non_negative=True)
    goal_distance_scale: float = F(
        1.0,
        "c in the goal reward's s = exp(2c(cos - 1)): 1 the text's, 5 the reference code's",
        positive=True,
    )
    goal_returns: Literal["text", "reference"] = F(
        "text",
        "goal-RL return: 'text': sum_j gamma^j r_j; 'reference': the code's sum_j gamma^(j+1) r_j",
    )
    goal_double_q: bool = F(
        doc="goal RL's bootstrap action picked by the online network (the code's double Q), "
        "else by the network that evaluates it"
    )
    lr: float = F(1.0e-4, "Adam (base) learning rate", positive=True)
    adam_eps: float = F(1.5e-4, "Adam epsilon", positive=True)
    grad_clip: float = F(10.0, "max gradient norm (0 disables)", non_negative=True)
    augment: bool = F(True, "random shift + intensity jitter on every input")
    log_every: int = F(doc="steps between metrics.jsonl rows", positive=True)
    checkpoint_every: int = F(doc="steps between checkpoints", positive=True)
    device: str = F("auto", "'auto' (CUDA when present), 'cpu' or 'cuda[:i]'")
    amp: bool = F(True, "bf16 autocast on CUDA (ignored on CPU)")
    cpu_amp: bool | Literal["auto"] = F(
        "auto",
        "bf16 autocast on a CPU (only where it has native bf16); auto: the faster, measured",
    )
    channels_last: bool | Literal["auto"] = F(
        "auto", "channels-last memory format for conv layers; auto: measured on a CPU, on a GPU"
    )
    cuda_graphs: bool = F(
        True, "capture the training step once as a CUDA graph and replay it (CUDA only)"
    )


@dataclass(frozen=True, kw_only=True)
class PretrainConfig(StageConfig):
    """Offline pretraining (paper Sec. 2, App. C): SPR + goal RL + inverse dynamics, or a baseline."""

    steps: int = stage_default(
        StageConfig, "steps", 234_375, "gradient steps (paper: 10 epochs of 6M samples at 256)"
    )
    batch_size: int = stage_default(StageConfig, "batch_size", 256)
    n_step: int = stage_default(
        StageConfig, "n_step", 1, "of goal RL (1 as the reference; at most spr_steps)"
    )
    goal_double_q: bool = stage_default(StageConfig, "goal_double_q", True)
    log_every: int = stage_default(StageConfig, "log_every", 100)
    checkpoint_every: int = stage_default(StageConfig, "checkpoint_every", 2_000)
    atc_weight: float = F(
        0.0, "weight of the ATC baseline loss (exclusive with S/G/I)", non_negative=True
    )
    bc_weight: float = F(0.0, "weight of the behavioural-cloning baseline loss", non_negative=True)
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
    goal_film: Literal["text", "reference"] = F(
        "text",
        "FiLM goal conditioning: 'text': a layer norm whose affine parameters FiLM sets; "
        "'reference': the authors' code (no layer norm, value stream from the advantage features)",
    )
    atc_sequences: int = F(32, "ATC: sequences per batch", positive=True)
    atc_seq_len: int = F(8, "ATC: consecutive steps per sequence", positive=True)
    atc_delta: int = F(3, "ATC: steps between anchor and positive", non_negative=True)
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
    probe_every: int = F(
        0,
        "steps between linear probes of the encoder on probe_data (0: none; sgi_lab.probes)",
        non_negative=True,
    )
    probe_data: str = F(
        "", "store with RAM of the game, other episodes than the data, for probe_every"
    )
    probe_frames: int = F(10_000, "frames each probe_every probe uses at most", positive=True)
    probe_readout: Literal["lstsq", "logistic"] = F(
        "lstsq",
        "probe_every's readout: least squares onto one-hot classes (early-stopped), or a "
        "multinomial logistic (softmax) probe, AtariARI's (sgi_lab.probes)",
    )
    probe_features: Literal["renormalized", "conv", "projection"] = F(
        "renormalized",
        "probe_every reads the conv map after the per-sample renormalisation, before it, or "
        "the projection y that S and I train",
    )
    prefetch: int = F(2, "batches prepared ahead on a background thread", non_negative=True)
    compile: bool = F(
        False,
        "torch.compile (inductor) the losses, forward and backward: a MinAtar step ~10% faster "
        "on a 2-core Xeon in bf16 after a ~40 s first compile (cached for later runs); "
        "instead of the CUDA graph on a GPU (benchmarks/README.md)",
    )

    @property
    def uses_goal_rl(self) -> bool:
        """Whether goal-conditioned RL is learned (its weight is positive): the one switch."""
        return self.goal_weight > 0

    @property
    def uses_atc(self) -> bool:
        """Whether this run learns the ATC baseline (its weight is positive) instead of SGI's
        losses: the one switch; atc_weight itself is read where the loss is weighted."""
        return self.atc_weight > 0

    def __post_init__(self) -> None:
        validate(self)


@dataclass(frozen=True, kw_only=True)
class FinetuneConfig(StageConfig):
    """Online finetuning on Atari 100k with Rainbow + SPR (paper Sec. 4, App. C; SPR's settings)."""

    game: str = F("Pong", "Atari 100k game, or a MinAtar one (minatar/breakout)")
    steps: int = stage_default(StageConfig, "steps", 100_000, "agent steps in the environment")
    batch_size: int = stage_default(StageConfig, "batch_size", 32, "the replay batch")
    n_step: int = stage_default(StageConfig, "n_step", 10)
    goal_double_q: bool = stage_default(StageConfig, "goal_double_q", False)
    log_every: int = stage_default(StageConfig, "log_every", 1_000)
    checkpoint_every: int = stage_default(StageConfig, "checkpoint_every", 10_000, "with replay")
    updates_per_step: int = F(
        2, "gradient updates per environment step (replay ratio 64)", non_negative=True
    )
    update_every: int = F(
        1,
        "the step's updates are taken every this many environment steps (1: every step, as "
        "SPR and the paper; 4: the update period of DQN Replay's agents, Dopamine's DQN)",
        positive=True,
    )
    learning_starts: int = F(2_000, "environment steps before learning starts", non_negative=True)
    num_atoms: int = F(51, "C51 atoms", positive=True)
    v_min: float = F(-10.0, "C51 support minimum")
    v_max: float = F(10.0, "C51 support maximum")
    noisy_std: float = F(
        0.5, "sigma_0 of the noisy linear layers (0 disables noise)", non_negative=True
    )
    dueling: bool = F(True, "dueling head")
    double_q: bool = F(True, "double-Q action selection")
    priority_alpha: float = F(0.5, "prioritized replay exponent alpha")
    priority_beta_start: float = F(0.4, "importance-sampling exponent, annealed to 1")
    eps_start: float = F(1.0, "epsilon-greedy start (on top of noisy nets)")
    eps_end: float = F(0.0, "epsilon-greedy end")
    eps_steps: int = F(2_001, "steps to anneal epsilon over", non_negative=True)
    eps_from: Literal["step_0", "learning_starts"] = F(
        "step_0",
        "epsilon annealing starts at step 0, or at learning_starts (rlpyt's schedule, the "
        "reference's: random actions until learning starts)",
    )
    target_update_period: int = F(1, "steps between target network updates", positive=True)
    target_tau: float = F(1.0, "target = online when 1 (SPR's setting)")
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
    rl_head_hidden: Literal["shared", "separate"] = F(
        "shared",
        "with ssl: all, the Q head's first layers: one copy (the paper) or a second copy the RL "
        "loss reads while goal RL trains the first (the reference; docs/paper_vs_code.md row 40)",
    )
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
    pretrained_values: Literal["loaded", "initial"] = F(
        "loaded",
        "with pretrained: 'loaded' copies its tensors; 'initial' keeps this model's own "
        "initialization for them, trained in the same groups at the same lrs (negative control)",
    )
    eval_episodes: int = F(100, "evaluation episodes at the end", positive=True)
    eval_eps: float = F(0.001, "evaluation epsilon")
    eval_envs: int = F(8, "environments stepped together in evaluation", positive=True)
    eval_max_frames: int = F(
        108_000,
        "raw-frame cap of an evaluation episode (a multiple of 4)",
        positive=True,
        check=lambda v: "must be a multiple of 4" if v % 4 else None,
    )
    goal_target: Literal["spr_target", "rl_target"] = F(
        "spr_target",
        "network that evaluates goal RL's bootstrap (ssl == 'all'): SPR's EMA target, or the RL "
        "target (the online network when target_tau is 1) with the RL target's noise sample, "
        "as the reference's agent target model",
    )
    threads: int = F(
        0,
        "torch CPU threads during the run (0: torch's default; 1 when sharing CPUs)",
        non_negative=True,
    )
    env_protocol: Literal["dopamine", "rlpyt", "minatar"] = F(
        "dopamine",
        "Atari env of training and evaluation (make_env's preprocessing): 'dopamine' "
        "(gymnasium's AtariPreprocessing) or 'rlpyt' (the authors' env, docs/paper_vs_code.md "
        "rows 16-21); a MinAtar game plays 'minatar' (set for it)",
    )
    env_workers: int = F(
        0,
        "processes stepping the agents' environments (0: the learner's own process)",
        non_negative=True,
    )
    env_overlap: bool = F(
        False,
        "step the environments while the learner updates: an update does not see the "
        "transition being played (a one-step lag, docs/populations.md); faster with env_workers",
    )
    population_batching: Literal["auto", "vmap", "loop"] = F(
        "auto", "how a population's networks run together: vmap, a loop over agents, or auto"
    )
    lean_kernels: bool = F(
        True,
        "a population's update under vmap in fewer, fused operators (sgi_lab/nets/agent_axis.py): "
        "fewer kernel launches on a GPU, about 0.9x the time on a CPU; rounds differently from "
        "vmap's own rules (within 1e-5), so false reproduces runs made before 2026-11-29",
    )
    sticky_action_prob: float = F(
        STICKY_ACTION_PROB,
        "MinAtar only: probability the previous action is repeated (MinAtar's 0.1)",
        check=lambda v: None if 0 <= v <= 1 else "must be in [0, 1]",
    )
    difficulty_ramping: bool = F(
        DIFFICULTY_RAMPING, "MinAtar only: the game speeds up over an episode (MinAtar's on)"
    )
    frames: int = F(
        1,
        "MinAtar only: grids stacked into one observation (MinAtar's 1)",
        positive=True,
        check=lambda v: f"at most {MAX_MINATAR_FRAMES}" if v > MAX_MINATAR_FRAMES else None,
    )
    channels: int | None = F(
        None,
        "MinAtar only: pad each grid with empty channels up to this many (10: every game one "
        "input shape, so games of other channel counts share a population); None: the game's",
        check=lambda v: (
            None
            if v is None or 1 <= v <= MAX_MINATAR_CHANNELS
            else f"1 to {MAX_MINATAR_CHANNELS}, or null"
        ),
    )

    @property
    def rollout_steps(self) -> int:
        """K of the update's sequences: the transition model's steps (``spr_steps``), or 0
        with ``ssl: none`` (no SSL term reads them)."""
        return self.spr_steps if self.ssl != "none" else 0

    @property
    def uses_goal_rl(self) -> bool:
        """Whether goal-conditioned RL (and inverse dynamics) is learned: ``ssl: all``, the one
        switch; goal_weight only weighs the term."""
        return self.ssl == "all"

    @property
    def env_options(self) -> dict[str, Any]:
        """`sgi_lab.envs.make_env`'s options of the game's family beyond the protocol: the
        MinAtar ones for a MinAtar game, none for Atari (`_check_finetune` refuses them set)."""
        if not is_minatar(self.game):
            return {}
        return {key: getattr(self, key) for key in MINATAR_OPTIONS}

    @property
    def observation_spec(self) -> ObservationSpec:
        """What one observation of the game's env is (`sgi_lab.envs.observation_spec`)."""
        return observation_spec(self.game, self.frames, self.channels)

    def __post_init__(self) -> None:
        # The one place a game name is canonicalised: "pong", "ALE/Pong-v5" and "Pong" are the
        # same config, so they name the same run folder and resume each other.
        try:
            object.__setattr__(self, "game", canonical_env_game(self.game))
        except UnknownGameError as exc:
            raise UnknownGameError(f"game: {exc}") from None
        # A MinAtar game has one protocol: the Atari default reads as it, so a config names
        # its env the same however it was written (and a run folder resumes either way).
        if is_minatar(self.game) and self.env_protocol == "dopamine":
            object.__setattr__(self, "env_protocol", "minatar")
        validate(self)


STAGES: dict[str, type] = {"pretrain": PretrainConfig, "finetune": FinetuneConfig}


def build_config(cls: type, values: dict[str, Any] | None = None, **overrides: Any) -> Any:
    """Validate ``values`` (then ``overrides``) against ``cls`` and build the frozen config."""
    merged = {**(values or {}), **overrides}
    if not isinstance(merged, dict):
        raise ConfigError(f"{cls.__name__}: expected a mapping of keys to values")
    merged = read_old_spr_keys(cls, merged)
    hints = typing.get_type_hints(cls)
    check_known_keys(cls, merged)
    checked = {k: check_value(k, v, hints[k]) for k, v in merged.items()}
    return cls(**checked)  # which validates it (`validate`)


def validate(config: Any) -> None:
    """Every check of a config beyond its keys' types, run once, as the config is constructed
    (`build_config`, a direct call, ``dataclasses.replace``): each numeric field's range (the
    rule beside the field, `F`), then the checks across fields of its stage; a ConfigError
    names the key."""
    for f in dataclasses.fields(config):
        check_range(f, getattr(config, f.name))
    if isinstance(config, PretrainConfig):
        _check_pretrain(config)
    elif isinstance(config, FinetuneConfig):
        _check_finetune(config)


OBJECTIVE_WEIGHTS = ("spr_coefficient", "goal_weight", "inverse_weight", "atc_weight", "bc_weight")
"""PretrainConfig's loss weights; at least one is positive."""


def _check_pretrain(config: PretrainConfig) -> None:
    if not any(getattr(config, key) for key in OBJECTIVE_WEIGHTS):
        raise ConfigError(f"{', '.join(OBJECTIVE_WEIGHTS)}: every weight is 0, nothing to learn")
    if config.uses_atc and (config.spr_coefficient or config.goal_weight or config.inverse_weight):
        raise ConfigError(
            "atc_weight: ATC is a baseline on its own; set spr_coefficient, goal_weight and "
            "inverse_weight to 0"
        )
    if config.uses_goal_rl and not 1 <= config.n_step <= config.spr_steps:
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
    if config.ssl != "none" and config.rollout_steps < 1:
        raise ConfigError(f"spr_steps: ssl {config.ssl!r} needs K >= 1 (got {config.spr_steps})")
    if config.env_protocol not in ENV_PROTOCOLS:
        raise ConfigError(
            f"env_protocol: must be one of {list(ENV_PROTOCOLS)}, got {config.env_protocol!r}"
        )
    minatar = is_minatar(config.game)
    if minatar != (config.env_protocol == "minatar"):
        plays = "'minatar'" if minatar else "an Atari protocol ('dopamine' or 'rlpyt')"
        raise ConfigError(f"env_protocol: {config.game} plays {plays}, got {config.env_protocol!r}")
    problem = encoder_problem(config.encoder, minatar)
    if problem:
        raise ConfigError(f"encoder: {problem} (game {config.game})")
    defaults = FinetuneConfig.__dataclass_fields__
    for key in MINATAR_OPTIONS:
        if not minatar and getattr(config, key) != defaults[key].default:
            raise ConfigError(f"{key}: a MinAtar option, not one of Atari game {config.game}")
    if minatar:
        try:
            config.observation_spec  # noqa: B018 - the check is the spec's own
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


MINATAR_OPTIONS = ("sticky_action_prob", "difficulty_ramping", "frames", "channels")
"""FinetuneConfig's options of a MinAtar env (`sgi_lab.envs.minatar.MinAtarEnv`'s); an Atari
game refuses them set to anything but their defaults."""


MINATAR_ENCODERS = ("minatar", "minatar_l")
"""The encoders of MinAtar's 10x10 grids; the others are Atari's (84x84 frames)."""


def encoder_problem(encoder: str, minatar: bool) -> str | None:
    """Why ``encoder`` cannot read a MinAtar (``minatar``) or an Atari observation, or None:
    Atari's encoders downsample 84x84 frames below one cell of a 10x10 grid, MinAtar's keep
    every cell of a 10x10 grid and would flatten 84x84 frames into a huge linear layer."""
    if minatar and encoder not in MINATAR_ENCODERS:
        return f"{encoder!r} is an Atari encoder; MinAtar observations need one of {list(MINATAR_ENCODERS)}"
    if not minatar and encoder in MINATAR_ENCODERS:
        return (
            f"{encoder!r} is a MinAtar encoder; Atari observations need nature, resnet or resnet_l"
        )
    return None


def load_config(
    cls: type,
    params: str | os.PathLike | dict | None = None,
    overrides: dict | None = None,
    overrides_source: str = "--set",
    **kw: Any,
) -> Any:
    """Build a config from a params file path (or its ``config`` dict) plus overrides.

    A key or value at fault is blamed on where it came from: the params file's own keys on the
    file, ``overrides`` (and ``kw``) on ``overrides_source`` (``--set stepz: unknown key ...;
    did you mean steps?``); a check across keys names the file and the overrides both.
    """
    if params is None:
        values: dict = {}
    elif isinstance(params, dict):
        values = params
    else:
        values = read_params(params).get("config", {})
    in_file = str(params) if isinstance(params, (str, os.PathLike)) else ""
    extra = {**(overrides or {}), **kw}
    given = {**values, **extra} if isinstance(values, dict) else extra
    values = _check_keys_and_values(cls, values, in_file, ": ", given)
    extra = _check_keys_and_values(cls, extra, overrides_source, " ", given)
    try:
        return build_config(cls, values, **extra)
    except ConfigError as exc:
        both = " with ".join(w for w in (in_file, overrides_source if extra else "") if w)
        raise ConfigError(f"{both}: {exc}" if both else str(exc)) from None


def _check_keys_and_values(cls: type, values: Any, source: str, sep: str, given: dict) -> dict:
    """``values`` (old keys read), each key known, each value's type and range, blamed on
    ``source``, ``sep`` before the key (``"p.yaml: steps: ..."``, ``"--set steps: ..."``)."""
    if not isinstance(values, dict):
        raise ConfigError(f"{source}: expected a mapping of {cls.__name__} keys to values")
    try:
        values = read_old_spr_keys(cls, values, given, f"{source}{sep}" if source else "")
        check_known_keys(cls, values)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}" if source else str(exc)) from None
    for key, value in values.items():
        try:
            check_key_value(cls, key, value)
        except ConfigError as exc:
            if not source:
                raise
            raise ConfigError(f"{source}{sep}{exc}") from None
    return values


def to_dict(config: Any) -> dict[str, Any]:
    """Plain dict of a config (for YAML/JSON)."""
    return dataclasses.asdict(config)


OLD_SPR_KEYS = ("spr_weight", "spr_weight_convention")
"""Replaced by spr_coefficient on 2026-11-29; old files still read (`read_old_spr_keys`)."""


def read_old_spr_keys(cls, values, given=None, source: str = "", warn: bool = True) -> Any:
    """``values`` with an old spr_weight read as the spr_coefficient it meant, by the old code's
    arithmetic: itself ('text', pretraining's default convention) or 2 spr_weight / spr_steps
    ('reference': the authors' weight on mean_k(2 - 2 cos), finetuning's always); with its
    convention and K among ``given`` (every key given), and a one-line FutureWarning."""
    old = {*OLD_SPR_KEYS} & {*values} if isinstance(values, dict) else None
    if not old or cls not in STAGES.values():
        return values
    given = {"spr_steps": cls.__dataclass_fields__["spr_steps"].default, **values, **(given or {})}
    default = "reference" if cls is FinetuneConfig else "text"
    convention = given.get("spr_weight_convention", default)
    if {"spr_coefficient", "spr_weight"} <= {*values} or "spr_weight" not in given:
        raise ConfigError(
            f"{'/'.join(sorted(old))}: replaced by spr_coefficient, the weight on -sum_k cos "
            "(0.4: the authors' spr_weight 1 on mean_k(2 - 2 cos)); write that instead"
        )
    check_value("spr_weight_convention", convention, Literal["text", "reference"])
    new = {k: v for k, v in values.items() if k not in OLD_SPR_KEYS}
    if "spr_weight" in values:
        w = check_value("spr_weight", values["spr_weight"], float)
        k = check_key_value(cls, "spr_steps", given["spr_steps"])
        new["spr_coefficient"] = c = w if convention == "text" else 2.0 * w / max(1, k)
        if warn:
            message = f"{source}spr_weight: {w:g} ({convention}) is spr_coefficient: {c:g}"
            warnings.warn(f"{message}, the weight on -sum_k cos; write that", FutureWarning, 3)
    return new


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
    lr: float = F(1.0e-4, "Adam learning rate of every network (Burda: lr 1e-4)", positive=True)
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
    ob_norm_steps: int = F(10_000, "random-agent steps for observation mean/std (Burda: 10,000)")
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
    checkpoint_every: int = F(10, "PPO updates between agent checkpoints", positive=True)
    asynchronous: bool = F(True, "one subprocess per env (else all envs in this process)")
    device: str = F("auto", "'auto' (CUDA when present), 'cpu' or 'cuda[:i]'")
    threads: int = F(0, "torch CPU threads (0: torch's default)", non_negative=True)

    def __post_init__(self) -> None:
        validate(self)
