"""Step 2 of the reference fixtures: the authors' code on sgi-lab's inputs (the reference venv).

Builds the reference's agent, model and algorithm (``mila-iqia/SGI``'s ``SPRAgent``,
``SPRCatDqnModel``, ``SPRCategoricalDQN`` over ``astooke/rlpyt``) with the settings its scripts
use, copies the weights of ``<case>.inputs.npz`` into it through the name mapping below (every
reference tensor is either mapped or listed in ``UNMAPPED`` with the reason), feeds it the same
batch, replaces each of its random draws by the pre-drawn tensor of the inputs, runs ONE
``algo.optimize_agent`` and writes every loss term, the gradient of every mapped parameter (after
clipping, before the step), the parameters after the Adam step and the target networks after
their updates to ``<case>.reference.npz``, in sgi-lab's names.

Nothing of the authors' code is copied: it is imported from a checkout (``--sgi``, ``--rlpyt``)
and only its random draws are substituted, through the small context managers below.

Run from the repository root with the reference's venv (see README.md):
``/work/ref/venv/bin/python benchmarks/reference/run_reference.py --sgi /work/ref/SGI
--rlpyt /work/ref/rlpyt``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from npz_pack import packed, unpacked

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parents[1] / "tests" / "fixtures" / "reference"

# The updated parameters are compared at a fixed sample of entries per tensor (every entry of
# small tensors): with the full gradient of every tensor already in the fixture, the sample
# pins each parameter group's learning rate, Adam's epsilon and the clipping, in a few kB.
SAMPLE = 64


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sgi", type=Path, required=True, help="checkout of mila-iqia/SGI")
    p.add_argument("--rlpyt", type=Path, required=True, help="checkout of astooke/rlpyt")
    p.add_argument("cases", nargs="*", help="cases to run (default: all in cases.json)")
    return p.parse_args()


def commit(path: Path) -> str:
    out = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True)
    return out.stdout.decode().strip() or "unknown"


# -- the draws ---------------------------------------------------------------------------------


@contextlib.contextmanager
def fed(module, queues: dict[str, list]) -> Iterator[None]:
    """Replace ``module.<fn>`` for each fn in ``queues`` by a function that returns the next
    pre-drawn tensor of its queue, checking that the shape asked for is the shape fed. Every
    queue must be used up: a draw the reference makes and we did not feed, or one we fed and it
    did not make, is an error."""
    import torch

    originals = {name: getattr(module, name) for name in queues}
    pending = {name: list(q) for name, q in queues.items()}

    def make(name):
        def draw(*args, **kwargs):
            if not pending[name]:
                raise AssertionError(f"the reference drew {name}{args} more often than fed")
            value = pending[name].pop(0)
            if name.endswith("_like"):
                shape = tuple(args[0].shape)
            else:
                size = kwargs.get("size", args[-1] if name == "randint" else args[0])
                shape = tuple(size) if isinstance(size, (tuple, list, torch.Size)) else (size,)
            if tuple(value.shape) != shape:
                raise AssertionError(f"{name}: reference asked for {shape}, fed {value.shape}")
            return value.clone()

        return draw

    for name in queues:
        setattr(module, name, make(name))
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(module, name, fn)
    left = {k: len(v) for k, v in pending.items() if v}
    if left:
        raise AssertionError(f"draws fed but not used: {left}")


# -- names -------------------------------------------------------------------------------------


def film_rows(h: int):
    """sgi-lab's FiLM linear stacks (gamma_a, beta_a, gamma_v, beta_v); the reference's output
    is viewed as (head: advantage, value) x (bias, scale): (beta_a, gamma_a, beta_v, gamma_v)."""
    import torch

    return torch.cat(
        [
            torch.arange(h, 2 * h),
            torch.arange(0, h),
            torch.arange(3 * h, 4 * h),
            torch.arange(2 * h, 3 * h),
        ]
    )


def reference_names(name: str, encoder: str, stage: str) -> list[str]:
    """The reference tensors an sgi-lab state-dict entry of the ONLINE network maps to."""
    parts = name.split(".")
    if name.startswith("encoder."):
        if encoder == "nature":  # Conv2dModel: conv, Identity (no norm), ReLU per layer
            index = {"0": "0", "2": "3", "4": "6"}[parts[2]]
            return [f"conv.conv.{index}.{parts[3]}"]
        # ResNet: encoder.layers.g.b.<part>.<tensor> -> conv.layers.g.b.conv.<i>.<tensor>
        g, b, part, tensor = parts[2], parts[3], parts[4], ".".join(parts[5:])
        index = {
            "expand": "0",
            "expand_bn": "1",
            "depthwise": "3",
            "depthwise_bn": "4",
            "project": "6",
            "project_bn": "7",
        }
        if part == "shortcut":
            return [f"conv.layers.{g}.{b}.downsample.{tensor}"]
        return [f"conv.layers.{g}.{b}.conv.{index[part]}.{tensor}"]
    if name.startswith("transition."):
        part, tensor = parts[1], ".".join(parts[2:])
        index = {"first": "initial_layer.0", "first_bn": "initial_layer.2", "final": "final_layer"}
        return [f"dynamics_model.{index[part]}.{tensor}"]
    if name.startswith("head."):
        stream, tensor = parts[1], parts[2]
        # The projection is the first layer of the goal head when pretraining with goal RL
        # (QL1Head over goal_linears), of the RL head when finetuning. Finetuning with goal RL
        # (``finetune_all``) has both: the RL head's first layers and the goal head's, which
        # are the projection; both start as sgi-lab's one shared layer.
        prefix = "goal" if stage == "pretrain" else "rl"  # BC and finetuning: the RL head
        index = {
            "advantage_hidden": f"{prefix}_advantage.0",
            "value_hidden": f"{prefix}_value.0",
            "advantage_out": "rl_advantage.3",
            "value_out": "rl_value.3",
        }[stream]
        out = [f"head.{index}.{tensor}"]
        if stage == "finetune_all" and stream.endswith("_hidden"):
            out.append(f"head.goal_{stream.split('_')[0]}.0.{tensor}")
        if stream.endswith("_hidden"):
            out.append(f"projection.encoders.{0 if stream.startswith('advantage') else 1}.{tensor}")
        return out
    if name.startswith("predictor."):
        return [f"predictor.0.{parts[1]}"]
    if name.startswith("film."):
        return [f"head.goal_conditioner.network.{parts[2]}.{parts[3]}"]
    if name.startswith("goal_head."):
        index = {"advantage_out": "goal_advantage.3", "value_out": "goal_value.3"}[parts[1]]
        return [f"head.{index}.{parts[2]}"]
    if name.startswith("inverse."):
        return [f"inverse_model.network.{parts[2]}.{parts[3]}"]
    raise KeyError(f"no reference name for {name}")


def target_names(name: str, encoder: str, stage: str) -> list[str]:
    """Where an sgi-lab TARGET-network entry goes: the reference's SPR target (target_encoder,
    target_projection) inside the model, and the agent's target model (the goal-RL / Q target)."""
    out = []
    for ref in reference_names(name, encoder, stage):
        if ref.startswith("conv."):
            out += [f"model:target_encoder.{ref[len('conv.') :]}", f"target_model:{ref}"]
        elif ref.startswith("projection."):  # the target model's own copy shares the head's
            out += [f"model:target_{ref}", f"target_model:{ref}"]
        else:
            out.append(f"target_model:{ref}")
    return out


