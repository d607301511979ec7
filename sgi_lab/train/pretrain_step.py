"""One pretraining step: SPR + goal-conditioned RL + inverse dynamics (or the ATC and BC
baselines) on one batch, then Adam and the EMA target.

In order: batch -> augmentation (`sgi_lab.augment.frames`, the path finetuning uses) -> target
passes under ``no_grad`` -> online passes -> the SGI loss composition shared with finetuning
(`sgi_lab.train.sgi_loss`) -> Adam step with the clipping rule of `sgi_lab.runtime.device` -> EMA
update of the target network -> logs. The run around it (resume, metrics, checkpoints) is
`sgi_lab.train.pretrain`.

The single EMA target serves both SPR (target encoder + projection) and goal RL (target
goal-conditioned head), as both use tau = 0.99 (paper App. C).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from sgi_lab.augment.frames import prepared_frames
from sgi_lab.augment.ops import PAD, shift_pad
from sgi_lab.config import PretrainConfig
from sgi_lab.data import SequenceBatch, SequenceSampler, TransitionStore
from sgi_lab.envs.spec import ATARI_SPEC, ObservationSpec
from sgi_lab.nets import SGIModel, ema_update, make_target
from sgi_lab.nets.model import parameter_group
from sgi_lab.objectives import atc_accuracy, atc_loss, sample_goals
from sgi_lab.objectives.goal_rl import goal_n_step_returns
from sgi_lab.runtime.cpu_settings import time_step
from sgi_lab.runtime.device import autocast, clip_gradients, prepare_device
from sgi_lab.runtime.graphs import GraphedCall
from sgi_lab.train.sgi_loss import (
    SGITargets,
    pretraining_settings,
    sgi_loss_terms,
    weighted_sum,
)
from sgi_lab.train.transfer import observation_args

__all__ = [
    "GraphedStep",
    "PretrainBatch",
    "PretrainState",
    "build_state",
    "device_batch",
    "loss_function",
    "make_sampler",
    "measure_step",
    "model_args",
    "representation_similarity",
    "train_step",
]


COMPILE_BACKEND = "inductor"
"""``torch.compile``'s backend for ``compile: true`` (tests trace with "aot_eager": no codegen)."""


class PretrainState(NamedTuple):
    model: SGIModel
    target: SGIModel
    optimizer: torch.optim.Optimizer
    generator: torch.Generator
    # The random shift's pad for the run's observations (`sgi_lab.augment.ops.shift_pad`).
    pad: int = PAD


LossFunction = Callable[
    [PretrainConfig, PretrainState, "PretrainBatch"], tuple[torch.Tensor, dict[str, torch.Tensor]]
]
"""A pretraining loss: (config, state, batch) -> (the scalar to minimise, the values to log)."""


def model_args(
    config: PretrainConfig, num_actions: int, spec: ObservationSpec = ATARI_SPEC
) -> dict[str, Any]:
    """SGIModel keyword arguments for a pretraining config (recorded in every checkpoint): a
    head for each term the config learns, sized for observations of ``spec`` (the store's)."""
    terms = pretraining_settings(config).terms
    return {
        "encoder": config.encoder,
        "num_actions": int(num_actions),
        "noisy": False,  # the paper pretrains without noisy-net noise
        "rl_head": "bc" in terms,
        "goal_head": "goal_rl" in terms,
        "inverse_model": "inverse" in terms,
        "atc_head": config.uses_atc,
        "goal_film": config.goal_film,
        **observation_args(spec, config.hidden_size),
    }


def build_state(
    config: PretrainConfig,
    num_actions: int,
    device: torch.device,
    spec: ObservationSpec = ATARI_SPEC,
    **sizes: Any,
) -> PretrainState:
    """Model, EMA target, Adam and generator of a new run on observations of ``spec`` (the
    store's); ``sizes`` override SGIModel's size arguments (``image_size``, ``hidden_size``,
    ``width_scale``: the narrow networks of the reference fixtures)."""
    prepare_device(device)  # CPU: freed heap is reused instead of page-faulted back
    torch.manual_seed(config.seed)
    channels_last = config.channels_last
    args = {**model_args(config, num_actions, spec), **sizes}
    model = SGIModel(**args, channels_last=channels_last).to(device)
    target = make_target(model)
    # One fused kernel over all parameters instead of a loop of ~10 ops per tensor: 2.5x faster
    # on a 2-core CPU (22 ms vs 55 ms for the ResNet model's 22M parameters); same update.
    fused = device.type in ("cpu", "cuda")
    # capturable: Adam's step counter on the device, so a CUDA graph can replay the step.
    capturable = device.type == "cuda" and getattr(config, "cuda_graphs", False)
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=config.lr,
        eps=config.adam_eps,
        fused=fused or None,
        capturable=capturable,
    )
    generator = torch.Generator(device=device)
    generator.manual_seed(config.seed)
    return PretrainState(model, target, optimizer, generator, shift_pad(spec))


