"""The Rainbow + SPR agent and its update, batched over a population of independent agents.

A `Population` holds N agents (games x seeds) whose networks have one shape: each agent's
parameters, batch-norm statistics, noise samples, target networks and Adam moments are stacked
along a leading agent axis, and one update runs all of them at once (``torch.func.vmap`` over
``functional_call``; a population of one calls the same function without vmap). Agents stay
independent: every agent has its own replay, random stream (a `torch.Generator` per agent,
from which each update makes one draw at a layout fixed by the config, `sgi_lab.augment.draws`, so that
augmentation, noise and goals cost one kernel per agent), epsilon draws and gradient-norm
clipping; nothing in the update mixes agents, so the gradient of the summed losses is each
agent's own gradient.

Games with fewer actions than the widest in the population are padded: tensors with an action
dimension (the transition model's action planes, the Q and goal heads' advantage outputs, the
inverse model's outputs) get zero rows for the missing actions, and a per-agent action mask makes
the dueling mean skip them and gives them a distribution on the lowest atom, so they are never
chosen and never trained (`sgi_lab.nets.heads.dueling_combine`). An agent's checkpoints and
``model.pt`` hold its own, unpadded tensors, the same files a run of that game alone writes.

This module is the population's state: its parameters, buffers, noise, targets, optimizer state
and generators, how it is built, how the stacked tensors run as one computation
(`Population.batched`, `Population.call`) and each agent's own state dicts for checkpoints. What
an update does to that state is `sgi_lab.train.update` (one function per stage, in SB3's order),
and its steps on the state are `sgi_lab.train.population_steps` (the draws, clipping, the Adam
step, the targets' EMA). The Q target network is the online network with its own noise sample
(SPR's ``target_update_tau = 1``), or a separate EMA copy otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, vmap

from sgi_lab.augment.ops import shift_pad
from sgi_lab.config import FinetuneConfig, to_dict
from sgi_lab.nets import SGIModel
from sgi_lab.nets.noisy import NoisyLinear
from sgi_lab.runtime.device import prepare_device, use_bf16
from sgi_lab.runtime.graphs import GraphedCall
from sgi_lab.train.precision import update_precision
from sgi_lab.train.stacking import own_shapes, pad_to, stack_agents, tree_map, tree_stack, unpad_to
from sgi_lab.train.transfer import LR_GROUPS, lr_group, lr_scales

__all__ = [
    "POPULATION_KEYS",
    "Population",
    "check_compatible",
    "masked_mean",
    "use_amp",
]

MAX_ACTIONS = 18
"""The full Atari action set: the width at which every agent's noise is drawn."""

VMAP_ON_CPU = ("minatar", "minatar_l")
"""Encoders whose populations run under vmap on a CPU too (`Population.batching`)."""
POPULATION_KEYS = (
    "game",
    "seed",
    "pretrained",
    "scheme",
    "encoder_lr_scale",
    "pretrained_lr_scale",
    "lr_groups",
    "pretrained_values",
)
"""Config keys that may differ between the agents of one population; all others are shared.
The learning-rate keys only set each agent's rates (`Population.lr_factors`); a scheme that
freezes the encoder for some agents and trains it for others is refused (`_agent_groups`)."""


# -- loss weights and precision ------------------------------------------------------------


def use_amp(config: FinetuneConfig, device: torch.device) -> bool:
    """bf16 autocast: `sgi_lab.runtime.device.use_bf16` with the config's ``amp`` (CUDA) and
    ``cpu_amp`` (CPUs with native bf16)."""
    return use_bf16(device, config.amp, config.cpu_amp)


# -- the population ----------------------------------------------------------------------------