# Reference tensors with no sgi-lab counterpart, what they are set to and why.
UNMAPPED = {
    "head.advantage_bias": "zeros (its init): a per-atom bias added to every action's advantage "
    "cancels in the dueling head's advantage - mean(advantage); its gradient is 0",
    "head.rl_advantage_bias": "zeros (its init): cancels in the dueling mean as above",
    "conv.*.conv.{0,3,6}.bias": "zeros: ResNet convs feeding a batch norm (sgi-lab has no bias "
    "there; with batch statistics a bias cancels exactly and gets a zero gradient)",
    "*_epsilon": "noise samples: set from the inputs' noise draws (finetuning) or unused "
    "(pretraining: sigma = 0)",
    "head.rl_*": "pretraining: the unconditioned RL head, never used with rl_weight 0 "
    "(copied from the goal head's first layers, outputs from the goal head's; zero gradient)",
    "head.goal_*, head.goal_conditioner.*": "finetuning (ssl spr) and BC: the goal head, unused "
    "with goal_weight 0 (finetune_all maps it)",
    "inverse_model.* (BC)": "the inverse model, unused with inverse_model_weight 0",
    "*_sigma (pretraining)": "0: the reference pretrains with noisy_nets_std=0, sgi-lab with noise "
    "switched off; both are noise-free, and finetuning resets every sigma",
}


# -- building the reference --------------------------------------------------------------------