def make_sampler(config: PretrainConfig, store: TransitionStore) -> SequenceSampler:
    """Batches for the configured objectives (ATC keeps its own 32 x (8 + delta) layout)."""
    if config.uses_atc:
        return SequenceSampler(
            store,
            batch_size=config.atc_sequences,
            K=config.atc_seq_len + config.atc_delta - 1,
            n_step=0,
            goal_window=0,
            seed=config.seed,
            prefetch=config.prefetch,
        )
    return SequenceSampler(
        store,
        batch_size=config.batch_size,
        K=config.spr_steps,
        n_step=0,  # reward-free: goal RL's returns come from synthetic rewards
        goal_window=config.goal_window if config.uses_goal_rl else 0,
        goal_offsets="clip" if config.goal_offsets == "reference" else "uniform",
        seed=config.seed,
        prefetch=config.prefetch,
    )


class PretrainBatch(NamedTuple):
    """The fields of a `sgi_lab.data.SequenceBatch` that the pretraining objectives read, as
    tensors on the training device (frames still uint8: augmentation happens in the step).

    Attributes:
        obs: (B, K+1, 4, 84, 84) frame stacks of s_t..s_{t+K}.
        actions: (B, K+1) int64 actions a_t..a_{t+K}.
        valid: (B, K+1) bool, False past an episode's end.
        goal_obs: (B, 4, 84, 84) frame stacks of future states, when goal RL is on.
    """

    obs: torch.Tensor
    actions: torch.Tensor
    valid: torch.Tensor
    goal_obs: torch.Tensor | None = None


def device_batch(batch: SequenceBatch, device: torch.device) -> PretrainBatch:
    """A sampler's batch on ``device`` (pinned and copied without blocking on CUDA)."""
    pin = device.type == "cuda"

    def move(x: np.ndarray | None) -> torch.Tensor | None:
        if x is None:
            return None
        t = torch.from_numpy(np.ascontiguousarray(x))
        return t.pin_memory().to(device, non_blocking=True) if pin else t

    return PretrainBatch(
        move(batch.obs), move(batch.actions), move(batch.valid), move(batch.goal_obs)
    )


@contextlib.contextmanager
def target_passes(config: PretrainConfig, target: SGIModel) -> Iterator[None]:
    """Gradient-free target/goal passes; in eval mode when ``target_batch_norm='running'``."""
    running = config.target_batch_norm == "running" and target.training
    if running:
        target.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        if running:
            target.train()


@torch.no_grad()
def representation_similarity(y: torch.Tensor) -> torch.Tensor:
    """Mean pairwise cosine similarity of projected latents (paper Fig. 4), (B, P) -> scalar."""
    b = y.shape[0]
    if b < 2:
        return torch.zeros((), device=y.device)
    with torch.autocast(y.device.type, enabled=False):  # fp32: bf16 would round 0.998 to 1
        y = F.normalize(y.detach().float(), dim=-1, eps=1e-6)
        sim = y @ y.T
    return (sim.sum() - sim.diagonal().sum()) / (b * (b - 1))


LOG_NAMES = {
    "spr": "losses/spr",
    "goal_rl": "losses/goal",
    "inverse": "losses/inverse",
    "bc": "losses/bc",
}
"""metrics.jsonl keys of the per-objective losses of `sgi_lab.train.sgi_loss.sgi_loss_terms`."""


