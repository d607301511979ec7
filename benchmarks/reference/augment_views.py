"""How much the reference's per-view augmentation moves one step (docs/paper_vs_code.md row 34).

The reference augments each view of a frame on its own: the online encoder's s_t, the target's
sequence s_t..s_{t+K}, and the bootstrap state s_{t+n} twice (the target network's pass and the
online network's, which picks the action under double Q); the goal has a draw of its own in both
codes. sgi-lab draws once per frame stack and shares it between these views. Each view's
distribution is the same either way; only the views' correlation differs.

This runs sgi-lab's own pretraining step (``pretrain_nature``'s weights, batch and goal draws,
or ``--case``'s; the reference's settings as ``tests/test_reference.py`` sets them) N times, each
with fresh augmentation draws, twice per draw: shared (every view of a frame gets that draw) and
per view (the online s_t keeps it; the target's sequence, the bootstrap's target pass and the
online pass that picks its action each get one of their own). It prints, per loss term and for
the gradient and the Adam step (whole and per parameter group), the paired relative change
between the two, against the change that redrawing the shared augmentation alone makes, and the
change of the mean over the N draws with its standard error (for the gradient and the step: the
norm of the mean change, beside the norm that the draws' noise alone would give it).

``--case finetune_nature``: the same for a finetuning update (`finetune_step`), where the views
that per-view draws decorrelate are the bootstrap state's two passes: the target's value and the
online network's double-Q choice, which sgi-lab computes from one encoding.

Run from the repository root (project venv; 300 draws of ``pretrain_nature``: ~2 min on 2 cores):
``.venv/bin/python benchmarks/reference/augment_views.py --draws 32``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # the fixture test's setup: one definition of the case

import test_reference as fixture  # noqa: E402

from sgi_lab.augment.frames import augmented_frames, prepared_frames  # noqa: E402
from sgi_lab.augment.ops import jitter_factor  # noqa: E402
from sgi_lab.nets import SGIModel  # noqa: E402
from sgi_lab.nets.model import parameter_group  # noqa: E402
from sgi_lab.objectives import goals_from_draws  # noqa: E402
from sgi_lab.train import pretrain_step as step_module  # noqa: E402

CASES = ("pretrain_nature", "pretrain_resnet", "pretrain_resnet_l", "finetune_nature")
PRETRAIN_TERMS = ("losses/spr", "losses/goal", "losses/inverse", "losses/total")
FINETUNE_TERMS = ("losses/rl", "losses/spr", "losses/total")


def prepared(pixels: torch.Tensor) -> torch.Tensor:
    """Augmented float pixels as the step's encoders take them (scaled, float32)."""
    return prepared_frames(pixels, None, False, False)


class Views:
    """Replaces the inputs of the step's encoder calls, in the order the step makes them:
    target: the sequence, the goal, the bootstrap state; online: s_t, the bootstrap picker.
    ``None`` keeps the step's own input (the shared draw)."""

    def __init__(self, model: SGIModel, target: SGIModel, subs: dict[str, list]) -> None:
        for net, key in ((model, "online"), (target, "target")):
            net.encode = self.wrap(net.encode, list(subs[key]), key)

    @staticmethod
    def wrap(encode, queue: list, key: str):
        def substituted(obs: torch.Tensor, prepared: bool = False) -> torch.Tensor:
            if not queue:
                raise AssertionError(f"{key} encoded more views than expected")
            sub = queue.pop(0)
            if sub is not None:
                assert sub.shape == obs.shape, (key, sub.shape, obs.shape)
                obs = sub
            return encode(obs, prepared)

        return substituted


