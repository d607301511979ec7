"""What index.html says of each demo stage: its main results in words (`stage_summary`) and
what it measured at the demo's size (`STAGE_NOTES`)."""

from __future__ import annotations

from typing import Any

from sgi_lab.launch import demo_minatar
from sgi_lab.viz import training
from sgi_lab.viz.tables import format_number

__all__ = ["MINATAR", "STAGE_NOTES", "stage_summary"]

MINATAR = "minatar"  # the stage that runs no notebook (sgi_lab.launch.demo_minatar)


STAGE_NOTES: dict[str, str] = {
    "datasets": (
        "A few thousand steps of a uniform random policy on Pong (each action held for a "
        "Geometric(1/3) number of steps, as the paper's Random data): a random player loses "
        "nearly every point, so the returns sit near -21 and the frames stay close to the "
        "start of a rally. The second store, collected with another seed, shows how much two "
        "random stores of the same game differ."
    ),
    "pretrain": (
        "200 gradient steps at batch 32 (6,400 samples), against the paper's 234,375 at batch "
        "256 (60M samples): the losses start to fall, but the encoder is far from trained. A "
        "mean cosine similarity near 1 means its latents are still nearly the same for every "
        "state; the paper's diverse representations (its Fig. 4) need the full budget."
    ),
    "representations": (
        "The states of the store mapped by the pretrained and by a random encoder, laid out "
        "with UMAP and coloured by action and episode. At this size little structure is "
        "expected from either; with a full pretraining run, states of similar game situations "
        "gather."
    ),
    "goal_rewards": (
        "The goal-conditioned RL objective on one trajectory: the reward is positive where the "
        "next state is nearer the goal in latent space. With an encoder this young the "
        "similarities are nearly flat; the figure shows what the objective computes, not a "
        "trained signal."
    ),
    "finetune": (
        "1,500 agent steps (the paper: 100,000), learning from step 700: about 800 updates. "
        "Pong needs tens of thousands of steps before an agent returns the ball, so the score "
        "stays at the random level (-21, a human-normalized score near 0): this stage shows "
        "that the loop, the evaluation and the comparison work, not that the agent learns "
        "(tests/train/test_learning.py shows that the learner learns)."
    ),
    MINATAR: (
        "The comparison the paper is about, at laptop size: on MinAtar Breakout (10x10 grids; "
        "a from-scratch agent measurably learns there within this budget), an encoder "
        f"pretrained with SGI for {demo_minatar.DEMO_BUDGET.pretrain['steps']} steps at batch 256 "
        f"on {demo_minatar.DEMO_BUDGET.collect_steps:,} Random steps (the params file: 20,000 "
        "steps) is finetuned twice, with the paper's reduced learning rates and naively (every "
        "layer at the full rate), beside a fresh encoder: one population of three agents, each "
        "at its own learning rates, with Rainbow + SPR for "
        f"{demo_minatar.DEMO_BUDGET.finetune['steps']:,} agent steps, one update a step from "
        f"step {demo_minatar.DEMO_BUDGET.finetune['learning_starts']:,} (the paper: 100,000 "
        "steps, 2 updates a step), then play "
        f"{demo_minatar.DEMO_BUDGET.finetune['eval_episodes']} evaluation episodes. The curves "
        "are the mean of the last 20 training episodes' returns (with exploration); the scores "
        "are the evaluation's, on the MinAtar score (0: uniform random, 1: the MinAtar paper's "
        "DQN). One seed per agent: a difference here is not evidence. Read a gap with the "
        "sizes in mind: the pretrained encoder has had a few hundred steps (the study's: "
        "2,000) and, under the reduced-lr scheme, finetunes at 0.01x the learning rate, so "
        "that agent keeps a barely trained, nearly fixed encoder while the naive and scratch "
        "agents learn theirs at the full rate (two agents measured twice on a 2-core Intel "
        "Xeon: reduced-lr SGI 0.50 both times, scratch 2.87 and 2.17, random 0.42; with the "
        "naive agent added: reduced-lr 0.50, naive 2.67, scratch 2.27; at 10k "
        "steps and 3 seeds the study found naive SGI above scratch on Breakout, "
        "docs/results/minatar.md)."
    ),
    "ablations": (
        "This one run beside the paper's rows: one game, one seed and a couple of evaluation "
        "episodes, against the paper's 26 games, 10 seeds and 100 episodes, so the paper's "
        "numbers are context here, not a comparison."
    ),
}
"""What each demo stage measured and what it means at the demo's size (index.html)."""


def _short(value: Any) -> str:

    return format_number(value, 4)


def stage_summary(notebook: str, results: dict[str, Any]) -> list[str]:
    """A stage's main results in words for index.html (a few lines; never raw keys)."""

    lines: list[str] = []
    if notebook == "datasets":
        for label, store in (results.get("stores") or {}).items():
            lines.append(
                f"{label}: {_short(store.get('transitions'))} steps, "
                f"{_short(store.get('episodes'))} episodes, mean return "
                f"{_short(store.get('mean_episode_return'))}"
            )
        for label, cells in (results.get("cells_per_1k") or {}).items():
            lines.append(f"coverage of {label}: {_short(cells)} distinct cells per 1,000 steps")
    elif notebook == "finetune":
        if "eval_mean" in results:
            cap = results.get("eval_max_frames")
            # a capped game scores what it had when cut: said beside the score, every time
            capped = (
                f" (capped at {int(cap) // 4:,} steps: not a result)"
                if cap is not None and int(cap) < 108_000
                else ""
            )
            lines.append(
                f"evaluation{capped}: mean return {_short(results['eval_mean'])} over "
                f"{_short(results.get('eval_episodes'))} episode(s), human-normalized score "
                f"{_short(results.get('hns'))}"
            )
        if results.get("paper_config"):
            lines.append(
                f"paper ({results['paper_config']}): mean {_short(results.get('paper_mean'))}, "
                f"HNS {_short(results.get('paper_hns'))}"
                + ("" if results.get("comparable_with_paper") else " (not comparable)")
            )
    elif notebook == MINATAR:
        lines += demo_minatar.summary_lines(results)
    elif notebook == "ablations":
        lines.append(
            f"{_short(results.get('runs'))} run(s) of {', '.join(results.get('methods') or [])}"
            f" on {', '.join(results.get('games') or [])}"
        )
    else:
        cosine = results.get("cosine_similarity")
        if isinstance(cosine, dict):
            lines.append(
                "mean cosine similarity of latents: "
                + ", ".join(f"{k} {_short(v)}" for k, v in cosine.items())
            )
        for key, value in results.items():
            if key in ("run folder", "model", "config", "cosine_similarity", "encoders"):
                continue
            if isinstance(value, (int, float, str)) and not isinstance(value, bool):
                name = training.metric_title(key) if "/" in key else key.replace("_", " ")
                lines.append(f"{name}: {_short(value)}")
    return lines if notebook == MINATAR else lines[:6]