def load_pretraining_weights(
    x,
    case,
    model,
    target_model,
    online_key: str = "online/",
    target_key: str = "target/",
    check_target_model: bool = True,
) -> None:
    """Copy sgi-lab's pretraining networks (the inputs' ``online_key``/``target_key`` entries)
    into a reference pretraining model, its SPR target (target_encoder, target_projection) and
    its target model, through the name mapping; every reference tensor is mapped or explained
    (UNMAPPED). ``check_target_model=False``: the target model is discarded (a finetuning
    case's pretrained state), so its tensors need not all be mapped."""
    stage = "bc" if case.get("objective") == "bc" else "pretrain"
    import torch

    encoder, hidden = case["model_args"]["encoder"], case["model_args"]["hidden_size"]

    def entries(key):
        return {k[len(key) :]: torch.from_numpy(v) for k, v in x.items() if k.startswith(key)}

    def convert(sgi_name, value):
        if sgi_name.startswith("film.layers.5."):
            return value[film_rows(hidden)]
        return value

    msd, tsd = model.state_dict(), target_model.state_dict()
    new_m = {k: v.clone() for k, v in msd.items()}
    new_t = {k: v.clone() for k, v in tsd.items()}
    mapped_m, mapped_t = set(), set()
    for sgi_name, value in entries(online_key).items():
        if sgi_name.endswith("_sigma"):
            continue  # see UNMAPPED
        for ref in reference_names(sgi_name, encoder, stage):
            new_m[ref] = convert(sgi_name, value).clone()
            mapped_m.add(ref)
    for sgi_name, value in entries(target_key).items():
        if sgi_name.endswith("_sigma"):
            continue
        for ref in target_names(sgi_name, encoder, stage):
            where, ref_name = ref.split(":")
            dest, mapped = (new_m, mapped_m) if where == "model" else (new_t, mapped_t)
            dest[ref_name] = convert(sgi_name, value).clone()
            mapped.add(ref_name)
    # the unused RL head: as copy_base_params would make it (see UNMAPPED); BC trains it
    copies = (
        () if stage == "bc" else (("goal_advantage", "rl_advantage"), ("goal_value", "rl_value"))
    )
    for src_name, dst_name in copies:
        for sd in (new_m, new_t):
            for k in list(sd):
                if k.startswith(f"head.{src_name}."):
                    sd[k.replace(src_name, dst_name)] = sd[k].clone()

    def bias_before_norm(k: str) -> bool:
        return (
            encoder in ("resnet", "resnet_l")
            and ".conv." in k
            and k.endswith(".bias")
            and k.split(".")[-2] in ("0", "3", "6")
        )

    for sd in (new_m, new_t):  # biases before batch norms: zero (see UNMAPPED)
        for k in sd:
            if bias_before_norm(k):
                sd[k] = torch.zeros_like(sd[k])
    model.load_state_dict(new_m)
    target_model.load_state_dict(new_t)

    def explained(k: str) -> bool:
        return (
            k.endswith("epsilon")
            or k in ("head.advantage_bias", "head.rl_advantage_bias")
            or bias_before_norm(k)
            or k.startswith(("head.goal", "inverse_model.") if stage == "bc" else "head.rl_")
            or k.endswith("_sigma")
        )

    unexplained = sorted(k for k in msd if k not in mapped_m and not explained(k))
    unexplained += sorted(
        f"target_model:{k}"
        for k in tsd
        if check_target_model
        and k not in mapped_t
        and not explained(k)
        and not k.startswith(("target_encoder.", "target_projection."))
    )
    if unexplained:
        raise SystemExit(f"reference tensors neither mapped nor explained: {unexplained}")


def pretrained_state_dict(x, case: dict, finetune_kw: dict, num_actions: int) -> dict:
    """The reference's pretrained state dict for a finetuning case: a reference pretraining
    model given sgi-lab's pretrained networks (``pretrained/``, ``pretrained_target/``), with
    sgi-lab's fresh Q output layers in the place of its never-trained RL head outputs."""
    import torch
    from src.models import SPRCatDqnModel

    pre_case = {**case, "stage": "pretrain", "model_args": case["pretrained_model_args"]}
    pre_kw, _ = reference_settings(pre_case)
    size = case["model_args"]["image_size"]
    build = {"image_shape": (4, 1, size, size), "output_size": num_actions}
    model, scratch = SPRCatDqnModel(**build, **pre_kw), SPRCatDqnModel(**build, **pre_kw)
    load_pretraining_weights(
        x, pre_case, model, scratch, "pretrained/", "pretrained_target/", check_target_model=False
    )
    state = model.state_dict()
    for stream, index in (("advantage_out", "rl_advantage.3"), ("value_out", "rl_value.3")):
        for tensor in ("weight_mu", "bias_mu", "weight_sigma", "bias_sigma"):
            state[f"head.{index}.{tensor}"] = torch.from_numpy(x[f"online/head.{stream}.{tensor}"])
    return state


def check_finetuning_weights(x, case, model) -> None:
    """The reference's own loading must give sgi-lab's finetuning model (its transfer): every
    tensor of ``online/`` equal to its reference counterpart, or this is not the same start."""
    import torch

    sd = model.state_dict()
    bad = []
    for key, value in x.items():
        if not key.startswith("online/"):
            continue
        name = key[len("online/") :]
        value = torch.from_numpy(value)
        if name.startswith("film.layers.5."):
            value = value[film_rows(case["model_args"]["hidden_size"])]
        for ref in reference_names(name, case["model_args"]["encoder"], mapping_stage(case)):
            if not torch.equal(sd[ref], value):
                bad.append(f"{name} -> {ref}")
    if bad:
        raise SystemExit(f"the reference loaded other weights than sgi-lab's transfer: {bad}")


