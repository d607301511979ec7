"""Online finetuning on Atari 100k: Rainbow + SPR, from scratch (SGI-None) or from a pretrained run.

The agent is SPR's (paper Sec. 4 and App. C; ``mila-iqia/SGI`` ``src/algos.py``): C51 over 51
atoms on [-10, 10], dueling noisy head (sigma_0 0.5), double Q, 10-step returns, gamma 0.99,
prioritized replay (alpha 0.5, beta annealed linearly from 0.4 at the first update to 1 at the
end), batch 32, 2 updates per environment step after 2,000 steps, epsilon 1 -> 0 over the first
2,001 steps on top of the noisy nets, SPR with K = 5 (online encoder -> transition model ->
projection -> predictor, against the EMA(0.99) target encoder + projection), Adam (lr 1e-4,
eps 1.5e-4), gradient norm clipped to 10, random shift + intensity on every observation.

The Q target network is the online network (SPR's ``target_update_tau = 1``,
``target_update_interval = 1``): the bootstrap distribution is computed with the online
parameters under ``no_grad``, with its own noise sample, while double-Q action selection uses
the noise of the update. Other ``target_tau`` / ``target_update_period`` values keep a separate
copy, moved toward the online network by ``target_tau`` every ``target_update_period`` updates.

Losses, per sample and weighted by the importance-sampling weights (all of them, as the
reference does), then averaged over the batch::

    total = rl + 2 * spr_weight / K * spr [+ goal_weight * goal_rl + inverse_weight * inverse]

``spr`` is :func:`sgi_lab.objectives.spr_loss` (minus the sum over k = 1..K of the cosine); the
reference averages 2 - 2 cos over the K steps, which has ``2 / K`` times its gradient, so
``spr_weight`` keeps the reference's meaning (5). Replay priorities are the C51 KL divergences.

Pretrained weights (``config.pretrained``, a pretraining run folder or a model file): every tensor
whose name exists in both models with the same shape is loaded, the rest of the finetuning model
starts fresh, and tensors only the pretrained model has (goal head, inverse model, ATC head) are
ignored; a name present in both with a different shape is an error. The noisy layers' sigmas are
then reset (pretraining runs noise-free). Learning rates depend on ``config.scheme``:

============  ===========================================  ================  ==============
scheme        pretrained encoder + transition model        other pretrained  fresh
============  ===========================================  ================  ==============
reduced_lr    lr * encoder_lr_scale (0.01)                 lr * 1/3          lr
naive         lr                                           lr                lr
frozen        not trained (weights and BN statistics)      lr * 1/3          lr
============  ===========================================  ================  ==============

Run folder (`FinetuneRun`)::

    RUN/config.yaml        resolved FinetuneConfig
    RUN/status.json        running / finished / failed, step, params, game, pretrained, eval
    RUN/log.txt            what was loaded, resumed, evaluated
    RUN/transfer.json      which tensors came from the pretrained run, which are fresh
    RUN/metrics.jsonl      one row per step that has something to say (strictly increasing):
                           episode/return (raw), episode/clipped_return, episode/length,
                           and every log_every steps losses/{rl,spr,total[,goal_rl,inverse]}
                           and charts/{q_mean,q_next_mean,grad_norm} (means over the updates
                           since the previous row), charts/{beta,epsilon,sps,ups,updates}
    RUN/checkpoints/       model, SPR target, optimizer, replay, RNG states (torch, numpy)
    RUN/model.pt           the final model (kind "finetuned_model")
    RUN/eval.json          evaluation of the final model (sgi_lab.train.evaluate)

Speed (benchmarks/finetune_speed.py): observations are augmented straight into channels-last
float buffers, time-major so that the K target frames make one encoder batch without a copy;
the target passes run under ``no_grad``; Adam is fused; bf16 autocast runs on CUDA (``amp``) and
on CPUs with native bf16 (``cpu_amp``, 1.4-2.6x on the encoders). ``threads`` pins torch's CPU
threads: on a CPU shared with other busy processes, 2 OpenMP threads per process can be 10x
slower than 1.

Re-running into a folder resumes from its last checkpoint. The Atari emulator cannot be
checkpointed, so a resumed run resets the environment and starts a fresh episode (the episode
cut short stays in the replay as a truncated one); metrics rows logged after that checkpoint are
dropped, so no step appears twice. A finished run is not re-run (``overwrite=True`` starts over).
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
import yaml
from tqdm.auto import tqdm

from sgi_lab.augment import intensity, random_shift
from sgi_lab.config import ConfigError, FinetuneConfig, save_config, to_dict
from sgi_lab.data.replay import PrioritizedReplay
from sgi_lab.data.sampler import SequenceBatch
from sgi_lab.envs import canonical_game, make_env
from sgi_lab.envs import num_actions as game_actions
from sgi_lab.nets import SGIModel, ema_update, make_target, parameter_group
from sgi_lab.nets.encoders import prepare_pixels
from sgi_lab.nets.runtime import clip_gradients, prepare_device
from sgi_lab.objectives import (
    c51_kl,
    c51_loss,
    c51_target,
    goal_rl_loss,
    inverse_dynamics_loss,
    sample_goals,
    spr_loss,
)
from sgi_lab.runs import (
    CheckpointError,
    RunDir,
    atomic_torch_save,
    atomic_write_text,
    load_checkpoint,
    read_jsonl,
    resolve_device,
    restore_generator,
)
from sgi_lab.train.evaluate import cpu_has_native_bf16, evaluate, greedy_actions

__all__ = [
    "Agent",
    "FinetuneRun",
    "Pretrained",
    "PretrainedMismatchError",
    "Transfer",
    "beta_at",
    "build_optimizer",
    "epsilon_at",
    "finetune",
    "load_pretrained",
    "make_agent",
    "model_args_for",
    "rl_targets",
    "train_step",
    "transfer_pretrained",
]

log = logging.getLogger("sgi_lab.finetune")

# SGIModel arguments that shape the tensors shared with a pretrained model; taken from it.
ARCHITECTURE_ARGS = ("in_channels", "image_size", "hidden_size")


class PretrainedMismatchError(ValueError):
    """The pretrained model does not fit the finetuning model (encoder or tensor shapes)."""


# -- pretrained weights ------------------------------------------------------------------------


@dataclass(frozen=True)
class Pretrained:
    """A pretrained model as read from a pretraining run.

    Attributes:
        path: the file read (``RUN/model.pt`` or a checkpoint).
        state: its state dict.
        model_args: SGIModel arguments it was built with (``encoder``, ``num_actions``...).
        step: pretraining steps behind it.
        game: game it was pretrained on (None if unrecorded).
        params: the pretraining params name from the run's status.json (None if unrecorded).
    """

    path: Path
    state: dict[str, torch.Tensor]
    model_args: dict[str, Any]
    step: int
    game: str | None = None
    params: str | None = None


def load_pretrained(source: str | Path) -> Pretrained:
    """Read a pretraining run's model: ``RUN/model.pt`` when finished, else its last checkpoint.

    Args:
        source: a pretraining run folder, or a model/checkpoint file.

    Raises:
        CheckpointError: nothing to load, or a truncated or foreign file.
    """
    source = Path(source)
    if source.is_file():
        path = source
    elif (source / "model.pt").exists():
        path = source / "model.pt"
    elif source.is_dir():
        path = RunDir(source).latest_checkpoint()
        if path is None:
            raise CheckpointError(
                f"{source}: pretraining run has neither model.pt nor a checkpoint to load"
            )
        log.warning("%s has no model.pt (unfinished run?): loading checkpoint %s", source, path)
    else:
        raise CheckpointError(f"{source}: pretraining run folder not found")
    payload = load_checkpoint(path, "cpu")
    if payload.get("kind") not in ("pretrained_model", "pretrain"):
        raise CheckpointError(
            f"{path}: a {payload.get('kind')!r} file, expected a pretrained model "
            "('pretrained_model' or a 'pretrain' checkpoint)"
        )
    for key in ("model", "model_args"):
        if not isinstance(payload.get(key), dict):
            raise CheckpointError(f"{path}: no {key!r} entry; not a pretrained model")
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    try:
        status = json.loads((run_dir / "status.json").read_text())
    except (OSError, json.JSONDecodeError):
        status = {}
    return Pretrained(
        path=path,
        state=payload["model"],
        model_args=dict(payload["model_args"]),
        step=int(payload.get("step", 0)),
        game=payload.get("game"),
        params=status.get("params"),
    )


@dataclass(frozen=True)
class Transfer:
    """Which tensors of the finetuning model came from the pretrained model.

    Attributes:
        loaded: names (parameters and buffers) copied from the pretrained model.
        fresh: names of the finetuning model left at their initialization.
        ignored: names only the pretrained model has.
        source: the file they came from (None: no pretraining).
    """

    loaded: tuple[str, ...] = ()
    fresh: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()
    source: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "loaded": list(self.loaded),
            "fresh": list(self.fresh),
            "ignored": list(self.ignored),
        }


def transfer_pretrained(model: SGIModel, pretrained: Pretrained) -> Transfer:
    """Copy every tensor the two models share by name (shapes must agree), then reset the noisy
    layers' sigmas (pretraining runs without noise).

    Raises:
        PretrainedMismatchError: different encoders, or shared names with different shapes
            (listed with both shapes).
    """
    enc = pretrained.model_args.get("encoder")
    if enc is not None and enc != model.encoder_name:
        raise PretrainedMismatchError(
            f"{pretrained.path}: pretrained encoder is {enc!r} but finetuning builds "
            f"{model.encoder_name!r}; set encoder={enc} (or pretrain a {model.encoder_name})"
        )
    own = model.state_dict()
    theirs = pretrained.state
    mismatched = [
        f"{k}: pretrained {tuple(theirs[k].shape)} vs finetune {tuple(v.shape)}"
        for k, v in own.items()
        if k in theirs and tuple(theirs[k].shape) != tuple(v.shape)
    ]
    if mismatched:
        hint = ""
        their_actions = pretrained.model_args.get("num_actions")
        if their_actions is not None and their_actions != model.num_actions:
            hint = (
                f" (the pretrained model has {their_actions} actions, the finetuning model "
                f"{model.num_actions}: another game, or a different action set?)"
            )
        raise PretrainedMismatchError(
            f"{pretrained.path}: {len(mismatched)} tensor(s) differ in shape{hint}: "
            + "; ".join(mismatched)
        )
    loaded = tuple(k for k in own if k in theirs)
    model.load_state_dict({**own, **{k: theirs[k] for k in loaded}})
    model.reset_noise_parameters()
    return Transfer(
        loaded=loaded,
        fresh=tuple(k for k in own if k not in theirs),
        ignored=tuple(k for k in theirs if k not in own),
        source=str(pretrained.path),
    )


def model_args_for(
    config: FinetuneConfig, num_actions: int, pretrained: Pretrained | None = None
) -> dict[str, Any]:
    """SGIModel keyword arguments of the finetuning model (saved with it in ``model.pt``)."""
    args: dict[str, Any] = {
        "encoder": config.encoder,
        "num_actions": num_actions,
        "num_atoms": config.num_atoms,
        "v_min": config.v_min,
        "v_max": config.v_max,
        "noisy": config.noisy_std > 0,
        "noise_std": config.noisy_std,
        "rl_head": True,
        "goal_head": config.ssl == "all",
        "inverse_model": config.ssl == "all",
    }
    if pretrained is not None:
        args.update(
            {k: pretrained.model_args[k] for k in ARCHITECTURE_ARGS if k in pretrained.model_args}
        )
    return args


# -- optimizer ---------------------------------------------------------------------------------


def build_optimizer(
    model: SGIModel, loaded_names: list[str] | tuple[str, ...] | set[str], config: FinetuneConfig
) -> torch.optim.Adam:
    """Adam with one parameter group per learning rate of ``config.scheme``.

    Groups (empty ones left out): ``encoder_transition`` (pretrained encoder and transition model
    parameters: lr * encoder_lr_scale, or lr when naive), ``pretrained`` (other pretrained
    parameters: lr * pretrained_lr_scale, or lr when naive) and ``fresh`` (lr). With the frozen
    scheme the encoder's parameters are left out and set ``requires_grad=False``.

    Args:
        model: the finetuning model.
        loaded_names: names of the tensors loaded from the pretrained model.
        config: lr, adam_eps, scheme and the two scales.
    """
    loaded = set(loaded_names)
    scale = {
        "encoder_transition": 1.0 if config.scheme == "naive" else config.encoder_lr_scale,
        "pretrained": 1.0 if config.scheme == "naive" else config.pretrained_lr_scale,
        "fresh": 1.0,
    }
    groups: dict[str, list[torch.nn.Parameter]] = {name: [] for name in scale}
    for name, param in model.named_parameters():
        part = parameter_group(name)
        if config.scheme == "frozen" and part == "encoder":
            param.requires_grad_(False)
            continue
        if not param.requires_grad:
            continue
        if name not in loaded:
            groups["fresh"].append(param)
        elif part in ("encoder", "transition"):
            groups["encoder_transition"].append(param)
        else:
            groups["pretrained"].append(param)
    param_groups = [
        {"name": name, "params": params, "lr": config.lr * scale[name]}
        for name, params in groups.items()
        if params
    ]
    # fused: one pass over each tensor instead of ~8 (6x faster on CPU for the 8M parameters).
    return torch.optim.Adam(param_groups, lr=config.lr, eps=config.adam_eps, fused=True)


# -- the agent ---------------------------------------------------------------------------------


@dataclass
class Agent:
    """Everything an update reads and changes; the update itself is `train_step`.

    Attributes:
        model: the online network (Q head, SPR parts, and goal/inverse heads for ssl 'all').
        spr_target: EMA copy whose encoder and projection give SPR's targets (and the goal-RL
            target network for ssl 'all').
        q_target: separate Q target network, or None when the online network is its own target
            (target_tau 1, period 1: SPR's setting).
        optimizer: Adam with the scheme's parameter groups.
        replay: prioritized replay.
        config: the run's config.
        device: where the networks live.
        generator: torch random source on ``device`` (augmentation, noise, goals).
        amp: bf16 autocast (CUDA).
        updates: gradient updates done so far.
    """

    model: SGIModel
    spr_target: SGIModel
    q_target: SGIModel | None
    optimizer: torch.optim.Adam
    replay: PrioritizedReplay
    config: FinetuneConfig
    device: torch.device
    generator: torch.Generator
    amp: bool = False
    updates: int = 0
    trainable: list[torch.nn.Parameter] = field(default_factory=list)
    ema_target: list[torch.Tensor] = field(default_factory=list)
    ema_online: list[torch.Tensor] = field(default_factory=list)

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.amp:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()


def _ema_tensors(agent: Agent) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(target, online) float tensors the SPR target follows: encoder (parameters and batch-norm
    statistics) and projection means; for ssl 'all' also the projection sigmas and the goal head
    (the goal-RL target network)."""
    names = ["encoder."]
    if agent.config.ssl == "all":
        names += ["head.advantage_hidden.", "head.value_hidden.", "film.", "goal_head."]
    else:  # project() never uses the sigmas
        names += [
            f"head.{s}_hidden.{p}_mu" for s in ("advantage", "value") for p in ("weight", "bias")
        ]
    target_state = agent.spr_target.state_dict(keep_vars=True)
    online_state = agent.model.state_dict(keep_vars=True)
    pairs = [
        (target_state[k].data, online_state[k].data)
        for k in online_state
        if k.startswith(tuple(names)) and online_state[k].is_floating_point()
    ]
    return [t for t, _ in pairs], [o for _, o in pairs]


def use_amp(config: FinetuneConfig, device: torch.device) -> bool:
    """bf16 autocast: on CUDA when ``amp``, on CPU when ``cpu_amp`` and the CPU has native bf16."""
    if device.type == "cuda":
        return config.amp
    return device.type == "cpu" and config.cpu_amp and cpu_has_native_bf16()


def freeze_encoder(model: SGIModel) -> None:
    """No gradients and batch norm on running statistics: weights and buffers stay as loaded."""
    model.encoder.requires_grad_(False)
    model.encoder.eval()


def train_mode(agent: Agent) -> None:
    """Networks in training mode (batch statistics), except a frozen encoder."""
    agent.model.train()
    agent.spr_target.train()
    if agent.q_target is not None:
        agent.q_target.train()
    if agent.config.scheme == "frozen":
        for net in (agent.model, agent.spr_target, agent.q_target):
            if net is not None:
                net.encoder.eval()


def make_agent(
    config: FinetuneConfig,
    model_args: dict[str, Any],
    device: torch.device | str = "cpu",
    pretrained: Pretrained | None = None,
    loaded: tuple[str, ...] | list[str] | None = None,
) -> tuple[Agent, Transfer]:
    """Build the model (loading pretrained weights), targets, optimizer and replay.

    Args:
        config: the run's config.
        model_args: SGIModel arguments (`model_args_for`).
        device: where the networks live.
        pretrained: weights to start from (None: SGI-None, or a resumed run).
        loaded: for a resumed run, the names its pretrained model provided (they set the
            optimizer groups; the weights come from the checkpoint).

    Returns:
        The agent and what was transferred.
    """
    device = torch.device(device)
    prepare_device(device)  # CPU: freed heap is reused instead of page-faulted back
    torch.manual_seed(config.seed)
    model = SGIModel(**model_args)
    if pretrained is not None:
        transfer = transfer_pretrained(model, pretrained)
    else:
        names = tuple(model.state_dict())
        loaded = tuple(loaded or ())
        transfer = Transfer(loaded=loaded, fresh=tuple(k for k in names if k not in loaded))
    model.to(device)
    if config.channels_last:
        model.channels_last = True
        model.to(memory_format=torch.channels_last)
    if config.scheme == "frozen":
        if pretrained is None and not transfer.loaded:
            log.warning("scheme 'frozen' without a pretrained model freezes a random encoder")
        freeze_encoder(model)
    optimizer = build_optimizer(model, transfer.loaded, config)
    spr_target = make_target(model)
    separate_q = not (config.target_tau == 1.0 and config.target_update_period == 1)
    q_target = make_target(model) if separate_q else None
    replay = PrioritizedReplay(
        config.steps,
        alpha=config.priority_alpha,
        K=config.spr_steps if config.ssl != "none" else 0,
        n_step=config.n_step,
        gamma=config.gamma,
        seed=config.seed,
        goal_window=config.goal_window if config.ssl == "all" else 0,
    )
    generator = torch.Generator(device=device)
    generator.manual_seed(config.seed)
    agent = Agent(
        model=model,
        spr_target=spr_target,
        q_target=q_target,
        optimizer=optimizer,
        replay=replay,
        config=config,
        device=device,
        generator=generator,
        amp=use_amp(config, device),
        trainable=[p for p in model.parameters() if p.requires_grad],
    )
    agent.ema_target, agent.ema_online = _ema_tensors(agent)
    train_mode(agent)
    return agent, transfer


# -- schedules ---------------------------------------------------------------------------------


def epsilon_at(step: int, config: FinetuneConfig) -> float:
    """Linear from eps_start at step 0 to eps_end at eps_steps, then constant."""
    frac = min(1.0, step / max(1, config.eps_steps))
    return config.eps_start + frac * (config.eps_end - config.eps_start)


def beta_at(step: int, config: FinetuneConfig) -> float:
    """Importance-sampling exponent: linear from priority_beta_start when learning starts to 1
    at the last step (rlpyt's schedule, which SPR uses)."""
    span = max(1, config.steps - config.learning_starts)
    frac = min(1.0, max(0.0, (step - config.learning_starts) / span))
    return config.priority_beta_start + frac * (1.0 - config.priority_beta_start)


def spr_coefficient(config: FinetuneConfig) -> float:
    """Weight of `spr_loss` that gives the reference's ``spr_weight`` gradient (module doc)."""
    return 2.0 * config.spr_weight / max(1, config.spr_steps)


# -- acting and one update ---------------------------------------------------------------------


def act(agent: Agent, obs: np.ndarray, eps: float, rng: np.random.Generator) -> int:
    """Epsilon-greedy action on the noisy Q values (batch norm on running statistics, as
    rlpyt's sampling mode); the network goes back to training mode afterwards."""
    model = agent.model
    model.eval()
    # bf16 only on a GPU: for one observation on a CPU the weight casts cost more than they save.
    amp = agent.amp and agent.device.type == "cuda"
    try:
        return int(greedy_actions(model, _tensor(obs[None], agent.device), eps, rng, amp)[0])
    finally:
        model.train()
        if agent.config.scheme == "frozen":
            model.encoder.eval()


def _tensor(array: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array)).to(device, non_blocking=True)


