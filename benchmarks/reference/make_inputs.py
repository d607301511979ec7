"""Step 1 of the reference fixtures: the inputs, made by sgi-lab (the project's venv).

For each case, an sgi-lab model with perturbed weights (and a target network that differs from
it), a batch of frames, and every random draw of one update, written to
``tests/fixtures/reference/<case>.inputs.npz``. Step 2 (``run_reference.py``, in the reference's
venv) copies these weights into the authors' model, feeds it the same batch and draws, and
writes what it computes to ``<case>.reference.npz``. ``tests/test_reference.py`` runs sgi-lab on
the inputs and compares.

Run from the repository root: ``.venv/bin/python benchmarks/reference/make_inputs.py``
(``benchmarks/reference/README.md`` gives the whole procedure).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from npz_pack import packed

from sgi_lab.augment.frames import augmented_frames
from sgi_lab.augment.ops import jitter_factor, shift
from sgi_lab.nets import SGIModel
from sgi_lab.nets.encoders import PIXEL_SCALE
from sgi_lab.nets.noisy import NoisyLinear
from sgi_lab.train.transfer import Pretrained, transfer_pretrained

OUT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "reference"

# Networks narrower than the paper's so that weights, gradients and updated parameters of every
# tensor fit in a few MB: the encoders' channels x 1/4 (the reference's cnn_scale_factor),
# 32 hidden units per Q-head stream instead of 512, and frames small enough for a 3x3 latent.
# Every layer and every code path is the paper's; only sizes differ.
COMMON = {"width_scale": 0.25, "hidden_size": 32, "num_actions": 6}
CASES = {
    "pretrain_nature": {"encoder": "nature", "image_size": 52, "stage": "pretrain"},
    "pretrain_resnet": {"encoder": "resnet", "image_size": 36, "stage": "pretrain"},
    "finetune_nature": {"encoder": "nature", "image_size": 52, "stage": "finetune"},
    "finetune_resnet": {"encoder": "resnet", "image_size": 36, "stage": "finetune"},
    # the BC baseline (bc_pretrain.sh): behavioural cloning through the Q head's values
    "pretrain_bc": {"encoder": "nature", "image_size": 52, "stage": "pretrain", "objective": "bc"},
    # finetuning with all of SGI's losses (ssl: all; the paper's "All Losses" finetuning row)
    "finetune_all": {
        "encoder": "nature",
        "image_size": 52,
        "stage": "finetune",
        "ssl": "all",
        "compact": True,
    },
    # ResNet-L (sgiml_*.sh: blocks_per_group 5, expand_ratio 4, cnn_scale_factor 1.5), narrowed
    # as the others: 12/24/24 channels (the reference's cnn_scale_factor 1.5 x 1/4). What these
    # cases add is the encoder: 16 hidden units per Q-head stream and compact inputs keep each
    # case under 2 MB (its 24 latent channels widen the FiLM generator and the heads' inputs).
    "pretrain_resnet_l": {
        "encoder": "resnet_l",
        "image_size": 36,
        "stage": "pretrain",
        "hidden_size": 16,
        "compact": True,
    },
    "finetune_resnet_l": {
        "encoder": "resnet_l",
        "image_size": 36,
        "stage": "finetune",
        "hidden_size": 16,
        "compact": True,
    },
    # ssl: all with batch-norm encoders: goals encoded in passes of their own (row 35)
    "finetune_all_resnet": {
        "encoder": "resnet",
        "image_size": 36,
        "stage": "finetune",
        "ssl": "all",
        "compact": True,
    },
}
BATCH = 4
K = 5  # SPR steps
N_STEP = 10  # finetuning's n-step return
GOAL_WINDOW = 50


def model_args(case: dict, stage: str | None = None) -> dict:
    """SGIModel arguments: the pretraining model (for a finetuning case: the model it loads)
    or the finetuning model."""
    stage = stage or case["stage"]
    sgi = stage == "pretrain" and case.get("objective", "sgi") == "sgi"
    ssl_all = stage == "finetune" and case.get("ssl") == "all"
    return {
        "encoder": case["encoder"],
        "image_size": case["image_size"],
        "noisy": stage == "finetune",
        "rl_head": not sgi,  # finetuning's Q head, or the one BC trains
        "goal_head": sgi or ssl_all,
        "inverse_model": sgi or ssl_all,
        "goal_film": "reference",
        **COMMON,
        "hidden_size": case.get("hidden_size", COMMON["hidden_size"]),
    }


def perturbed_state(model: SGIModel, gen: torch.Generator) -> dict[str, np.ndarray]:
    """The model's state with every float tensor moved off its initialisation: batch-norm
    scales and shifts random (a zero-initialised residual scale would hide its branch's
    gradients), running statistics random, Q output layers redrawn around their init, everything else jittered by 10% of its spread."""
    out = {}
    for name, t in model.state_dict().items():
        t = t.clone()
        if t.is_floating_point():
            noise = torch.randn(t.shape, generator=gen)
            if name.endswith("_bn.weight") or name.endswith("first_bn.weight"):
                t = 0.5 + torch.rand(t.shape, generator=gen)
            elif name.endswith("_bn.bias") or name.endswith("first_bn.bias"):
                t = 0.1 * noise
            elif name.endswith("running_mean"):
                t = 0.1 * noise
            elif name.endswith("running_var"):
                t = 0.5 + torch.rand(t.shape, generator=gen)
            else:
                spread = t.std().item() if t.numel() > 1 and t.std().item() > 0 else 0.05
                # Q output layers fully redrawn: at initialisation one action's bias decides
                # every argmax, and double Q's choice would go untested
                t = t + (1.0 if "_out." in name else 0.1) * spread * noise
        out[name] = t.numpy()
    return out


# A compact pretraining case's target moves only tensors of at most this many entries (batch
# norms, biases, the first group's depthwise convs) and the Q outputs: its encoder still differs
# in every block; it shares the larger tensors with the online network, stored once.
COMPACT_TARGET_ENTRIES = 512


def target_state(
    online: dict[str, np.ndarray], gen: torch.Generator, compact: bool = False
) -> dict[str, np.ndarray]:
    """A target network near the online one (as after some EMA steps), not equal to it."""
    out = {}
    for name, v in online.items():
        t = torch.from_numpy(v.copy())
        shared = compact and (
            name.endswith("_sigma") or (t.numel() > COMPACT_TARGET_ENTRIES and "_out." not in name)
        )
        if t.is_floating_point() and "running_var" not in name and not shared:
            spread = t.std().item() if t.numel() > 1 and t.std().item() > 0 else 0.05
            # the Q outputs differ more, so that the target's greedy action is not the online's
            scale = 3.0 if "_out." in name else 0.05
            t = t + scale * spread * torch.randn(t.shape, generator=gen)
        out[name] = t.numpy()
    return out


def augmented(frames: torch.Tensor, corners: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """sgi-lab's augmentation with given draws: float pixels in [0, ~280]."""
    lead = frames.shape[:-3]
    flat = shift(frames.reshape(-1, *frames.shape[-3:]), corners.reshape(-1, 2))
    out = flat.float() * jitter_factor(noise.reshape(-1)).view(-1, 1, 1, 1)
    return out.view(*lead, *out.shape[1:])


