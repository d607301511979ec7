"""``sgi-lab collect agent``: a store played by a trained finetuning agent (a probe store whose
states vary where Random play's do not, as in MinAtar Breakout).

    sgi-lab collect agent --agent RUN_OR_CHECKPOINT --game minatar/breakout --steps 30000 \\
        --seed 1000 --out outputs/stores/minatar-breakout-agent-probe

The agent acts as the finetuning evaluation does, epsilon-greedy with ``--eps`` (default 0.05);
the store records the game's state (MinAtar) or RAM (Atari) as a Random store does, and its
manifest the policy (`sgi_lab.train.agent_policy`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

__all__ = ["add_arguments", "collect", "refuse_agent_options"]

DEFAULT_HOLD_P = 1 / 3
"""``--hold-p``'s default (the Random policy's option, refused with ``agent`` when changed)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``agent`` to the ``collect`` parser's policies, and its options."""
    for action in parser._actions:  # the policy positional, declared by the CLI's builder
        if action.dest == "policy" and action.choices is not None:
            action.choices = [*action.choices, "agent"]
            action.help = f"{action.help}; agent: a trained finetuning agent (--agent RUN)"
    parser.add_argument(
        "--agent",
        type=Path,
        default=None,
        metavar="RUN_OR_CHECKPOINT",
        help="agent: the finetuning run folder (its model.pt, else its newest checkpoint) or "
        "a model/checkpoint file of one, whose policy plays",
    )
    parser.add_argument(
        "--eps",
        type=float,
        default=None,
        help="agent: probability of a random action (default 0.05, so that states vary; the "
        "evaluation's is 0.001)",
    )


def refuse_agent_options(args: argparse.Namespace) -> None:
    """``--agent`` and ``--eps`` belong to ``collect agent``: refused, never ignored, elsewhere."""
    for flag in ("agent", "eps"):
        if getattr(args, flag, None) is not None:
            raise ValueError(f"--{flag}: an option of `collect agent`, not `collect {args.policy}`")


def collect(args: argparse.Namespace) -> int:
    """``sgi-lab collect agent``: play ``--agent``'s policy into the store ``--out``."""
    if args.agent is None:
        raise ValueError("collect agent: give --agent RUN_OR_CHECKPOINT (a finetuning run)")
    if abs(args.hold_p - DEFAULT_HOLD_P) > 1e-12:
        raise ValueError("--hold-p: the Random policy's hold; `collect agent` acts every step")

    # lazy: the agent's module imports torch, which `--help` and the parser must not pay for
    from sgi_lab.train.agent_policy import DEFAULT_POLICY_EPS, collect_with_agent

    store = collect_with_agent(
        args.agent,
        args.game,
        args.steps,
        args.out,
        eps=DEFAULT_POLICY_EPS if args.eps is None else args.eps,
        seed=args.seed,
        # dopamine is the option's default: the run's own env unless another was asked for
        env_protocol_name=None if args.env_protocol == "dopamine" else args.env_protocol,
        full_action_space=args.full_action_space,
        terminal_on_life_loss=args.terminal_on_life_loss,
        chunk_size=args.chunk_size,
        overwrite=args.overwrite,
        progress=not args.no_progress,
    )
    print(json.dumps({**store.summary(), "policy": store.manifest.params["policy"]}, indent=2))
    return 0