def sgi_losses(
    config: PretrainConfig, state: PretrainState, batch: PretrainBatch
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Weighted S/G/I/BC loss of one batch (`sgi_lab.train.sgi_loss`) and the values to log.

    Args:
        config: the pretraining config (weights, K, goal settings).
        state: model, target, optimizer, generator.
        batch: the sequences (and goal observations when goal RL is on).

    Returns:
        the scalar loss to minimise, and a dict of detached scalars to log.
    """
    model, target, gen = state.model, state.target, state.generator
    settings = pretraining_settings(config)
    obs = prepared_frames(batch.obs, gen, config.augment, model.channels_last, pad=state.pad)
    actions, valid = batch.actions, batch.valid
    need_projections = settings.uses_transition_model
    goal_rl = "goal_rl" in settings.terms

    # Targets under no_grad: target latents of s_t..s_{t+K}, and p_m(z~_{t+1..t+K}) (SPR and
    # inverse dynamics never use p_m(z~_t); contiguous: a strided 3-D input would send the
    # linear layers to a batched matmul that copies their weights per batch element).
    with target_passes(config, target):
        z_target = target.encode(obs, True) if need_projections or goal_rl else None
        y_target = target.project(z_target[:, 1:].contiguous()) if need_projections else None
    z0 = model.encode(obs[:, 0], prepared=True)
    y0 = model.project(z0)
    logs: dict[str, torch.Tensor] = {"charts/cosine_similarity": representation_similarity(y0)}
    targets = SGITargets(y=y_target)
    if goal_rl:
        targets, rewards = goal_targets(
            config, state, obs, batch.goal_obs, valid, z_target, y_target
        )
        logs["charts/goal_reward_mean"] = rewards[:, 0].mean()

    losses, charts = sgi_loss_terms(model, z0, actions, valid, targets, settings, y0=y0)
    total = weighted_sum(losses, settings).mean()
    logs.update({LOG_NAMES[k]: v.mean() for k, v in losses.items()})
    logs.update({k: v.mean() for k, v in charts.items()})
    logs["losses/total"] = total
    return total, logs


def goal_targets(
    config: PretrainConfig,
    state: PretrainState,
    obs: torch.Tensor,
    goal_obs: torch.Tensor,
    valid: torch.Tensor,
    z_target: torch.Tensor,
    y_target: torch.Tensor | None,
) -> tuple[SGITargets, torch.Tensor]:
    """Goal RL's targets under no_grad: noisy hindsight goals from the (uint8) goal observations
    (``obs`` is the sequence already prepared for the encoders), the
    target's goal-conditioned distribution at s_{t+n} and, with double Q, the online one that
    picks its action; and the synthetic rewards (B, n), for logging."""
    model, target, gen = state.model, state.target, state.generator
    goal_obs = prepared_frames(goal_obs, gen, config.augment, model.channels_last, pad=state.pad)
    with target_passes(config, target):
        goals = sample_goals(
            target.encode(goal_obs, prepared=True),
            gen,
            config.goal_alpha_max,
            config.goal_swap_prob,
            noise_scale="unit" if config.goal_noise == "reference" else "latent_norm",
        )
        # The bootstrap state's latent, encoded on its own: with batch norm its statistics
        # are those of the B bootstrap states, as in the reference (whose target network
        # encodes them in a pass of their own), not those of the whole sequence batch.
        z_next = (
            target.encode(obs[:, config.n_step], True)
            if model.encoder_has_batch_norm
            else z_target[:, config.n_step]
        )
        goal_next = F.softmax(target.goal_q_logits(z_next, goals), dim=-1)
        latents = z_target[:, : config.n_step + 1].flatten(2)
        _, _, rewards = goal_n_step_returns(
            latents,
            goals,
            valid[:, : config.n_step + 1],
            config.gamma,
            config.goal_reward_scale,
            config.goal_distance_scale,
        )
    selection = film = None
    if config.goal_double_q:  # the online network picks the bootstrap action
        # The online FiLM parameters of the goals, with gradient: the selection reads them
        # detached and the loss reuses them (one FiLM pass of these goals, not two).
        film = model.film(goals)
        with torch.no_grad():
            z_picker = model.encode(obs[:, config.n_step], prepared=True)
            picked = model.goal_q_logits(z_picker, goals, film=tuple(f.detach() for f in film))
            selection = F.softmax(picked, -1)
    targets = SGITargets(
        y=y_target,
        z=latents,
        goals=goals,
        goal_next=goal_next,
        goal_selection=selection,
        goal_film=film,
    )
    return targets, rewards


def atc_losses(
    config: PretrainConfig, state: PretrainState, batch: PretrainBatch
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """ATC on ``atc_sequences`` x ``atc_seq_len`` anchors, positives ``atc_delta`` steps later."""
    model, target, gen = state.model, state.target, state.generator
    L, d = config.atc_seq_len, config.atc_delta
    obs = prepared_frames(batch.obs, gen, config.augment, model.channels_last, pad=state.pad)
    anchors = obs[:, :L].flatten(0, 1)
    with target_passes(config, target):
        positives = target.project(target.encode(obs[:, d : d + L].flatten(0, 1), True))
    y = model.project(model.encode(anchors, prepared=True))
    predictions = model.atc_predict(y)
    valid = batch.valid[:, d : d + L].flatten()
    loss = atc_loss(predictions, positives, valid).mean()
    logs = {
        "losses/atc": loss,
        # A masked mean, not [valid]: boolean indexing would read the mask on the host.
        "charts/atc_accuracy": (atc_accuracy(predictions, positives) * valid).sum() / valid.sum(),
        "charts/cosine_similarity": representation_similarity(y),
        "losses/total": config.atc_weight * loss,
    }
    return config.atc_weight * loss, logs


def clip_groups(model: SGIModel, groups: str) -> list[list[torch.Tensor]]:
    """The parameter lists whose gradient norms are clipped each on its own: all together, or
    as the reference's ``optimize_agent`` (``split_stem_model_params``): encoder and every
    head (its ``conv`` and ``head``: Q head, projection, FiLM generator, goal head), and the
    transition model (its ``dynamics_model``); the predictor, inverse model and ATC head are
    not clipped there."""
    if groups == "all":
        return [list(model.parameters())]
    stem, transition = [], []
    for name, p in model.named_parameters():
        part = parameter_group(name)
        if part in ("encoder", "projection", "q_output", "goal"):
            stem.append(p)
        elif part == "transition":
            transition.append(p)
    return [stem, transition]


def loss_function(config: PretrainConfig) -> LossFunction:
    """The losses a config learns (`sgi_losses` or `atc_losses`), compiled by ``torch.compile``
    (inductor, static shapes) when ``config.compile``: the same arithmetic, fused; the first
    step pays the compile (~40 s for MinAtar's SGI step on a 2-core Xeon; cached on disk)."""
    losses = _eager_losses(config)
    if config.compile:
        return torch.compile(losses, dynamic=False, backend=COMPILE_BACKEND)
    return losses


def _eager_losses(config: PretrainConfig) -> LossFunction:
    return atc_losses if config.uses_atc else sgi_losses


def train_step(
    config: PretrainConfig,
    state: PretrainState,
    batch: PretrainBatch,
    host_checks: bool | None = None,
    losses: LossFunction | None = None,
) -> dict[str, torch.Tensor]:
    """One gradient step: losses, Adam, EMA. Raises FloatingPointError on a NaN/Inf loss (on a
    CPU at once; on a GPU, where reading the loss would stall the launch queue every step, the
    training loop checks when it logs). ``host_checks`` (default: on a CPU) reads values on
    the host; off, the step is what a CUDA graph captures (`sgi_lab.runtime.graphs`).
    ``losses`` (default: the config's, eager) computes the loss (`loss_function`)."""
    if host_checks is None:
        host_checks = batch.obs.device.type == "cpu"
    with autocast(batch.obs.device, cuda=config.amp, cpu=config.cpu_amp):
        total, logs = (losses or _eager_losses(config))(config, state, batch)
    if host_checks and not torch.isfinite(total):
        bad = {k: float(v.detach()) for k, v in logs.items() if not torch.isfinite(v)}
        raise FloatingPointError(f"non-finite pretraining loss: {bad}")
    state.optimizer.zero_grad(set_to_none=True)
    total.backward()
    if config.grad_clip > 0:
        groups = clip_groups(state.model, config.grad_clip_groups)
        norms = [clip_gradients(g, config.grad_clip, host_checks) for g in groups]
        logs["grad_norm"] = norms[0] if len(norms) == 1 else torch.stack(norms).norm()
    state.optimizer.step()
    ema_update(state.target, state.model, config.ema_tau)
    return logs


class GraphedStep:
    """`train_step` replayed from a CUDA graph (`sgi_lab.runtime.graphs.GraphedCall`): three eager
    steps, then the capture with the augmentation generator registered, and from then on each
    call copies the batch into the graph's static inputs and replays it: no kernel is launched
    from Python. The returned logs are copies (a replay overwrites the graph's outputs)."""

    WARMUP = 3

    def __init__(self, config: PretrainConfig, state: PretrainState) -> None:
        self.config, self.state = config, state
        self.call = GraphedCall(
            lambda batch: train_step(config, state, batch),
            warmup=self.WARMUP,
            generators=[state.generator],
            before_capture=lambda: state.optimizer.zero_grad(set_to_none=True),
        )

    @staticmethod
    def usable(config: PretrainConfig, device: torch.device) -> bool:
        return GraphedCall.available(device) and config.cuda_graphs

    def __call__(self, batch: PretrainBatch) -> dict[str, torch.Tensor]:
        logs = self.call(batch)
        return {k: v.clone() if torch.is_tensor(v) else v for k, v in logs.items()}


def measure_step(
    config: PretrainConfig,
    store: TransitionStore,
    device: torch.device,
    bf16: bool,
    channels_last: bool,
) -> float:
    """Seconds per pretraining step under the given CPU settings, on a throwaway state and one
    real batch (the run's own random streams are left as they were)."""
    config = dataclasses.replace(config, cpu_amp=bf16, channels_last=channels_last, prefetch=0)
    with torch.random.fork_rng():
        state = build_state(config, store.num_actions, device, store.observation_spec)
        state.model.train()
        state.target.train()
        sampler = make_sampler(config, store)
        try:
            batch = device_batch(sampler.sample(), device)
        finally:
            sampler.close()
        return time_step(lambda: train_step(config, state, batch), warmup=2, budget_s=1.0)