def one_step(
    name: str, x: dict, draws: dict, per_view: bool
) -> tuple[dict, torch.Tensor, torch.Tensor, list]:
    """sgi-lab's step with these augmentation draws: losses, flat gradient, flat Adam step,
    the parameters' names and sizes."""
    case = fixture.CASES[name]
    config = fixture.reference_pretrain_config(case)
    args = case["model_args"]
    sizes = {k: args[k] for k in ("image_size", "hidden_size", "width_scale")}
    state = step_module.build_state(config, args["num_actions"], torch.device("cpu"), **sizes)
    state.model.load_state_dict(
        {k[7:]: torch.from_numpy(v) for k, v in x.items() if k[:7] == "online/"}
    )
    state.target.load_state_dict(
        {k[7:]: torch.from_numpy(v) for k, v in x.items() if k[:7] == "target/"}
    )
    before = torch.cat([p.detach().flatten().clone() for p in state.model.parameters()])
    frames = x["frames"]
    n = config.n_step
    obs = fixture.augmented(frames, draws["corners"][0], draws["jitter"][0])
    subs = {"online": [None, None], "target": [None, None, None]}
    if per_view:
        seq = fixture.augmented(frames, draws["corners"][1], draws["jitter"][1])
        boot = fixture.augmented(frames[:, n], draws["corners"][2][:, n], draws["jitter"][2][:, n])
        pick = fixture.augmented(frames[:, n], draws["corners"][3][:, n], draws["jitter"][3][:, n])
        subs = {"online": [None, prepared(pick)], "target": [prepared(seq), None, prepared(boot)]}
    Views(state.model, state.target, subs)
    goal_draws = {
        "noise": torch.from_numpy(x["goal_noise"]),
        "alpha": torch.from_numpy(x["goal_alpha"]),
        "swap": torch.from_numpy(x["goal_swap"]),
        "offset": torch.from_numpy(x["goal_swap_offset"]).long(),
    }

    def fed_goals(latents, generator, alpha_max, swap_prob, noise_scale):
        # the fixture's goal draws (noise, mixing weights, swaps), as the test feeds them
        return goals_from_draws(latents, goal_draws, alpha_max, swap_prob, noise_scale)[0]

    step_module.sample_goals = fed_goals
    batch = step_module.PretrainBatch(
        obs=obs,
        actions=torch.from_numpy(x["actions"]).long(),
        valid=torch.ones(x["actions"].shape, dtype=torch.bool),
        goal_obs=fixture.augmented(x["goal_frames"], draws["goal_corners"], draws["goal_jitter"]),
    )
    logs = step_module.train_step(config, state, batch)
    grad = torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p)).flatten()
            for p in state.model.parameters()
        ]
    )
    after = torch.cat([p.detach().flatten() for p in state.model.parameters()])
    names = [(k, p.numel()) for k, p in state.model.named_parameters()]
    return {k: float(logs[k].detach()) for k in PRETRAIN_TERMS}, grad, after - before, names


def finetune_step(
    name: str, x: dict, draws: dict, per_view: bool
) -> tuple[dict, torch.Tensor, torch.Tensor, list]:
    """sgi-lab's finetuning update (the fixture's weights, batch and noise) with these draws of
    s_t..s_{t+K} and of the bootstrap state s_{t+n}. Per view, the online network's pass that
    picks the bootstrap action (double Q) encodes a view of s_{t+n} of its own, where sgi-lab
    encodes s_{t+n} once for it and the target's value pass. (Nature: SPR's target uses
    s_{t+1..t+K}, which no other view sees, and n = 10 > K: the bootstrap is the one view that
    per-view draws can decorrelate.)"""
    x = {
        **x,
        "corners": draws["corners"][0],
        "jitter": draws["jitter"][0],
        "boot_corners": draws["boot_corners"][0],
        "boot_jitter": draws["boot_jitter"][0],
    }
    original_q_logits = SGIModel.q_logits
    calls = []

    def q_logits(self, z, action_mask=None):
        # the update's order: the target's value pass at s_{t+n}, the online pass that picks
        # its action, then the loss's pass at s_t
        calls.append(len(calls))
        if per_view and len(calls) == 2:
            boot = torch.from_numpy(x["boot_frames"])[None]
            corners = torch.from_numpy(draws["boot_corners"][1])[None]
            factor = jitter_factor(torch.from_numpy(draws["boot_jitter"][1]))[None]
            view = augmented_frames(
                boot, corners, factor, channels_last=False, dtype=torch.float32
            )[0]
            z = self.encode(view, prepared=True)
        return original_q_logits(self, z, action_mask)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fixture, "load", lambda case, kind: x if kind == "inputs" else None)
        mp.setattr(SGIModel, "q_logits", q_logits)
        run = fixture.run_finetune_update(name, mp)
    assert len(calls) == 3, calls
    names = list(run.before)
    # parameters only: the noise buffers (eps_in, eps_out) are set to the update's noise
    params = [k for k in names if k in run.after and not k.endswith(("eps_in", "eps_out"))]
    params = [k for k in params if torch.is_floating_point(run.before[k])]
    grad = torch.cat([run.grads.get(k, torch.zeros_like(run.before[k])).flatten() for k in params])
    step = torch.cat([(run.after[k] - run.before[k]).flatten() for k in params])
    losses = {k: float(run.stats[k][0]) for k in FINETUNE_TERMS}
    return losses, grad, step, [(k, run.before[k].numel()) for k in params]