def mapping_stage(case: dict) -> str:
    """Which head layout ``reference_names`` maps to: pretrain, bc, finetune or finetune_all."""
    if case.get("objective") == "bc":
        return "bc"
    if case["stage"] == "finetune" and case.get("ssl") == "all":
        return "finetune_all"
    return case["stage"]


def with_loaded_online(x: dict) -> dict:
    """A compact case's inputs leave out the finetuning model's loaded tensors equal to the
    pretrained ones (make_inputs.py): put them back as ``online/`` entries."""
    for k in x.get("loaded", ()):
        x.setdefault(f"online/{k}", x[f"pretrained/{k}"])
    return x


def with_shared_target(x: dict) -> dict:
    """A compact pretraining case's inputs store a target tensor equal to the online one once
    (make_inputs.py): put it back as a ``target/`` entry. Finetuning cases have no ``target/``."""
    if any(k.startswith("target/") for k in x):
        for k in [k for k in x if k.startswith("online/")]:
            x.setdefault("target/" + k[len("online/") :], x[k])
    return x


def reference_settings(case: dict) -> tuple[dict, dict]:
    """model_kwargs and algo kwargs as scripts/config.yaml, rlpyt's configs['ernbw'] and the
    shell scripts sgim_pretrain.sh / sgim_finetune.sh set them (later ones override earlier),
    with the fixture's sizes."""
    args, stage = case["model_args"], case["stage"]
    pretrain = stage == "pretrain"
    bc = case.get("objective") == "bc"
    # finetuning with all of SGI's losses: algo.goal_weight and algo.inverse_model_weight > 0,
    # which config.yaml also passes to the model (goal_rl, inverse_model)
    ssl_all = stage == "finetune" and case.get("ssl") == "all"
    # ResNet-L: sgiml_pretrain.sh / sgiml_finetune.sh (blocks_per_group 5, expand_ratio 4,
    # cnn_scale_factor 1.5: 48/96/96 channels), narrowed by the fixture's width_scale
    resnet_l = args["encoder"] == "resnet_l"
    model = dict(
        n_atoms=51,
        dueling=1,
        jumps=0 if bc else case["spr_steps"],
        spr=1,
        # augmentation is fed: the inputs hold sgi-lab's augmented pixels (see README)
        augmentation=["none"],
        target_augmentation=["none"],
        eval_augmentation=["none"],
        dynamics_blocks=0,
        norm_type="bn",
        noisy_nets=1,
        aug_prob=1,
        projection="q_l1",
        imagesize=args["image_size"],
        dqn_hidden_size=args["hidden_size"],
        momentum_tau=0.01,
        renormalize="max",
        q_l1_type=["value", "advantage"],
        dropout=0,
        predictor="linear",
        rl=0 if pretrain else 1,
        bc=1 if bc else 0,
        bc_from_values=True,
        goal_rl=1 if (pretrain and not bc) or ssl_all else 0,
        goal_n_step=1,
        noisy_nets_std=0.0 if pretrain else 0.5,
        residual_tm=0,
        inverse_model=1 if (pretrain and not bc) or ssl_all else 0,
        encoder="resnet" if args["encoder"].startswith("resnet") else "nature",
        goal_conditioning_type=["goal_only", "film"],
        resblock="inverted",
        expand_ratio=4 if resnet_l else 2,
        freeze_encoder=False,
        share_l1=False,
        cnn_scale_factor=args["width_scale"] * (1.5 if resnet_l else 1.0),
        blocks_per_group=5 if resnet_l else 3,
        ln_for_rl_head=False,
        conv_goal=True,
        goal_all_to_all=False,
        load_head_to=1,
        load_compat_mode=True,
    )
    algo = dict(
        discount=0.99,
        batch_size=case["batch_size"],
        learning_rate=1e-4,
        optim_kwargs={"eps": 0.00015},
        jumps=case["spr_steps"],
        goal_n_step=1,
        goal_window=case["goal_window"],
        goal_permute_prob=0.2,
        goal_noise_weight=0.5,
        goal_reward_scale=10.0,
        goal_dist="exp",
        goal_all_to_all=False,
        conv_goal=True,
        double_dqn=True,  # rlpyt configs['ernbw']
        prioritized_replay=1,
        pri_alpha=0.5,
        pri_beta_steps=100000,
        target_update_interval=1,
        bc_weight=0,
        V_min=-10,
        V_max=10,
    )
    if pretrain:  # sgim_pretrain.sh and config.yaml's offline section
        algo.update(
            rl_weight=0,
            spr_weight=1,
            goal_weight=1,
            inverse_model_weight=1,
            target_update_tau=0.01,
            clip_grad_norm=10,
            clip_model_grad_norm=10,
            n_step_return=case["n_step"],
            min_steps_learn=0,
            offline=True,
        )
        if bc:  # bc_pretrain.sh
            algo.update(spr_weight=0, goal_weight=0, inverse_model_weight=0, bc_weight=1, jumps=0)
    else:  # config.yaml + sgim_finetune.sh
        algo.update(
            rl_weight=1,
            spr_weight=5,
            goal_weight=0,
            inverse_model_weight=0,
            target_update_tau=1,
            n_step_return=case["n_step"],
            min_steps_learn=0,
            encoder_lr=1e-6,
            q_l1_lr=3e-5,
            clip_grad_norm=-1,
            clip_model_grad_norm=-1,
            offline=False,
        )
        if ssl_all:  # the weights of pretraining (sgim_pretrain.sh), the paper's lambdas
            algo.update(goal_weight=1, inverse_model_weight=1)
    return model, algo


