"""The evaluation protocol behind a score: how many episodes, and the cap on each one's length.

The paper (as SPR and DER) scores an agent by 100 evaluation episodes of whole games, an episode
cut at 108,000 raw frames (27,000 agent steps, 30 minutes of play). A smoke run that plays 2
episodes of at most 500 steps measures something else: its score is shown with its protocol and
its comparison with the paper is labelled not comparable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "PAPER_PROTOCOL",
    "EvalProtocol",
    "comparability_note",
    "protocol_of",
]

FRAME_SKIP = 4
"""Raw frames per agent step (eval.json's ``max_frames`` counts raw frames)."""


@dataclass(frozen=True)
class EvalProtocol:
    """How a score was measured.

    Attributes:
        episodes: evaluation episodes averaged (None: not recorded).
        max_frames: raw-frame cap of an episode (None: no cap, or not recorded).
    """

    episodes: int | None
    max_frames: int | None

    @property
    def label(self) -> str:
        """``"100 episodes, cap 108,000 frames"``, ``"2 episodes, cap 2,000 frames (500 steps)"``."""
        episodes = "? episodes" if self.episodes is None else _plural(self.episodes, "episode")
        if self.max_frames is None:
            return f"{episodes}, no frame cap"
        steps = self.max_frames // FRAME_SKIP
        return f"{episodes}, cap {self.max_frames:,} frames ({steps:,} steps)"

    @property
    def comparable(self) -> bool:
        """Whether it is the paper's protocol (`PAPER_PROTOCOL`)."""
        return self == PAPER_PROTOCOL

    def to_dict(self) -> dict[str, Any]:
        """``{"episodes", "max_frames", "protocol" (the label), "comparable_with_paper"}``."""
        return {
            "episodes": self.episodes,
            "max_frames": self.max_frames,
            "protocol": self.label,
            "comparable_with_paper": self.comparable,
        }


PAPER_PROTOCOL = EvalProtocol(episodes=100, max_frames=108_000)
"""The paper's: 100 episodes at the end of training, each capped at 108,000 frames."""


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'s' * (n != 1)}"


def protocol_of(
    evaluations: Mapping[str, Any] | Iterable[Mapping[str, Any]] | None,
) -> EvalProtocol | None:
    """The protocol of one evaluation (an ``eval.json`` mapping) or of several.

    Several evaluations give their common protocol; when they differ, the fewest episodes and
    the smallest cap (the weakest of them decides what the comparison is worth). None when
    nothing is given or nothing records its episodes.
    """
    if evaluations is None:
        return None
    if isinstance(evaluations, Mapping):
        evaluations = [evaluations]
    found = [
        (e.get("episodes", len(e.get("scores") or []) or None), e.get("max_frames"))
        for e in evaluations
        if e
    ]
    found = [(ep, mf) for ep, mf in found if ep is not None]
    if not found:
        return None
    episodes = min(int(ep) for ep, _ in found)
    caps = [int(mf) for _, mf in found if mf is not None]
    # A cap of None means whole games; any capped run makes the set capped.
    max_frames = min(caps) if caps else None
    return EvalProtocol(episodes, max_frames)


def comparability_note(protocol: EvalProtocol | None) -> str:
    """A line for a title or table beside the paper: the protocol, and whether it is the
    paper's (else "not comparable")."""
    if protocol is None:
        return (
            f"evaluation protocol unknown: not comparable with the paper ({PAPER_PROTOCOL.label})"
        )
    if protocol.comparable:
        return f"{protocol.label} (the paper's protocol)"
    return f"{protocol.label}: not comparable with the paper ({PAPER_PROTOCOL.label})"