def draw(x: dict, gen: torch.Generator) -> dict:
    """Four independent (corners, jitter) draws of the sequence, one for the goal."""
    B, T = x["actions"].shape
    return {
        "corners": [torch.randint(0, 9, (B, T, 2), generator=gen).numpy() for _ in range(4)],
        "jitter": [torch.randn(B, T, generator=gen).numpy() for _ in range(4)],
        "goal_corners": torch.randint(0, 9, (B, 2), generator=gen).numpy(),
        "goal_jitter": torch.randn(B, generator=gen).numpy(),
        "boot_corners": [torch.randint(0, 9, (B, 2), generator=gen).numpy() for _ in range(2)],
        "boot_jitter": [torch.randn(B, generator=gen).numpy() for _ in range(2)],
    }


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--draws", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--case", choices=CASES, default=CASES[0])
    opts = p.parse_args()
    torch.set_num_threads(1)
    x = fixture.with_shared_target(fixture.load(opts.case, "inputs"))
    step = finetune_step if opts.case.startswith("finetune") else one_step
    if step is one_step:
        # Nature has no batch norm: the step reuses the sequence's latent of s_{t+n} for the
        # bootstrap; encoded in a pass of its own (as for batch-norm encoders, the same
        # numbers) it can take a view of its own.
        SGIModel.encoder_has_batch_norm = property(lambda self: True)
    gen = torch.Generator().manual_seed(opts.seed)
    rows = {"shared": [], "per_view": [], "redrawn": []}
    for _ in range(opts.draws):
        d, other = draw(x, gen), draw(x, gen)
        rows["shared"].append(step(opts.case, x, d, per_view=False))
        rows["per_view"].append(step(opts.case, x, d, per_view=True))
        rows["redrawn"].append(step(opts.case, x, other, per_view=False))
    report(opts.case, rows)


def report(name: str, rows: dict) -> None:
    print(f"{name}, {len(rows['shared'])} draws; paired relative change (mean over draws)")
    print(
        f"{'':24s} {'per view vs shared':>20s} {'redrawn shared':>16s} {'mean change +- se':>22s}"
    )
    for term in rows["shared"][0][0]:
        sh = np.array([r[0][term] for r in rows["shared"]])
        pv = np.array([r[0][term] for r in rows["per_view"]])
        rd = np.array([r[0][term] for r in rows["redrawn"]])
        diff = pv - sh
        print(
            f"{term:24s} {np.mean(np.abs(diff) / np.abs(sh)):20.2e} "
            f"{np.mean(np.abs(rd - sh) / np.abs(sh)):16.2e} "
            f"{diff.mean() / abs(sh.mean()):+11.2e} +- {diff.std(ddof=1) / np.sqrt(len(diff)) / abs(sh.mean()):.1e}"
        )
    names = rows["shared"][0][3]
    part = np.repeat([parameter_group(n) for n, _ in names], [size for _, size in names])
    for label, j in (("gradient", 1), ("Adam step", 2)):
        for group in ["all", *dict.fromkeys(part)]:
            keep = torch.from_numpy(part == group) if group != "all" else slice(None)
            sh = torch.stack([r[j][keep] for r in rows["shared"]])
            pv = torch.stack([r[j][keep] for r in rows["per_view"]])
            rd = torch.stack([r[j][keep] for r in rows["redrawn"]])
            if float(sh.norm()) == 0:
                continue
            paired = np.mean([relative(a, b) for a, b in zip(pv, sh, strict=True)])
            redraw = np.mean([relative(a, b) for a, b in zip(rd, sh, strict=True)])
            diff = pv - sh
            mean_change = float(diff.mean(0).norm() / sh.mean(0).norm())
            se = float((diff.var(0, unbiased=True).sum() / len(diff)).sqrt() / sh.mean(0).norm())
            name = f"{label} ({group})"
            print(f"{name:24s} {paired:20.2e} {redraw:16.2e} {mean_change:11.2e} (noise {se:.1e})")


if __name__ == "__main__":
    main()