def random_frames(case: dict, lead: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """(*lead, 4, H, W) uint8 frames: uniform pixels, or for a ``compact`` case blocks of 4 x 4
    equal pixels (the fixture compresses ~16x; shifts of 0..8 pixels still move the blocks)."""
    size = case["image_size"]
    if not case.get("compact"):
        return torch.randint(0, 256, (*lead, 4, size, size), generator=gen, dtype=torch.uint8)
    coarse = torch.randint(0, 256, (*lead, 4, size // 4, size // 4), generator=gen)
    return coarse.repeat_interleave(4, -1).repeat_interleave(4, -2).to(torch.uint8)


def make_case(name: str, case: dict, seed: int) -> dict[str, np.ndarray]:
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    args = model_args(case)
    model = SGIModel(**args)
    online = perturbed_state(model, gen)
    # (finetuning's target is built below; its draws here stay as they were for finetune_all)
    compact_target = bool(case.get("compact")) and case["stage"] == "pretrain"
    target = target_state(online, gen, compact=compact_target)
    B, A = BATCH, COMMON["num_actions"]
    steps = K + 1
    x: dict[str, np.ndarray] = {}
    frames = random_frames(case, (B, steps), gen)
    corners = torch.randint(0, 9, (B, steps, 2), generator=gen)
    jitter = torch.randn(B, steps, generator=gen)
    x["frames"], x["corners"], x["jitter"] = frames.numpy(), corners.numpy(), jitter.numpy()
    x["actions"] = torch.randint(0, A, (B, steps), generator=gen).numpy()
    if case["stage"] == "pretrain" and case.get("objective", "sgi") == "bc":
        pixels = [augmented(frames, corners, jitter)]
    elif case["stage"] == "pretrain":
        pixels = [augmented(frames, corners, jitter)]
        # Goals: a future frame per row (offsets the reference can draw: 2..49, past the K+1
        # frames above), noise and swaps (rows 0 and 2 swap).
        goal_frames = random_frames(case, (B,), gen)  # the same draw as before
        goal_corners = torch.randint(0, 9, (B, 2), generator=gen)
        goal_jitter = torch.randn(B, generator=gen)
        x["goal_frames"], x["goal_corners"], x["goal_jitter"] = (
            goal_frames.numpy(),
            goal_corners.numpy(),
            goal_jitter.numpy(),
        )
        x["goal_offsets"] = torch.randint(K + 2, GOAL_WINDOW, (B,), generator=gen).numpy()
        latent = SGIModel(**args).latent_size
        x["goal_noise"] = torch.randn(B, latent, generator=gen).numpy()
        x["goal_alpha"] = torch.rand(B, 1, generator=gen).numpy()
        x["goal_swap"] = np.array([0.05, 0.7, 0.15, 0.9], np.float32)[:B]
        x["goal_swap_offset"] = torch.randint(1, B, (B,), generator=gen).numpy()
        pixels.append(augmented(goal_frames, goal_corners, goal_jitter))
    else:
        # Finetuning from a pretrained model (its online and EMA target networks), through
        # sgi-lab's transfer; the bootstrap frame n steps ahead, rewards and dones of the n-step
        # return (row 1 ends its episode inside the horizon), PER weights, noisy-net noise.
        pretrained = SGIModel(**model_args(case, "pretrain"))
        pre_online = perturbed_state(pretrained, gen)
        pre_target = target_state(pre_online, gen)
        if case.get("compact"):  # the SPR target is all both codes take from it
            keep = ("encoder.", "head.advantage_hidden.", "head.value_hidden.")
            pre_target = {k: v for k, v in pre_target.items() if k.startswith(keep)}
        pretrained.load_state_dict({k: torch.from_numpy(v) for k, v in pre_online.items()})
        source = Pretrained(
            Path("fixture"), pretrained.state_dict(), model_args(case, "pretrain"), 0
        )
        model = SGIModel(**args)
        transfer = transfer_pretrained(model, source)
        online = {k: v.numpy() for k, v in model.state_dict().items()}
        target = {}  # the SPR target starts from the pretrained target (see the test)
        for k, v in pre_online.items():
            x[f"pretrained/{k}"] = v
        for k, v in pre_target.items():
            x[f"pretrained_target/{k}"] = v
        x["loaded"] = np.array(sorted(transfer.loaded))
        boot = random_frames(case, (B,), gen)
        boot_corners = torch.randint(0, 9, (B, 2), generator=gen)
        boot_jitter = torch.randn(B, generator=gen)
        x["boot_frames"], x["boot_corners"], x["boot_jitter"] = (
            boot.numpy(),
            boot_corners.numpy(),
            boot_jitter.numpy(),
        )
        rewards = torch.randint(-1, 2, (B, N_STEP), generator=gen).float()
        dones = torch.zeros(B, N_STEP)
        dones[1, 6] = 1.0
        x["rewards"], x["dones"] = rewards.numpy(), dones.numpy()
        x["is_weights"] = (0.3 + 0.7 * torch.rand(B, generator=gen)).numpy()
        for which in ("online", "target"):
            for layer_name, layer in model.named_modules():
                if isinstance(layer, NoisyLinear):
                    for part, n in (("eps_in", layer.in_features), ("eps_out", layer.out_features)):
                        g = torch.randn(n, generator=gen)
                        # ssl all: the target's goal-head noise x4, so that the goal bootstrap's
                        # greedy action differs from the online network's (the reference's
                        # target model is the online network at tau 1: the usual noise never
                        # flips this fixture's argmax, and double Q would go untested)
                        amp = (
                            4.0
                            if which == "target" and layer_name.startswith("goal_head.")
                            else 1.0
                        )
                        x[f"noise_{which}/{layer_name}.{part}"] = (
                            amp * g.sign() * g.abs().sqrt()
                        ).numpy()
        # the encoders' inputs exactly as the finetuning update makes them
        prep = {"channels_last": False, "dtype": torch.float32}
        pixels = [
            augmented_frames(frames[None], corners[None], jitter_factor(jitter)[None], **prep)[0],
            augmented_frames(
                boot[None], boot_corners[None], jitter_factor(boot_jitter)[None], **prep
            )[0],
        ]
        if case.get("ssl") == "all":
            # goal RL's draws: a future frame per row at an offset the reference can draw
            # (2..49) and where its batch holds no other frame (past s_{t+K} and s_{t+n}),
            # noise, mixing weights and swaps (rows 0 and 2 swap); sgi-lab's SPR-target
            # bootstrap (goal_target: spr_target) has its own noise sample
            goal_frames = random_frames(case, (B,), gen)
            goal_corners = torch.randint(0, 9, (B, 2), generator=gen)
            goal_jitter = torch.randn(B, generator=gen)
            x["goal_frames"], x["goal_corners"], x["goal_jitter"] = (
                goal_frames.numpy(),
                goal_corners.numpy(),
                goal_jitter.numpy(),
            )
            x["goal_offsets"] = torch.randint(N_STEP + 1, GOAL_WINDOW, (B,), generator=gen).numpy()
            x["goal_noise"] = torch.randn(B, model.latent_size, generator=gen).numpy()
            x["goal_alpha"] = torch.rand(B, 1, generator=gen).numpy()
            x["goal_swap"] = np.array([0.05, 0.7, 0.15, 0.9], np.float32)[:B]
            x["goal_swap_offset"] = torch.randint(1, B, (B,), generator=gen).numpy()
            for layer_name, layer in model.named_modules():
                if isinstance(layer, NoisyLinear):
                    for part, n in (("eps_in", layer.in_features), ("eps_out", layer.out_features)):
                        g = torch.randn(n, generator=gen)
                        x[f"noise_goal/{layer_name}.{part}"] = (g.sign() * g.abs().sqrt()).numpy()
            pixels.append(
                augmented_frames(
                    goal_frames[None], goal_corners[None], jitter_factor(goal_jitter)[None], **prep
                )[0]
            )
    # The encoders' input exactly as sgi-lab makes it (x * (1/255) in float32), for the
    # reference, which expects pixels already scaled.
    if case["stage"] == "pretrain":
        pixels = [p.clone().mul_(PIXEL_SCALE) for p in pixels]
    x["pixels"] = pixels[0].numpy()
    if len(pixels) > 1:
        x["pixels_extra"] = pixels[1].numpy()
    if len(pixels) > 2:
        x["pixels_goal"] = pixels[2].numpy()
    for k, v in online.items():
        # a compact case leaves out the loaded tensors equal to the pretrained ones (readers
        # take them from pretrained/: run_reference.py's and the test's `with_loaded_online`)
        same = f"pretrained/{k}" in x and np.array_equal(x[f"pretrained/{k}"], v)
        if not (case.get("compact") and same and k in x.get("loaded", ())):
            x[f"online/{k}"] = v
    for k, v in target.items():
        # a compact case stores a target tensor equal to the online one once (readers take it
        # from online/: run_reference.py's and the test's `with_shared_target`)
        if not (case.get("compact") and np.array_equal(online[k], v)):
            x[f"target/{k}"] = v
    return x


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    names = sys.argv[1:] or list(CASES)
    settings = {}
    for i, name in enumerate(CASES):
        if name not in names:
            continue
        case = CASES[name]
        arrays = make_case(name, case, seed=1000 + i)
        # pixels are derived (the test recomputes them from frames and draws); keep them out
        # of the committed inputs, hand them to step 2 in a scratch file.
        scratch = {
            k: arrays.pop(k) for k in ("pixels", "pixels_extra", "pixels_goal") if k in arrays
        }
        np.savez_compressed(OUT / f"{name}.inputs.npz", **packed(arrays))
        np.savez(OUT / f"{name}.pixels.scratch.npz", **scratch)
        settings[name] = {
            "stage": case["stage"],
            "objective": case.get("objective", "sgi"),
            "ssl": case.get("ssl", "spr") if case["stage"] == "finetune" else None,
            "compact": bool(case.get("compact")),
            "model_args": model_args(case),
            "pretrained_model_args": model_args(case, "pretrain"),
            "batch_size": BATCH,
            "spr_steps": K,
            "n_step": N_STEP,
            "goal_window": GOAL_WINDOW,
        }
        print(f"{name}: {sum(v.nbytes for v in arrays.values()) / 1e6:.2f} MB of inputs")
    path = OUT / "cases.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    old.update(settings)
    path.write_text(json.dumps(old, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
