"""``sgi-lab collect``'s options, each with its help (the parser builder in `cli` stays short)."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_collect_options"]


def add_collect_options(p: argparse.ArgumentParser) -> None:
    """The options ``collect random`` and ``collect exploratory`` share (the exploratory ones:
    `sgi_lab.launch.collect_exploratory.add_arguments`)."""
    p.add_argument(
        "--game",
        required=True,
        help="an Atari 100k game (pong) or a MinAtar one (minatar/breakout)",
    )
    p.add_argument("--steps", type=int, required=True, help="transitions to collect")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="environment and policy seed (another seed plays other episodes: a probe store)",
    )
    p.add_argument(
        "--out", type=Path, required=True, help="the store's folder (re-run to resume a collection)"
    )
    p.add_argument("--hold-p", type=float, default=1 / 3, help="Geometric hold parameter")
    p.add_argument("--chunk-size", type=int, default=100_000, help="rows per chunk file")
    p.add_argument(
        "--full-action-space",
        action="store_true",
        help="all 18 Atari actions instead of the game's minimal set",
    )
    p.add_argument(
        "--terminal-on-life-loss",
        action="store_true",
        help="mark a life loss terminal (DQN-Replay's convention)",
    )
    p.add_argument(
        "--env-protocol",
        choices=["dopamine", "rlpyt"],
        default="dopamine",
        help="random: the Atari env played (make_env's preprocessing, recorded in the manifest): "
        "dopamine (gymnasium's AtariPreprocessing) or rlpyt (the authors' env, "
        "docs/paper_vs_code.md rows 16-21)",
    )
    p.add_argument("--overwrite", action="store_true", help="discard an existing store there")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