def augmented_frames(agent: Agent, obs: np.ndarray, time_major: bool = False) -> torch.Tensor:
    """Uint8 frame stacks -> the encoders' prepared input: each stack shifted and
    intensity-jittered (`sgi_lab.augment`), scaled by 1/255, in the compute dtype (bf16 under
    autocast) and the model's memory format; encode it with ``prepared=True``.

    The shift crops uint8 pixels, writing a time-major sequence in that order; the jitter, the
    1/255 and the cast are then one multiply (`sgi_lab.nets.encoders.prepare_pixels`) instead
    of a float copy, a multiply, a layout copy and the encoder's own scaling. Draws are made in
    (B, T) order whatever the output order, as ``sgi_lab.augment.augment(obs)`` makes them.

    Args:
        agent: the agent (config.augment, generator, device, model layout, amp).
        obs: (B, 4, 84, 84) or (B, T, 4, 84, 84) uint8.
        time_major: return a (T, B, ...) sequence, so that ``x[1:]`` flattens to one encoder
            batch without a copy.

    Returns:
        Tensor of the same shape (time-major if asked): ``augment(obs) / 255``.
    """
    x = _tensor(obs, agent.device)
    time_major = time_major and x.dim() == 5
    factor = None
    if agent.config.augment:
        x = random_shift(x, generator=agent.generator, time_major=time_major)
        # intensity() of ones is the per-stack factor itself, drawn exactly as for the frames.
        draw = obs.shape[:-3]
        factor = intensity(torch.ones(*draw, 1, 1, 1, device=x.device), generator=agent.generator)
        factor = factor.transpose(0, 1) if time_major else factor
    elif time_major:
        x = x.transpose(0, 1)
    lead = x.shape[:-3]
    dtype = torch.bfloat16 if agent.amp else torch.float32
    x = x.reshape(-1, *x.shape[-3:])  # (n, 4, 84, 84)
    factor = None if factor is None else factor.reshape(-1, 1, 1, 1)
    out = prepare_pixels(x, factor, channels_last=agent.model.channels_last, dtype=dtype)
    return out.view(*lead, *out.shape[1:])