AGENT_KWARGS = {  # scripts/config.yaml's agent section
    "eps_eval": 0.001,
    "eps_final": 0,
    "eps_init": 1,
    "repeat_random_lambda": 0,
    "softmax_policy": False,
}


class StubReplay:
    """The replay interface ``optimize_agent`` calls: one batch, and what it is told."""

    def __init__(self, samples):
        self.samples = samples
        self.priorities = None
        self.beta = None

    def sample_batch(self, batch_size):
        return self.samples

    def update_batch_priorities(self, priorities):
        self.priorities = priorities.detach().clone()

    def set_beta(self, beta):
        self.beta = beta


# Reruns of a case's inputs with other reference settings: a gradient-norm limit low enough to
# clip (the fixture's norm is ~8, under the scripts' 10), which the reference applies to two
# groups of parameters separately.
VARIANTS = {"pretrain_nature": {"clip1": {"clip_grad_norm": 1.0, "clip_model_grad_norm": 1.0}}}


def run_case(name: str, case: dict, overrides: dict | None = None) -> dict[str, np.ndarray]:
    import src.algos as ref_algos
    import src.networks as ref_networks
    import torch
    from rlpyt.spaces.int_box import IntBox
    from rlpyt.utils.collections import namedarraytuple
    from src.agent import SPRAgent
    from src.algos import SPRCategoricalDQN
    from src.models import SPRCatDqnModel

    torch.set_num_threads(1)
    x = unpacked(dict(np.load(FIXTURES / f"{name}.inputs.npz", allow_pickle=False)))
    x = with_shared_target(with_loaded_online(x))
    px = dict(np.load(FIXTURES / f"{name}.pixels.scratch.npz", allow_pickle=False))
    args, stage = case["model_args"], case["stage"]
    pretrain = stage == "pretrain"
    ssl_all = stage == "finetune" and case.get("ssl") == "all"
    goal = (pretrain and case.get("objective") != "bc") or ssl_all
    names = mapping_stage(case)  # which head layout the mapping uses
    B, K, A, size = case["batch_size"], case["spr_steps"], args["num_actions"], args["image_size"]
    model_kw, algo_kw = reference_settings(case)
    algo_kw.update(overrides or {})

    EnvSpaces = namedarraytuple("EnvSpaces", ["observation", "action"])
    spaces = EnvSpaces(
        observation=IntBox(0, 256, shape=(4, 1, size, size), dtype="uint8"), action=IntBox(0, A)
    )
    if not pretrain:
        # The reference finetunes from its whole pretrained state dict (model_kwargs'
        # state_dict: load, copy the goal head's first layers into the RL head, reset sigmas).
        model_kw["state_dict"] = pretrained_state_dict(x, case, model_kw, A)
    agent = SPRAgent(ModelCls=SPRCatDqnModel, model_kwargs=model_kw, **AGENT_KWARGS)
    agent.initialize(spaces)
    algo = SPRCategoricalDQN(**algo_kw)
    algo.agent = agent
    algo.sampler_bs = 1
    algo.updates_per_optimize = 1
    algo.min_itr_learn = 0
    agent.give_V_min_max(-10, 10)
    model, target_model = agent.model, agent.target_model

    if pretrain:
        load_pretraining_weights(x, case, model, target_model)
    else:
        check_finetuning_weights(x, case, model)

    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    target_before = {k: v.detach().clone() for k, v in target_model.state_dict().items()}

    # -- the batch, in the reference's layout (T, B, ...), prev-action convention ------------
    T = case["goal_window"] if goal else max(K + 1, case["n_step"] + 1)
    pixels = torch.from_numpy(px["pixels"])  # (B, K+1, 4, H, W) in [0, ~1.1]
    obs = torch.zeros(T, B, 4, 1, size, size)
    obs[: K + 1] = pixels.transpose(0, 1).unsqueeze(3)
    actions = torch.from_numpy(x["actions"]).long()  # sgi-lab: a_t at index t
    all_action = torch.zeros(T, B, dtype=torch.long)
    all_action[1 : K + 2] = actions.t()  # the reference: a_t at index t + 1 (prev action)
    rewards = torch.zeros(T, B)
    dones = torch.zeros(T, B, dtype=torch.bool)
    goal_index = None
    if pretrain:
        extra = torch.from_numpy(px["pixels_extra"]) if goal else torch.zeros(B, 4, size, size)
        offsets = torch.from_numpy(x["goal_offsets"]).long() if goal else []
        for b in range(len(offsets)):  # the goal frames, where the reference draws them
            obs[offsets[b], b] = extra[b].unsqueeze(1)
        goal_index = (
            offsets - 1 if goal else None
        )  # sample_goals draws within observations[1:goal_window]
        return_ = torch.zeros(T, B)
        done_n = torch.zeros(T, B, dtype=torch.bool)
        is_weights = torch.ones(B)
    else:
        from rlpyt.algos.utils import discount_return_n_step

        n = case["n_step"]
        extra = torch.from_numpy(px["pixels_extra"])  # (B, 4, H, W): s_{t+n}
        obs[n] = extra.unsqueeze(2)
        r = torch.from_numpy(x["rewards"]).t()  # (n, B): reward of a_{t+j}
        d = torch.from_numpy(x["dones"]).t()  # (n, B): a_{t+j} ended the episode
        # rlpyt's own n-step return over the sequence (its replay computes return_ with it)
        ret, dn = discount_return_n_step(r, d, n, algo.discount)
        return_ = torch.zeros(T, B)
        done_n = torch.zeros(T, B, dtype=torch.bool)
        return_[0], done_n[0] = ret[0], dn[0].bool()
        rewards[1 : n + 1] = r  # prev-reward convention (unused by the losses)
        dones[:n] = d.bool()
        is_weights = torch.from_numpy(x["is_weights"])
        if ssl_all:  # the goal frames, where the reference draws them (past s_{t+K}, s_{t+n})
            offsets = torch.from_numpy(x["goal_offsets"]).long()
            goal_pixels = torch.from_numpy(px["pixels_goal"])
            for b in range(B):
                obs[offsets[b], b] = goal_pixels[b].unsqueeze(1)
            goal_index = offsets - 1  # sample_goals draws within observations[1:goal_window]
    Samples = namedarraytuple(
        "OfflineSamples",
        [
            "all_observation",
            "all_action",
            "all_reward",
            "return_",
            "done",
            "done_n",
            "init_rnn_state",
            "is_weights",
        ],
    )
    samples = Samples(
        all_observation=obs,
        all_action=all_action,
        all_reward=rewards,
        return_=return_,
        done=dones,
        done_n=done_n,
        init_rnn_state=None,
        is_weights=is_weights,
    )

    # -- capture what the update computes ------------------------------------------------------
    captured: dict[str, torch.Tensor] = {}
    orig_loss = algo.loss

    def loss(samples_, offline=False):
        out = orig_loss(samples_, offline)
        names = ["rl", "rl_kl", "goal", "t0_spr", "spr", "diversity", "inverse", "bc", "goal_kl"]
        for k, v in zip(names, out, strict=True):
            captured[f"loss/{k}"] = v.detach().clone()
        return out

    algo.loss = loss
    orig_rl_loss = algo.rl_loss

    def rl_loss(*a, **kw):  # per-sample C51 losses and KL, before the PER weights
        losses, kl = orig_rl_loss(*a, **kw)
        captured["goal_rl_per_sample" if a[2] is not None else "rl_per_sample"] = losses.detach()
        return losses, kl

    algo.rl_loss = rl_loss
    orig_spr = model.do_spr_loss

    def do_spr_loss(*a, **kw):  # (K+1, B) per-step, per-sample mean_k(2 - 2 cos) terms
        out = orig_spr(*a, **kw)
        captured["spr_per_step"] = out.detach().clone()
        return out

    model.do_spr_loss = do_spr_loss
    orig_forward = model.forward

    def forward(*a, **kw):  # the (B,) inverse-dynamics losses, before the PER weights
        out = orig_forward(*a, **kw)
        if kw.get("train"):
            captured["inverse_per_sample"] = out[6].detach().clone()
        return out

    model.forward = forward
    orig_sample_goals = algo.sample_goals

    def sample_goals(observation):
        goals = orig_sample_goals(observation)
        captured["goals"] = goals.clone()
        return goals

    algo.sample_goals = sample_goals
    orig_returns = ref_algos.calculate_returns

    def calculate_returns(*a, **kw):
        out = orig_returns(*a, **kw)
        captured["goal_returns"] = out.clone()
        return out

    ref_algos.calculate_returns = calculate_returns
    grads: dict[str, torch.Tensor] = {}
    algo.optim_initialize()
    orig_step = algo.optimizer.step

    def step(*a, **kw):
        for k, p in model.named_parameters():
            if p.grad is not None:
                grads[k] = p.grad.detach().clone()
        return orig_step(*a, **kw)

    algo.optimizer.step = step
    replay = StubReplay(samples)
    algo.replay_buffer = replay  # finetuning samples it; both set its beta
    if pretrain:
        algo.offline_dataloader = iter([samples])
    agent.train_mode(itr=1)

    # -- the draws -----------------------------------------------------------------------------
    noise_queues: dict = {}
    if not pretrain:
        # noisy nets: each NoisyLinear's reset_noise draws eps_in then eps_out through
        # _scale_noise(torch.randn); feed the signed square roots' normals per layer.
        layer_of = {}
        for net, which in ((model, "online"), (target_model, "target")):
            for k, m in net.named_modules():
                if isinstance(m, ref_networks.NoisyLinear):
                    layer_of[id(m)] = (which, k)
        sgi_layer = {
            "head.rl_advantage.0": "head.advantage_hidden",
            "head.rl_value.0": "head.value_hidden",
            "head.rl_advantage.3": "head.advantage_out",
            "head.rl_value.3": "head.value_out",
        }
        if ssl_all:
            # the goal head's layers: its first layers are separate copies in the reference,
            # each with its own noise; fed the noise of sgi-lab's one shared layer
            sgi_layer.update(
                {
                    "head.goal_advantage.0": "head.advantage_hidden",
                    "head.goal_value.0": "head.value_hidden",
                    "head.goal_advantage.3": "goal_head.advantage_out",
                    "head.goal_value.3": "goal_head.value_out",
                }
            )

        def scale_noise_for(m):
            which, k = layer_of[id(m)]
            queue = []
            if k in sgi_layer:
                for part in ("eps_in", "eps_out"):
                    queue.append(torch.from_numpy(x[f"noise_{which}/{sgi_layer[k]}.{part}"]))
            return queue

        originals = ref_networks.NoisyLinear._scale_noise

        def _scale_noise(self, size):
            q = noise_queues.setdefault(id(self), scale_noise_for(self))
            if q:
                value = q.pop(0)
                assert value.numel() == size, (layer_of[id(self)], size, value.shape)
                return value.clone()
            return originals(self, size)  # goal-head layers: unused when finetuning

        ref_networks.NoisyLinear._scale_noise = _scale_noise
    if goal:
        n_rows = B
        swap = torch.from_numpy(x["goal_swap"])
        other = (torch.arange(n_rows) + torch.from_numpy(x["goal_swap_offset"]).long()) % n_rows
        # sgi-lab swaps a row with (row + offset) % B, offset in 1..B-1; the reference draws any
        # row (itself included) with randint_like: feed it the same partner.
        queues = {
            "randint": [goal_index],
            "randn_like": [torch.from_numpy(x["goal_noise"])],
            "rand": [torch.from_numpy(x["goal_alpha"]), swap],
            "randint_like": [other],
        }
        ctx = fed(torch, queues)
    else:
        ctx = contextlib.nullcontext()
    with ctx:
        algo.optimize_agent(itr=1)
    if not pretrain:
        ref_networks.NoisyLinear._scale_noise = originals

    # -- write, in sgi-lab's names ------------------------------------------------------------
    out: dict[str, np.ndarray] = {}
    for k, v in captured.items():
        out[k] = v.numpy()
    after = model.state_dict()
    target_after = target_model.state_dict()
    gen = np.random.default_rng(0)
    hidden = args["hidden_size"]

    def to_sgi(sgi_name, value):
        if sgi_name.startswith("film.layers.5."):
            return value[torch.argsort(film_rows(hidden))]
        return value

    def sample(key, sgi_name, delta):
        delta = delta.flatten()
        idx = np.arange(delta.numel())
        if delta.numel() > SAMPLE:
            idx = np.sort(gen.choice(delta.numel(), SAMPLE, replace=False))
        out[f"{key}_index/{sgi_name}"] = idx
        out[f"{key}/{sgi_name}"] = delta[idx].numpy()

    sgi_names = [k[len("online/") :] for k in x if k.startswith("online/")]
    for sgi_name in sgi_names:
        if pretrain and sgi_name.endswith("_sigma"):
            continue
        refs = reference_names(sgi_name, args["encoder"], names)
        ref = refs[0]
        if names == "finetune_all" and sgi_name.startswith(
            ("head.advantage_hidden", "head.value_hidden")
        ):
            # two reference tensors (the RL head's copy, the goal head's = the projection) for
            # sgi-lab's one: the gradient of the shared layer is their sum; each copy takes its
            # own Adam step, which sgi-lab's one tensor cannot (docs/paper_vs_code.md)
            rl_ref, ssl_ref = refs[0], refs[1]
            zero = torch.zeros_like(before[rl_ref])
            g_rl, g_ssl = grads.get(rl_ref, zero), grads.get(ssl_ref, zero)
            out[f"grad/{sgi_name}"] = (g_rl + g_ssl).numpy()
            out[f"grad_rl/{sgi_name}"] = g_rl.numpy()
            out[f"grad_ssl/{sgi_name}"] = g_ssl.numpy()
            sample("update_rl", sgi_name, after[rl_ref] - before[rl_ref])
            sample("update_ssl", sgi_name, after[ssl_ref] - before[ssl_ref])
        else:
            if ref in grads:
                out[f"grad/{sgi_name}"] = to_sgi(sgi_name, grads[ref]).numpy()
            sample("update", sgi_name, to_sgi(sgi_name, after[ref] - before[ref]))
        # the target networks after the update: the SPR target (model.target_*) and, in
        # pretraining, the target model (finetuning's is the online network itself)
        for target_ref in target_names(sgi_name, args["encoder"], names):
            where, ref_name = target_ref.split(":")
            if where == "model":
                delta = after[ref_name] - before[ref_name]
                sample("spr_target", sgi_name, to_sgi(sgi_name, delta))
            elif pretrain:
                delta = target_after[ref_name] - target_before[ref_name]
                sample("q_target", sgi_name, to_sgi(sgi_name, delta))
    if not pretrain:
        out.update(acting(agent, model, x, algo_kw))
        out["priorities"] = replay.priorities.numpy()
        out["return_"] = return_[0].numpy()
        out["done_n"] = done_n[0].numpy()
    out["grad_norm_clipped"] = np.array(
        [float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads.values()])))]
    )
    return out