class _Apply(nn.Module):
    """``functional_call`` target: calls ``fn(model, *args)`` with the given tensors swapped in."""

    def __init__(self, model: SGIModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(self.model, *args)


@dataclass
class Population:
    """N finetuning agents as one batched computation; built by `Population.build`.

    Attributes:
        configs: per-agent configs (equal but for `POPULATION_KEYS`).
        model_args: per-agent SGIModel arguments (own action count; saved in model.pt).
        loaded: per agent, the names its pretrained model provided (none for a fresh agent).
        template: the functional skeleton (widest action set) on ``device``.
        online: name -> (N, ...) stacked parameters (leaves) and buffers of the online networks.
        spr_target: name -> (N, ...) the EMA target networks (SPR; goal RL for ssl 'all').
        q_target: separate Q target networks, or None when the online network is its own target.
        optimizer: Adam over the stacked parameters, one group per learning rate.
        lr_factors: name -> (N, 1, ...) each agent's learning rate over its group's, for the
            parameters whose rate differs between agents (a population of pretrained and
            fresh agents, or of other schemes); empty when every agent's rates agree.
        generators: per-agent torch random sources on ``device``.
        action_mask: (N, A) bool, the actions each agent's game has.
        device: where everything lives.
        amp: bf16 in the update (`sgi_lab.train.precision`: autocast, or casting under vmap).
        bf16_cast: under a vmap autocast does not reach, cast to bf16 (True), stay fp32 (False),
            or None: cast on CUDA with ``amp`` (`sgi_lab.train.precision.update_precision`).
        updates: gradient updates done (all agents move in lockstep;
            `sgi_lab.train.population_steps.count_update`).
        canonical_noise: noisy layer name -> (in, out) features at the full 18-action set: the
            sizes every agent's noise is drawn at (`sgi_lab.train.population_steps.draw`).
        host_checks: read values on the host inside the update (the NaN check, whether any
            agent's gradient is clipped): free on a CPU (the default there), a synchronisation
            elsewhere, and never inside a CUDA graph; `sgi_lab.runtime.graphs` turns them off
            to check the GPU's path on a CPU.
    """

    configs: list[FinetuneConfig]
    model_args: list[dict[str, Any]]
    loaded: tuple[tuple[str, ...], ...]
    template: SGIModel
    online: dict[str, torch.Tensor]
    spr_target: dict[str, torch.Tensor]
    q_target: dict[str, torch.Tensor] | None
    optimizer: torch.optim.Adam
    generators: list[torch.Generator]
    action_mask: torch.Tensor
    device: torch.device
    amp: bool = False
    bf16_cast: bool | None = None
    updates: int = 0
    host_checks: bool | None = None
    lr_factors: dict[str, torch.Tensor] = field(default_factory=dict)
    canonical_noise: dict[str, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.host_checks is None:
            self.host_checks = self.device.type == "cpu"

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        configs: Sequence[FinetuneConfig],
        models: Sequence[SGIModel],
        loaded: Sequence[str] | Sequence[Sequence[str]],
        device: torch.device | str = "cpu",
    ) -> Population:
        """Stack N initialized agents (own action counts) into one population on ``device``.

        Args:
            configs: per-agent configs; all keys but `POPULATION_KEYS` must agree.
            models: per-agent online networks, already initialized (fresh, pretrained or
                restored from a checkpoint), each with its game's action count.
            loaded: names of the tensors the pretrained models provided (learning-rate
                groups): one sequence for every agent, or one per agent, so that pretrained
                and fresh agents (or agents of different pretrained models) train side by
                side, each at its own learning rates (`lr_factors`).
            device: where the population trains.
        """
        configs, models = list(configs), list(models)
        if not configs or len(configs) != len(models):
            raise ValueError("a population needs one model per config, at least one")
        check_compatible(configs)
        _check_same_observations(configs, models)
        cfg, device = configs[0], torch.device(device)
        prepare_device(device)
        widest = max(m.num_actions for m in models)
        args = [_model_args(m) for m in models]
        _check_same_architecture(configs, args)
        template = SGIModel(**{**args[0], "num_actions": widest}).to(device)
        loaded = _per_agent(loaded, len(models))
        groups = _agent_groups(template, configs, loaded)
        online = _stacked_agents(template, models, cfg, groups, device)
        if cfg.channels_last is True:
            template.channels_last = template.encoder.channels_last = True
        mask = torch.zeros(len(models), widest, dtype=torch.bool, device=device)
        for i, m in enumerate(models):
            mask[i, : m.num_actions] = True
        spr_target = {k: v.detach().clone() for k, v in online.items()}
        separate_q = not (cfg.target_tau == 1.0 and cfg.target_update_period == 1)
        q_target = {k: v.detach().clone() for k, v in online.items()} if separate_q else None
        optimizer, lr_factors = _optimizer(online, configs, groups, device)
        generators = []
        for c in configs:
            g = torch.Generator(device=device)
            g.manual_seed(c.seed)
            generators.append(g)
        with torch.device("meta"):  # shapes only
            full = SGIModel(**{**args[0], "num_actions": max(MAX_ACTIONS, widest)})
        pop = cls(
            configs=configs,
            model_args=args,
            loaded=loaded,
            template=template,
            online=online,
            spr_target=spr_target,
            q_target=q_target,
            optimizer=optimizer,
            generators=generators,
            action_mask=mask,
            device=device,
            amp=use_amp(cfg, device),
            lr_factors=lr_factors,
            canonical_noise=_noise_shapes(full),
        )
        pop.train_mode()
        return pop

    @property
    def size(self) -> int:
        return len(self.configs)

    @property
    def pad(self) -> int:
        """The random shift's pad for the agents' observations (`sgi_lab.augment.ops.shift_pad`:
        4 for Atari's frames, 0 for MinAtar's grids, which are not shifted)."""
        return shift_pad(self.config.observation_spec)

    @property
    def config(self) -> FinetuneConfig:
        """The shared config (agent 0's; only `POPULATION_KEYS` differ between agents)."""
        return self.configs[0]

    def agent_lr_groups(self, i: int) -> dict[str, float]:
        """Agent ``i``'s learning rate of each group its parameters fall in (``transfer.json``)."""
        cfg, scales = self.configs[i], lr_scales(self.configs[i])
        used = {
            lr_group(name, frozenset(self.loaded[i]), cfg.scheme, cfg.lr_groups)
            for name, _ in self.template.named_parameters()
        }
        return {g: cfg.lr * scales[g] for g in LR_GROUPS if g in used}

    def trainable(self) -> list[torch.Tensor]:
        return [p for g in self.optimizer.param_groups for p in g["params"]]

    def train_mode(self) -> None:
        """Batch norm on batch statistics, except a frozen encoder (running statistics)."""
        self.template.train()
        if self.config.scheme == "frozen":
            self.template.encoder.eval()

    @property
    def batching(self) -> str:
        """How the agents' networks run together: ``vmap`` (one batched computation) or
        ``loop`` (agent after agent over the same stacked tensors; one Adam step, clipping and
        EMA for all). Config ``population_batching``; ``auto`` is vmap on a GPU, where it turns
        many small kernel launches into few, and on a CPU for MinAtar's small networks
        (`VMAP_ON_CPU`), whose updates are bound by per-operator overhead that vmap pays once
        for all agents: on a 2-core Intel Xeon, fp32, batch 32, SPR K = 5 (2026-11-26,
        benchmarks/README.md) the ``minatar`` update took 14.1 ms an agent under vmap against
        23.6 in a loop at 6 agents and 2 threads (11.5 against 45 at 64 agents; 21.7 against
        29.1 at 6 agents on one thread), ``minatar_l`` 58 against 69. For Atari's encoders it
        is a loop on a CPU, where their kernels are not launch bound: measured on an AMD EPYC
        (Zen 4, 2 threads, 4 agents) the vmap'd update ran at 0.78x (ResNet) and 0.90x
        (Nature) the speed of separate updates in fp32, and cannot use bf16 (CPU autocast stops
        at vmap), while the loop matched separate bf16 updates."""
        mode = getattr(self.config, "population_batching", "auto")
        if mode != "auto":
            return mode
        if self.size == 1:
            return "loop"
        if self.device.type != "cpu" or self.config.encoder in VMAP_ON_CPU:
            return "vmap"
        return "loop"

    @property
    def vmapped(self) -> bool:
        """The agents' networks run under vmap (`batched`)."""
        return self.size > 1 and self.batching == "vmap"

    @property
    def update_amp(self) -> bool:
        """The update runs in bf16, by autocast or by casting (`sgi_lab.train.precision`)."""
        return update_precision(self) != "fp32"

    def batched(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` over the agent axis: vmap, or a loop over the agents' slices (`batching`);
        a population of one calls it on agent 0's slices (the CPU kernels that cannot run
        under vmap stay in use)."""
        if self.size > 1 and self.batching == "vmap":
            return vmap(fn)

        def looped(*args: Any) -> Any:
            outs = [fn(*tree_map(lambda t, i=i: t[i], args)) for i in range(self.size)]
            return tree_stack(outs)

        return looped

    def call(self, state: dict[str, torch.Tensor], fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(model, *args)`` with one agent's tensors (inside `batched`)."""
        return functional_call(
            self._apply, {f"model.{k}": v for k, v in state.items()}, (fn, *args), strict=False
        )

    @property
    def _apply(self) -> _Apply:
        wrapper = self.__dict__.get("_apply_module")
        if wrapper is None:
            wrapper = self.__dict__["_apply_module"] = _Apply(self.template)
        return wrapper

    @property
    def uses_forward_graphs(self) -> bool:
        """Whether acting replays a captured CUDA graph (CUDA and ``cuda_graphs``;
        `sgi_lab.train.acting.forward_graph`)."""
        return GraphedCall.available(self.device) and getattr(self.config, "cuda_graphs", False)

    @property
    def uses_cuda_graph(self) -> bool:
        """Whether `sgi_lab.train.update.learn` replays a captured CUDA graph (CUDA,
        ``cuda_graphs``, no separate Q target network, whose periodic copy is decided in
        Python)."""
        return (
            GraphedCall.available(self.device)
            and getattr(self.config, "cuda_graphs", False)
            and self.q_target is None
        )

    # -- the targets ---------------------------------------------------------------------------
    def start_spr_target(self, i: int, pretrained_target: dict[str, torch.Tensor]) -> None:
        """Start agent ``i``'s SPR target from a pretraining run's EMA target: every tensor the
        target follows (`ema_names`) that the pretrained target has; the rest stays as built."""
        state = self.agent_state(i, "spr_target")
        for name in self.ema_names():
            if name in pretrained_target and pretrained_target[name].shape == state[name].shape:
                state[name] = pretrained_target[name]
        self.load_agent_state(i, "spr_target", state)

    def ema_names(self) -> list[str]:
        """Float tensors the SPR target follows (its EMA:
        `sgi_lab.train.population_steps.update_spr_target`): encoder (parameters and batch-norm
        statistics) and projection means; for ssl 'all' also the projection sigmas and the goal
        head (the goal-RL target network)."""
        names = self.__dict__.get("_ema")
        if names is None:
            prefixes = ["encoder."]
            if self.config.uses_goal_rl:
                prefixes += ["head.advantage_hidden.", "head.value_hidden.", "film.", "goal_head."]
            else:  # project() never uses the sigmas
                prefixes += [
                    f"head.{s}_hidden.{p}_mu"
                    for s in ("advantage", "value")
                    for p in ("weight", "bias")
                ]
            names = [
                k
                for k, v in self.online.items()
                if k.startswith(tuple(prefixes)) and v.is_floating_point() and ".eps_" not in k
            ]
            self.__dict__["_ema"] = names
        return names

    # -- one agent's state ---------------------------------------------------------------------
    def _persistent(self) -> list[str]:
        return list(self.template.state_dict())

    def agent_state(self, i: int, which: str = "online") -> dict[str, torch.Tensor]:
        """Agent ``i``'s state dict in its own shapes (what ``SGIModel(**model_args[i])``
        loads), on the CPU; ``which``: online, spr_target or q_target."""
        source = {"online": self.online, "spr_target": self.spr_target, "q_target": self.q_target}[
            which
        ]
        own = own_shapes(self.model_args[i])
        return {k: unpad_to(source[k][i].detach(), own[k]).cpu() for k in self._persistent()}

    def agent_model(self, i: int) -> SGIModel:
        """Agent ``i``'s online network as a standalone SGIModel on the population's device."""
        model = SGIModel(**self.model_args[i])
        model.load_state_dict(self.agent_state(i))
        return model.to(self.device)

    def agent_optimizer_state(self, i: int) -> dict[str, Any]:
        """Agent ``i``'s Adam state in the layout of a single agent's optimizer state dict."""
        own = own_shapes(self.model_args[i])
        names = self._trained_names()
        full = self.optimizer.state_dict()
        state = {}
        for idx, st in full["state"].items():
            shape = own[names[idx]]
            state[idx] = {
                k: (unpad_to(v[i], shape).cpu() if v.dim() > 0 else v.clone().cpu())
                for k, v in st.items()
            }
        return {"state": state, "param_groups": full["param_groups"]}

    def load_agent_optimizer_state(self, i: int, saved: dict[str, Any]) -> None:
        """Put a single agent's Adam state (`agent_optimizer_state`) into slot ``i``."""
        params = self.trainable()
        groups = [g["name"] for g in self.optimizer.param_groups]
        saved_groups = [g.get("name") for g in saved["param_groups"]]
        if groups != saved_groups:
            raise ValueError(f"optimizer groups differ: saved {saved_groups}, built {groups}")
        for idx, st in saved["state"].items():
            p = params[int(idx)]
            mine = self.optimizer.state[p]
            for k, v in st.items():
                v = v.to(self.device)
                if v.dim() == 0:
                    if k not in mine:
                        mine[k] = v.clone()
                    else:
                        mine[k].copy_(v)
                    continue
                if k not in mine:
                    mine[k] = torch.zeros_like(p, memory_format=torch.preserve_format)
                mine[k][i].copy_(pad_to(v, p.shape[1:]))

    def _trained_names(self) -> list[str]:
        by_id = {id(v): k for k, v in self.online.items()}
        return [by_id[id(p)] for p in self.trainable()]

    def load_agent_state(self, i: int, which: str, state: dict[str, torch.Tensor]) -> None:
        """Put agent ``i``'s own-shape state dict (online / spr_target / q_target) into its slot."""
        target = {"online": self.online, "spr_target": self.spr_target, "q_target": self.q_target}[
            which
        ]
        with torch.no_grad():
            for k in self._persistent():
                target[k][i].copy_(pad_to(state[k].to(self.device), target[k].shape[1:]))


def _per_agent(
    loaded: Sequence[str] | Sequence[Sequence[str]], n: int
) -> tuple[tuple[str, ...], ...]:
    """``loaded`` as one tuple of names per agent (a single sequence of names is every agent's)."""
    loaded = list(loaded)
    if all(isinstance(x, str) for x in loaded):
        return (tuple(loaded),) * n
    if len(loaded) != n or any(isinstance(x, str) for x in loaded):
        raise ValueError(
            f"loaded: one sequence of tensor names for every agent, or one per agent ({n}); "
            f"got {len(loaded)} entries"
        )
    return tuple(tuple(x) for x in loaded)


def _agent_groups(
    template: SGIModel, configs: Sequence[FinetuneConfig], loaded: tuple[tuple[str, ...], ...]
) -> dict[str, list[str | None]]:
    """name -> each agent's learning-rate group of that parameter (`lr_group`; None: not
    trained).

    Raises:
        ValueError: a parameter trained for some agents and not for others (a population
            moves its tensors together: its agents train the same parameters).
    """
    groups = {
        name: [
            lr_group(name, frozenset(own), cfg.scheme, cfg.lr_groups)
            for cfg, own in zip(configs, loaded, strict=True)
        ]
        for name, _ in template.named_parameters()
    }
    for name, per_agent in groups.items():
        if None in per_agent and any(g is not None for g in per_agent):
            raise ValueError(
                f"{name} is trained for some agents of the population and frozen for others "
                "(scheme 'frozen' beside another); train them as separate populations"
            )
    return groups


def _stacked_agents(
    template: SGIModel,
    models: Sequence[SGIModel],
    cfg: FinetuneConfig,
    groups: dict[str, list[str | None]],
    device: torch.device,
) -> dict[str, torch.Tensor]:
    """Every agent's tensors stacked along a leading agent axis, padded to the template's
    (widest) shapes: the state dict (parameters trained under ``scheme`` require a gradient)
    and the noisy layers' noise samples (non-persistent buffers: state_dict() leaves them out)."""
    shapes = {k: v.shape for k, v in template.state_dict().items()}
    online: dict[str, torch.Tensor] = {}
    for name, ref in template.state_dict(keep_vars=True).items():
        stacked = stack_agents(
            [pad_to(m.state_dict()[name].detach().to(device), shapes[name]) for m in models],
            channels_last=cfg.channels_last is True,
        )
        if isinstance(ref, nn.Parameter):
            stacked.requires_grad_(groups[name][0] is not None)
        online[name] = stacked
    for name, layer in template.named_modules():
        if isinstance(layer, NoisyLinear):
            for part in ("eps_in", "eps_out"):
                full = getattr(layer, part).shape
                online[f"{name}.{part}"] = torch.stack(
                    [pad_to(getattr(m.get_submodule(name), part).to(device), full) for m in models]
                )
    return online


def _optimizer(
    online: dict[str, torch.Tensor],
    configs: Sequence[FinetuneConfig],
    groups: dict[str, list[str | None]],
    device: torch.device,
) -> tuple[torch.optim.Adam, dict[str, torch.Tensor]]:
    """One Adam over the stacked parameters, a parameter group per learning-rate group
    (`lr_group`, `lr_scales`: each agent's finetuning scheme), and the `Population.lr_factors`
    of the parameters whose rate differs between agents: such a parameter joins the group of
    its fastest agent, the group's rate is the highest any agent has in it, and each agent's
    factor is its own rate over the group's (at most 1: a step is scaled down, never up, so its
    rounding is not magnified)."""
    scales = [lr_scales(c) for c in configs]
    lr = configs[0].lr  # shared (check_compatible)
    params: dict[str, list[str]] = {g: [] for g in LR_GROUPS}
    rates: dict[str, list[float]] = {}
    for name, per_agent in groups.items():
        if per_agent[0] is None:
            continue
        rates[name] = [lr * s[g] for s, g in zip(scales, per_agent, strict=True)]
        top = max(range(len(per_agent)), key=rates[name].__getitem__)
        params[per_agent[top]].append(name)
    group_lr = {g: max(max(rates[n]) for n in names) for g, names in params.items() if names}
    factors: dict[str, torch.Tensor] = {}
    for g, names in params.items():
        for name in names:
            if any(r != group_lr[g] for r in rates[name]):
                shape = (len(configs),) + (1,) * (online[name].dim() - 1)
                ratio = [r / group_lr[g] for r in rates[name]]
                factors[name] = torch.tensor(ratio, device=device).view(shape)
    param_groups = [
        {"name": g, "params": [online[n] for n in names], "lr": group_lr[g]}
        for g, names in params.items()
        if names
    ]
    # fused: one pass over each tensor instead of ~8 (6x faster on CPU for 8M parameters).
    # capturable: the step counter lives on the device, so a CUDA graph can replay it.
    capturable = device.type == "cuda" and getattr(configs[0], "cuda_graphs", False)
    optimizer = torch.optim.Adam(
        param_groups, lr=lr, eps=configs[0].adam_eps, fused=True, capturable=capturable
    )
    return optimizer, factors


def check_compatible(configs: Sequence[FinetuneConfig]) -> None:
    """Agents of one population share every config key but `POPULATION_KEYS`.

    Raises:
        ValueError: naming the keys that differ.
    """

    first = to_dict(configs[0])
    for c in configs[1:]:
        other = to_dict(c)
        diff = sorted(k for k in first if k not in POPULATION_KEYS and first[k] != other[k])
        if diff:
            raise ValueError(
                "agents of one population must share their config except "
                f"{', '.join(POPULATION_KEYS)}; these differ: {', '.join(diff)}"
            )


def _check_same_observations(configs: Sequence[FinetuneConfig], models: Sequence[SGIModel]) -> None:
    """One population stacks its agents' tensors: every agent reads observations of one shape
    (input channels and size; MinAtar's games differ in channels)."""
    shapes = {
        c.game: (m.init_args["in_channels"], m.init_args["image_size"])
        for c, m in zip(configs, models, strict=True)
    }
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{g}: {ch} channels of {s}x{s}" for g, (ch, s) in shapes.items())
        raise ValueError(
            f"a population's agents read one observation shape, these differ ({listed}); "
            "train them as separate populations"
        )


def _check_same_architecture(
    configs: Sequence[FinetuneConfig], args: Sequence[dict[str, Any]]
) -> None:
    """One population stacks its agents' tensors: every agent's network has the same tensors
    but for its action count (a pretrained model decides its agent's architecture). Compared
    on the meta device at one action count: arguments that build nothing (goal RL's FiLM
    without a goal head) do not count."""
    widest = max(a["num_actions"] for a in args)
    with torch.device("meta"):  # shapes only
        shapes = [
            {
                k: tuple(v.shape)
                for k, v in SGIModel(**{**a, "num_actions": widest}).state_dict().items()
            }
            for a in args
        ]
    for c, a, own in zip(configs[1:], args[1:], shapes[1:]):
        diff = sorted(k for k in {*shapes[0], *own} if shapes[0].get(k) != own.get(k))
        if diff:
            named = sorted(
                k for k in {*args[0], *a} - {"num_actions"} if args[0].get(k) != a.get(k)
            )
            shown = ", ".join(f"{k}: {args[0].get(k)!r} vs {a.get(k)!r}" for k in named)
            raise ValueError(
                f"a population's agents share one architecture; {configs[0].game} (seed "
                f"{configs[0].seed}) and {c.game} (seed {c.seed}) differ in {shown or 'layers'} "
                f"({len(diff)} tensors, e.g. {diff[0]}: {shapes[0].get(diff[0])} vs "
                f"{own.get(diff[0])}); train them as separate populations"
            )


def _model_args(model: SGIModel) -> dict[str, Any]:
    args = getattr(model, "init_args", None)
    if args is None:
        raise ValueError("build the agents' models with sgi_lab.nets.SGIModel (init_args missing)")
    return dict(args)


def _noise_shapes(model: SGIModel) -> dict[str, tuple[int, int]]:
    return {
        name: (m.in_features, m.out_features)
        for name, m in model.named_modules()
        if isinstance(m, NoisyLinear)
    }


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the last axis of (B, A) values, counting only the game's actions."""
    return (values * mask).sum(-1) / mask.sum()