def rl_targets(
    agent: Agent, boot_obs: torch.Tensor, returns: torch.Tensor, discounts: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """C51 target distributions of the n-step returns; call under ``torch.no_grad()``.

    The bootstrap distribution comes from the target network (the online parameters with their
    own noise sample when there is no separate copy); with double Q the action is picked by the
    online network with the noise this update trains with, so the online noise is drawn last.

    Args:
        agent: the agent.
        boot_obs: (B, 4, 84, 84) augmented bootstrap observations s_{t+m}.
        returns: (B,) n-step returns of clipped rewards (``SequenceBatch.returns``).
        discounts: (B,) gamma^m, 0 after a terminal (``SequenceBatch.bootstrap_discount``).

    Returns:
        (B, Z) projected targets, and (B, A) online Q values at s_{t+m} (for logging).
    """
    model, cfg = agent.model, agent.config
    z = model.encode(boot_obs, prepared=True)
    if agent.q_target is None:
        model.reset_noise(agent.generator)
        target_probs = F.softmax(model.q_logits(z), -1)
    else:
        agent.q_target.reset_noise(agent.generator)
        target_probs = F.softmax(
            agent.q_target.q_logits(agent.q_target.encode(boot_obs, prepared=True)), -1
        )
    model.reset_noise(agent.generator)
    online_probs = F.softmax(model.q_logits(z), -1)
    selection = online_probs if cfg.double_q else None
    target = c51_target(target_probs, returns, discounts, model.support, selection)
    return target, (online_probs * model.support).sum(-1)


def train_step(agent: Agent, batch: SequenceBatch, weights: np.ndarray) -> dict[str, torch.Tensor]:
    """One gradient update: batch -> targets under no_grad -> loss -> step -> priorities.

    Args:
        agent: the agent (its networks, optimizer, targets and replay priorities change).
        batch: K+1 observations per sample, n-step returns and bootstrap observations.
        weights: (B,) importance-sampling weights of the batch.

    Returns:
        Scalar tensors (not synchronized): losses/rl, losses/spr, losses/total (and
        losses/goal_rl, losses/inverse for ssl 'all'), charts/q_mean, charts/grad_norm.

    Raises:
        FloatingPointError: the loss is NaN or infinite (nothing is updated).
    """
    cfg, model, dev = agent.config, agent.model, agent.device
    K = cfg.spr_steps if cfg.ssl != "none" else 0
    # 1. Batch on the device, every observation augmented.
    obs = augmented_frames(agent, batch.obs, time_major=True)  # (K+1, B, 4, 84, 84)
    boot_obs = augmented_frames(agent, batch.bootstrap_obs)
    actions, valid = _tensor(batch.actions, dev), _tensor(batch.valid, dev)
    w = _tensor(weights, dev).float()

    # One autocast region for targets and losses: autocast casts each parameter to bf16 once per
    # region, so the casts of the online weights made for the targets serve the losses too.
    with agent.autocast():
        # 2. Targets, no gradient: C51 n-step target; target latents of s_{t+1..t+K} in one pass
        #    (s_t too and the goal observations for the goal-RL and inverse losses of ssl 'all').
        with torch.no_grad():
            returns, discounts = _tensor(batch.returns, dev), _tensor(batch.bootstrap_discount, dev)
            rl_target, q_next = rl_targets(agent, boot_obs, returns, discounts)
            target = agent.spr_target
            if cfg.ssl == "all":
                target.reset_noise(agent.generator)
                goal_obs = augmented_frames(agent, batch.goal_obs)
                # Time-major (T, B, ...) throughout: the linear projection of a transposed batch
                # would make matmul broadcast its weight into a (B, 3136, 512) copy.
                target_z = target.encode(torch.cat([obs, goal_obs[None]], 0), prepared=True)
                goals = sample_goals(target_z[-1], agent.generator)
                target_z = target_z[:-1]  # (K+1, B, C, 7, 7): s_t..s_{t+K}
                goal_next_probs = F.softmax(target.goal_q_logits(target_z[1], goals), -1)
            elif K > 0:  # (K, B, C, 7, 7): s_{t+1}..s_{t+K}
                target_z = target.encode(obs[1:], prepared=True)
            target_y = target.project(target_z).transpose(0, 1) if K > 0 else None  # (B, T, P)

        # 3. Losses.
        z0 = model.encode(obs[0], prepared=True)
        logits = model.q_logits(z0)
        losses = {"rl": c51_loss(logits, actions[:, 0], rl_target)}
        if K > 0:
            z_hat = model.rollout(z0, actions[:, :K])  # (B, K, C, 7, 7)
            if cfg.ssl == "all":
                y_hat = model.project(torch.cat([z0[:, None], z_hat], 1))  # k = 0..K
            else:
                y_hat = model.project(z_hat)  # k = 1..K
            # contiguous: a strided 3-D input would make the predictor's matmul copy its weight.
            predictions = model.predict(y_hat[:, -K:].contiguous())
            losses["spr"] = spr_loss(predictions, target_y[:, -K:], valid[:, 1:])
        if cfg.ssl == "all":
            inv_logits = model.inverse_logits(y_hat[:, :-1], target_y[:, 1:])
            losses["inverse"] = inverse_dynamics_loss(inv_logits, actions[:, :K], valid[:, 1:])
            losses["goal_rl"] = goal_rl_loss(
                model.goal_q_logits(z0, goals),
                actions[:, 0],
                target_z[:2].transpose(0, 1).flatten(2),
                goals,
                goal_next_probs,
                valid[:, :2],
                model.support,
                gamma=cfg.gamma,
                reward_scale=cfg.goal_reward_scale,
            )
    coef = {
        "rl": 1.0,
        "spr": spr_coefficient(cfg),
        "goal_rl": cfg.goal_weight,
        "inverse": cfg.inverse_weight,
    }
    total = (w * sum(coef[k] * v for k, v in losses.items())).mean()
    if not torch.isfinite(total):
        parts = ", ".join(f"{k}={v.mean().item():.4g}" for k, v in losses.items())
        raise FloatingPointError(f"non-finite loss at update {agent.updates}: {parts}")

    # 4. Step.
    agent.optimizer.zero_grad(set_to_none=True)
    total.backward()
    if cfg.grad_clip > 0:
        grad_norm = clip_gradients(agent.trainable, cfg.grad_clip)
    else:
        grad_norm = torch.zeros((), device=dev)
    agent.optimizer.step()
    agent.updates += 1
    update_targets(agent)

    # 5. Priorities: KL between the target and the predicted distribution of the action taken.
    priorities = c51_kl(logits.detach(), actions[:, 0], rl_target)
    agent.replay.update_priorities(batch.indices, priorities.cpu().numpy())

    # 6. Stats, left on the device; the caller averages them at log time.
    with torch.no_grad():
        q_mean = (F.softmax(logits.detach(), -1) * model.support).sum(-1).mean()
    stats = {f"losses/{k}": v.detach().mean() for k, v in losses.items()}
    stats.update(
        {
            "losses/total": total.detach(),
            "charts/q_mean": q_mean,
            "charts/q_next_mean": q_next.mean(),
            "charts/grad_norm": grad_norm.detach(),
        }
    )
    return stats


@torch.no_grad()
def update_targets(agent: Agent) -> None:
    """EMA step of the SPR target (after every update) and, when there is a separate Q target
    copy, its update every ``target_update_period`` updates."""
    cfg = agent.config
    if agent.ema_target:
        torch._foreach_lerp_(agent.ema_target, agent.ema_online, 1.0 - cfg.spr_ema_tau)
    if agent.q_target is not None and agent.updates % cfg.target_update_period == 0:
        # config.target_tau weighs the online network (1 copies it); ema_update weighs the target.
        ema_update(agent.q_target, agent.model, 1.0 - cfg.target_tau)


# -- run folder --------------------------------------------------------------------------------


class FinetuneRun(RunDir):
    """A finetuning run folder (see the module docstring), with readers for its outputs."""

    @property
    def evaluation(self) -> dict[str, Any] | None:
        """``eval.json`` (None until the run is evaluated)."""
        path = self.path / "eval.json"
        return json.loads(path.read_text()) if path.exists() else None

    @property
    def transfer(self) -> dict[str, Any] | None:
        path = self.path / "transfer.json"
        return json.loads(path.read_text()) if path.exists() else None

    @property
    def config(self) -> dict[str, Any] | None:
        path = self.path / "config.yaml"
        return yaml.safe_load(path.read_text()) if path.exists() else None

    def metrics(self):
        """metrics.jsonl as a pandas DataFrame (one row per logged step)."""
        import pandas as pd

        return pd.DataFrame(read_jsonl(self.metrics_path))

    def episodes(self):
        """The episode rows of the metrics: step, return (raw), clipped_return, length."""
        df = self.metrics()
        if df.empty or "episode/return" not in df:
            import pandas as pd

            return pd.DataFrame(columns=["step", "return", "clipped_return", "length"])
        df = df.dropna(subset=["episode/return"])
        return df[["step", "episode/return", "episode/clipped_return", "episode/length"]].rename(
            columns=lambda c: c.removeprefix("episode/")
        )

    def __repr__(self) -> str:
        return f"FinetuneRun({str(self.path)!r}, state={self.status().get('state')!r})"


def _clear(run: RunDir) -> None:
    for name in (
        "status.json",
        "metrics.jsonl",
        "eval.json",
        "model.pt",
        "transfer.json",
        "log.txt",
    ):
        (run.path / name).unlink(missing_ok=True)
    shutil.rmtree(run.checkpoints_dir, ignore_errors=True)


def _check_same_config(run: RunDir, config: FinetuneConfig, saved: dict[str, Any] | None) -> None:
    if saved is None:
        return
    ours = to_dict(config)
    # The device may change between a crash and its resume; nothing else may.
    diff = sorted(k for k in ours if k != "device" and saved.get(k) != ours[k])
    if diff:
        details = ", ".join(f"{k}: {saved.get(k)!r} -> {ours[k]!r}" for k in diff)
        raise ConfigError(
            f"{run.path} holds a run with a different config ({details}); "
            "use another folder or overwrite=True (--overwrite)"
        )


def _check_supported(config: FinetuneConfig) -> None:
    if not config.dueling:
        raise ConfigError(
            "dueling: SGIModel's C51 head is always dueling (dueling=false unsupported)"
        )
    if config.n_step < 1:
        raise ConfigError(f"n_step: must be >= 1 (got {config.n_step})")
    if config.ssl != "none" and config.spr_steps < 1:
        raise ConfigError(f"spr_steps: ssl {config.ssl!r} needs K >= 1 (got {config.spr_steps})")
    if config.steps < 1 or config.batch_size < 1 or config.updates_per_step < 0:
        raise ConfigError("steps and batch_size must be >= 1, updates_per_step >= 0")
    if config.target_update_period < 1:
        raise ConfigError("target_update_period: must be >= 1")
    if config.eval_max_frames % 4:
        raise ConfigError(
            f"eval_max_frames: must be a multiple of 4 (got {config.eval_max_frames})"
        )


def _checkpoint(
    run: RunDir, agent: Agent, step: int, rng: np.random.Generator, transfer, model_args
):
    run.save_checkpoint(
        step,
        {
            "model": agent.model.state_dict(),
            "spr_target": agent.spr_target.state_dict(),
            "q_target": None if agent.q_target is None else agent.q_target.state_dict(),
            "optimizer": agent.optimizer.state_dict(),
            "replay": agent.replay.state_dict(),
            "rng": {
                "torch": torch.get_rng_state(),
                "generator": agent.generator.get_state(),
                "numpy": rng.bit_generator.state,
            },
            "updates": agent.updates,
            "config": to_dict(agent.config),
            "model_args": model_args,
            "transfer_loaded": list(transfer.loaded),
            "game": canonical_game(agent.config.game),
        },
        kind="finetune",
    )


def _restore(agent: Agent, ckpt: dict[str, Any], rng: np.random.Generator) -> None:
    agent.model.load_state_dict(ckpt["model"])
    agent.spr_target.load_state_dict(ckpt["spr_target"])
    if agent.q_target is not None and ckpt.get("q_target") is not None:
        agent.q_target.load_state_dict(ckpt["q_target"])
    agent.optimizer.load_state_dict(ckpt["optimizer"])
    agent.replay.load_state_dict(ckpt["replay"])
    torch.set_rng_state(ckpt["rng"]["torch"])
    if not restore_generator(agent.generator, ckpt["rng"]["generator"]):
        log.warning("resumed on another device type: the augmentation random stream is reseeded")
    rng.bit_generator.state = ckpt["rng"]["numpy"]
    agent.updates = int(ckpt["updates"])


class _Window:
    """Running sums of update stats between metrics rows (device tensors, synced at log time)."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.updates = 0
        self.steps = 0
        self.start = time.perf_counter()

    def add(self, stats: dict[str, torch.Tensor]) -> None:
        for k, v in stats.items():
            self.sums[k] = self.sums[k] + v if k in self.sums else v.clone()
        self.updates += 1

    def row(self) -> dict[str, float]:
        seconds = max(time.perf_counter() - self.start, 1e-9)
        out = {k: float(v) / self.updates for k, v in self.sums.items()}
        out["charts/sps"] = self.steps / seconds
        out["charts/ups"] = self.updates / seconds
        return out


def finetune(
    config: FinetuneConfig,
    out: str | Path,
    progress: bool = True,
    overwrite: bool = False,
    params: str | None = None,
    callback: Callable[[int, Agent], None] | None = None,
) -> FinetuneRun:
    """Finetune on one game for ``config.steps`` environment steps, then evaluate.

    Args:
        config: the run's config (``config.pretrained``: pretraining run folder or None).
        out: run folder; an unfinished run there is resumed, a finished one returned as is.
        progress: tqdm bar.
        overwrite: delete what the folder holds and start over.
        params: name of the params file the config came from (recorded in status.json, used by
            `sgi_lab.train.report` to find the paper's column).
        callback: called as ``callback(step, agent)`` after every environment step (and after
            that step's checkpoint); notebooks use it for live plots, tests to interrupt a run.

    Returns:
        The run folder, with ``.evaluation`` (eval.json) and ``.metrics()``.

    Raises:
        UnknownGameError: unknown game (lists the valid ones).
        ConfigError: unsupported settings, or the folder holds a run with another config.
        PretrainedMismatchError: the pretrained model does not fit (encoder or shapes).
        CheckpointError: a truncated or foreign checkpoint or pretrained model.
        FloatingPointError: the loss became NaN or infinite (status "failed").
    """
    game = canonical_game(config.game)
    _check_supported(config)
    run = FinetuneRun(out)
    if overwrite:
        _clear(run)
    elif run.finished:
        _check_same_config(run, config, run.config)
        log.info("%s: finished already, returning its results", run.path)
        return run
    handler = logging.FileHandler(run.path / "log.txt")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)
    step = 0
    threads = torch.get_num_threads()
    if config.threads > 0:
        torch.set_num_threads(config.threads)
    try:
        device = resolve_device(config.device)
        # On the CPU: load_state_dict copies onto the parameters' device; RNG states are CPU.
        ckpt = run.load_latest("finetune", map_location="cpu")
        if ckpt is not None:
            _check_same_config(run, config, ckpt.get("config"))
        save_config(config, run.path / "config.yaml")
        num_actions = game_actions(game)

        pretrained = None
        rng = np.random.default_rng(config.seed)
        if ckpt is not None:
            model_args = ckpt["model_args"]
            agent, transfer = make_agent(config, model_args, device, loaded=ckpt["transfer_loaded"])
            _restore(agent, ckpt, rng)
            step = int(ckpt["step"])
            log.info("resuming %s at step %d (the env starts a fresh episode)", run.path, step)
        else:
            if config.pretrained:
                pretrained = load_pretrained(config.pretrained)
                log.info(
                    "pretrained model: %s (step %d, game %s)",
                    pretrained.path,
                    pretrained.step,
                    pretrained.game,
                )
                if pretrained.game and canonical_game(pretrained.game) != game:
                    log.warning("pretrained on %s, finetuning on %s", pretrained.game, game)
            model_args = model_args_for(config, num_actions, pretrained)
            agent, transfer = make_agent(config, model_args, device, pretrained)
        if ckpt is None:
            groups = {g["name"]: g["lr"] for g in agent.optimizer.param_groups}
            info = {**transfer.to_json(), "lr_groups": groups, "scheme": config.scheme}
            if pretrained is not None:
                info.update(pretrained_step=pretrained.step, pretrained_game=pretrained.game)
            atomic_write_text(run.path / "transfer.json", json.dumps(info, indent=2))
            log.info(
                "transfer: %d tensors loaded, %d fresh, %d ignored; lr groups %s",
                len(transfer.loaded),
                len(transfer.fresh),
                len(transfer.ignored),
                groups,
            )
            if transfer.loaded:
                log.info("loaded: %s", ", ".join(transfer.loaded))
            log.info("fresh: %s", ", ".join(transfer.fresh))
        launch = {"params": params, "game": game, "seed": config.seed}
        if ckpt is None:
            launch["pretrained"] = config.pretrained
            launch["pretrain_params"] = pretrained.params if pretrained is not None else None
        run.set_status("running", step=step, message="", **launch)
        metrics = run.metrics_logger(resume_step=step if ckpt is not None else None)
        try:
            step = _train(
                run,
                agent,
                config,
                game,
                step,
                rng,
                metrics,
                progress,
                callback,
                transfer,
                model_args,
            )
        finally:
            metrics.close()

        payload = {
            "format": "sgi-lab",
            "kind": "finetuned_model",
            "step": step,
            "model": agent.model.state_dict(),
            "model_args": model_args,
            "config": to_dict(config),
            "game": game,
        }
        atomic_torch_save(payload, run.path / "model.pt")
        result = evaluate(
            agent.model,
            game,
            episodes=config.eval_episodes,
            eps=config.eval_eps,
            num_envs=config.eval_envs,
            seed=config.seed + 10_000,
            device=device,
            max_frames=config.eval_max_frames,
            progress=progress,
            amp=agent.amp and device.type == "cuda",  # a few envs at a time: fp32 on a CPU
        )
        result["step"] = step
        atomic_write_text(run.path / "eval.json", json.dumps(result, indent=2))
        log.info(
            "evaluation: %d episodes, mean %.2f (HNS %.3f)",
            result["episodes"],
            result["mean"],
            result["hns"],
        )
        run.set_status(
            "finished", step=step, eval_mean=result["mean"], eval_hns=result["hns"], message=""
        )
        return run
    except BaseException as exc:
        reason = (
            "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
        )
        run.set_status("failed", step=step, message=reason)
        log.error("%s failed: %s", run.path, reason)
        raise
    finally:
        torch.set_num_threads(threads)
        log.removeHandler(handler)
        handler.close()


def _train(
    run: RunDir,
    agent: Agent,
    config: FinetuneConfig,
    game: str,
    step: int,
    rng: np.random.Generator,
    metrics,
    progress: bool,
    callback,
    transfer: Transfer,
    model_args: dict[str, Any],
) -> int:
    """The environment loop from ``step`` to ``config.steps``; returns the final step."""
    # A resumed run cannot restore the emulator: new seed, fresh episode.
    env = make_env(game, seed=config.seed + step, train=True)
    obs, _ = env.reset()
    first = True
    ep_return = ep_clipped = 0.0
    ep_length = 0
    window = _Window()
    bar = tqdm(
        total=config.steps, initial=step, desc=f"finetune {game}", disable=not progress, unit="step"
    )
    postfix: dict[str, str] = {}
    try:
        while step < config.steps:
            row: dict[str, Any] = {}
            eps = epsilon_at(step, config)
            action = act(agent, obs, eps, rng)
            next_obs, reward, terminated, truncated, info = env.step(action)
            agent.replay.append(obs[-1], action, info["raw_reward"], info["terminal"], first)
            first = False
            ep_return += info["raw_reward"]
            ep_clipped += float(reward)
            ep_length += 1
            step += 1
            window.steps += 1
            if terminated or truncated:
                row.update(
                    {
                        "episode/return": ep_return,
                        "episode/clipped_return": ep_clipped,
                        "episode/length": ep_length,
                    }
                )
                obs, _ = env.reset()
                first = True
                ep_return = ep_clipped = 0.0
                ep_length = 0
            else:
                obs = next_obs

            if step >= config.learning_starts and agent.replay.tree.total > 0:
                beta = beta_at(step, config)
                for _ in range(config.updates_per_step):
                    batch, weights = agent.replay.sample(config.batch_size, beta)
                    window.add(train_step(agent, batch, weights))

            if step % config.log_every == 0 or step == config.steps:
                row.update(window.row())
                row["charts/epsilon"] = eps
                row["charts/beta"] = beta_at(step, config)
                row["charts/updates"] = agent.updates
                window = _Window()
            if row:
                metrics.log(step, **row)
            if step % config.checkpoint_every == 0 or step == config.steps:
                _checkpoint(run, agent, step, rng, transfer, model_args)
                run.set_status("running", step=step)
            bar.update(1)
            if "charts/sps" in row:
                postfix["sps"] = f"{row['charts/sps']:.1f}"
            if "episode/return" in row:
                postfix["return"] = f"{row['episode/return']:.0f}"
            if "charts/sps" in row or "episode/return" in row:
                bar.set_postfix(postfix, refresh=False)
            if callback is not None:
                callback(step, agent)
    finally:
        bar.close()
        env.close()
    return step