EPSILON_ITRS = (0, 1, 1000, 1999, 2000, 2001, 2002, 5000, 100000)
"""Environment steps at which the acting epsilon is recorded (the reference anneals it from
min_steps_learn to eps_steps, in sampler iterations of one step each)."""


def acting(agent, model, x, algo_kw) -> dict[str, np.ndarray]:
    """After the update: the Q values the agent acts on in sampling mode (noisy nets with the
    update's noise, batch norm on running statistics) and in evaluation mode (no noise), on the
    batch's first observations, and its epsilon schedule (rlpyt's DQN.initialize sets the
    schedule's iterations from min_steps_learn and eps_steps, with one step per iteration)."""
    import torch

    obs = torch.from_numpy(x["frames"][:, 0]).float().div(255.0).unsqueeze(2)  # (B, 4, 1, H, W)
    out = {}
    agent.set_epsilon_itr_min_max(2000, 2001)  # min_steps_learn 2000, eps_steps 2001
    eps = []
    for itr in EPSILON_ITRS:
        agent.sample_mode(itr)
        eps.append(float(agent.search.epsilon))
    with torch.no_grad():
        agent.sample_mode(itr=100000)
        out["act/q_sample"] = model.select_action(obs).numpy()
        agent.eval_mode(itr=100000)
        out["act/q_eval"] = model.select_action(obs).numpy()
        out["act/eps_eval"] = np.array([agent.search.epsilon], np.float64)
    out["act/eps_itrs"] = np.array(EPSILON_ITRS)
    out["act/eps"] = np.array(eps)
    return out


def main() -> None:
    opts = parse()
    shims = HERE / "shims"
    sys.path[:0] = [str(shims), str(opts.sgi), str(opts.rlpyt)]
    import torch

    cases = json.loads((FIXTURES / "cases.json").read_text())
    names = opts.cases or list(cases)
    meta_path = FIXTURES / "reference.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {"cases": {}}
    meta.update(
        {
            "sgi_commit": commit(opts.sgi),
            "rlpyt_commit": commit(opts.rlpyt),
            "torch": torch.__version__,
            "unmapped": UNMAPPED,
        }
    )
    for name in names:
        case = cases[name]
        for variant, overrides in [("", {}), *VARIANTS.get(name, {}).items()]:
            out = run_case(name, case, overrides)
            label = f"{name}.{variant}" if variant else name
            np.savez_compressed(FIXTURES / f"{label}.reference.npz", **packed(out))
            model_kw, algo_kw = reference_settings(case)
            meta["cases"][label] = {
                "reference_model_kwargs": model_kw,
                "reference_algo_kwargs": {**algo_kw, **overrides},
            }
            size = sum(v.nbytes for v in out.values()) / 1e6
            print(f"{label}: {size:.2f} MB of reference outputs")
    meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")


if __name__ == "__main__":
    main()
