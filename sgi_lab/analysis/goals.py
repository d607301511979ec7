"""Goal-reward analysis along a trajectory: what SGI's goal-conditioned RL sees.

Pick a trajectory (rows of one episode) and a goal — the latent of a future state of the same
episode, of another episode's state, or pure noise, mixed with Gaussian noise of weight alpha as
in training (paper Sec. 2; `sgi_lab.objectives.goal_rl.sample_goals`). `goal_analysis` then gives,
step by step, the similarity s(z_t, g), the potential-based reward r_t = scale * (s(z_{t+1}, g) -
s(z_t, g)), and the goal-conditioned Q values; `nearest_to_goal` finds the stored states whose
latents are closest to the goal. `GoalExplorer` wraps all three in ipywidgets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from sgi_lab.analysis.representations import encode_rows, row_table, sample_rows
from sgi_lab.data import TransitionStore
from sgi_lab.nets import SGIModel, renormalize
from sgi_lab.objectives.goal_rl import goal_reward, goal_similarity
from sgi_lab.viz.goal_rewards import collapse_note, goal_trajectory_figure, nearest_frames_figure
from sgi_lab.viz.live import LiveFigure

__all__ = [
    "GOAL_KINDS",
    "Goal",
    "GoalExplorer",
    "collapse_warning",
    "goal_analysis",
    "goal_q_values",
    "goal_summary",
    "make_goal",
    "nearest_to_goal",
    "trajectory_rows",
]

GOAL_KINDS = ("future", "other_episode", "noise")
"""``future``: a state ``offset`` steps after the trajectory's start, same episode;
``other_episode``: a state of another episode; ``noise``: a random Gaussian latent."""


@dataclass(frozen=True)
class Goal:
    """A goal latent and where it came from.

    Attributes:
        latent: (D,) goal, min-max renormalized like every latent.
        kind: one of `GOAL_KINDS`.
        row: the store row the goal state came from (None for ``noise``).
        alpha: weight of the Gaussian noise mixed in.
    """

    latent: torch.Tensor
    kind: str
    row: int | None
    alpha: float

    @property
    def label(self) -> str:
        source = "noise" if self.row is None else f"row {self.row}"
        return f"{self.kind} goal ({source}, alpha={self.alpha:.2f})"


def trajectory_rows(
    store: TransitionStore, episode: int = 0, start: int = 0, length: int | None = None
) -> np.ndarray:
    """Rows of ``episode`` from step ``start`` on, at most ``length`` of them."""
    if not 0 <= episode < store.num_episodes:
        raise IndexError(f"episode {episode} out of range (the store has {store.num_episodes})")
    first, last = int(store.episode_starts[episode]), int(store.episode_ends[episode])
    begin = min(first + max(0, int(start)), last)
    end = last + 1 if length is None else min(last + 1, begin + int(length))
    return np.arange(begin, end)


def goal_row(
    store: TransitionStore, rows: np.ndarray, kind: str, offset: int = 50, seed: int = 0
) -> int | None:
    """The store row a goal of ``kind`` comes from, for trajectory ``rows`` (None for noise).

    ``future``: ``offset`` steps after the trajectory's first row, clipped to its episode's end.
    ``other_episode``: a seeded random row of a different episode.
    """
    if kind not in GOAL_KINDS:
        raise ValueError(f"goal kind must be one of {GOAL_KINDS}, got {kind!r}")
    if kind == "noise":
        return None
    first = int(rows[0])
    if kind == "future":
        return int(min(first + max(0, int(offset)), store.row_episode_end[first]))
    episode = int(store.episode_index[first])
    others = [e for e in range(store.num_episodes) if e != episode]
    if not others:
        raise ValueError("an 'other_episode' goal needs a store with more than one episode")
    rng = np.random.default_rng(seed)
    other = int(rng.choice(others))
    return int(rng.integers(store.episode_starts[other], store.episode_ends[other] + 1))


@torch.no_grad()
def make_goal(
    model: SGIModel,
    store: TransitionStore,
    rows: np.ndarray,
    kind: str = "future",
    offset: int = 50,
    alpha: float = 0.0,
    seed: int = 0,
) -> Goal:
    """A goal for trajectory ``rows``, mixed with noise as in training: g <- alpha n + (1-alpha) g.

    n is a unit-norm Gaussian vector; the result is min-max renormalized (`sample_goals` with a
    fixed alpha and no swap). ``kind="noise"`` starts from a Gaussian latent instead of a state.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    gen = torch.Generator().manual_seed(int(seed))
    source = goal_row(store, rows, kind, offset, seed)
    if source is None:
        base = torch.randn(model.latent_size, generator=gen)
    else:
        base = torch.from_numpy(encode_rows(model, store, np.array([source]), device="cpu")[0])
    noise = F.normalize(torch.randn(model.latent_size, generator=gen), dim=-1)
    latent = renormalize(alpha * noise + (1.0 - alpha) * base.float(), start_dim=-1)
    return Goal(latent, kind, source, float(alpha))


@torch.no_grad()
def goal_q_values(model: SGIModel, latents: torch.Tensor, goal: torch.Tensor) -> np.ndarray:
    """Expected goal-conditioned returns: (N, C, 7, 7) latents, (D,) goal -> (N, A)."""
    if not hasattr(model, "goal_head"):
        raise ValueError("this model has no goal-conditioned head (pretrained with goal_weight 0)")
    goals = goal.reshape(1, -1).expand(latents.shape[0], -1)
    probs = F.softmax(model.goal_q_logits(latents, goals), dim=-1)
    return (probs * model.support).sum(-1).cpu().numpy()


def _latents(model: SGIModel, store: TransitionStore, rows: np.ndarray) -> torch.Tensor:
    flat = torch.from_numpy(encode_rows(model, store, rows, device="cpu"))
    return flat.reshape(len(rows), *model.latent_shape)


def goal_analysis(
    model: SGIModel,
    store: TransitionStore,
    rows: np.ndarray,
    goal: Goal,
    reward_scale: float = 10.0,
    distance_scale: float = 1.0,
    latents: torch.Tensor | None = None,
) -> pd.DataFrame:
    """Step by step along a trajectory: similarity to the goal, goal reward and goal-Q values.

    Args:
        model: an SGIModel in eval mode (pretrained or random).
        store: the dataset holding ``rows``.
        rows: consecutive rows of one episode (`trajectory_rows`).
        goal: from `make_goal`.
        reward_scale: the reward's scale (10 in pretraining).
        distance_scale: c in s = exp(2c(cos - 1)); 1 as in the paper.
        latents: the (N, C, 7, 7) latents of ``rows`` when already computed.

    Returns:
        The `row_table` columns plus ``cosine`` (cos(z_t, g)) and ``similarity``;
        ``goal_reward`` for t -> t+1 (NaN on the last row); ``q_0..q_{A-1}``, ``q_max`` and ``greedy_action`` when the model has a goal
        head. ``df.attrs`` holds ``goal_label``, ``goal_row``, ``goal_kind`` and ``game``.
    """
    rows = np.asarray(rows, dtype=np.int64)
    z = _latents(model, store, rows) if latents is None else latents
    flat = z.flatten(1)
    g = goal.latent.reshape(1, -1)
    df = row_table(store, rows)
    unit = F.normalize(flat.float(), dim=-1, eps=1e-3)  # as goal_similarity normalizes
    df["cosine"] = (unit @ F.normalize(g.float(), dim=-1, eps=1e-3).T).squeeze(1).numpy()
    df["similarity"] = goal_similarity(flat, g, distance_scale).numpy()
    rewards = goal_reward(flat[:-1], flat[1:], g, reward_scale, distance_scale).numpy()
    df["goal_reward"] = np.append(rewards, np.nan)
    if hasattr(model, "goal_head"):
        q = goal_q_values(model, z, goal.latent)
        for a in range(q.shape[1]):
            df[f"q_{a}"] = q[:, a]
        df["q_max"] = q.max(axis=1)
        df["greedy_action"] = q.argmax(axis=1)
    df.attrs["goal_label"] = goal.label
    df.attrs["goal_row"] = goal.row
    df.attrs["goal_kind"] = goal.kind
    df.attrs["game"] = store.game
    return df


def nearest_to_goal(
    model: SGIModel,
    store: TransitionStore,
    goal: Goal,
    k: int = 8,
    rows: np.ndarray | None = None,
    latents: np.ndarray | None = None,
) -> pd.DataFrame:
    """The ``k`` stored states whose latents have the highest cosine similarity to the goal.

    Args:
        model: the encoder.
        store: the dataset searched.
        goal: from `make_goal`.
        k: how many.
        rows: the rows searched (default: every row of the store).
        latents: their (N, D) flat latents when already computed (`encode_rows`).

    Returns:
        The `row_table` columns plus ``cosine``, best first; ``attrs["searched_cosine"]``
        holds ``searched, min, median, max`` of the cosine over every row searched, the
        context that says whether "nearest" means anything (every row near 1: it does not).
    """
    rows = np.arange(len(store)) if rows is None else np.asarray(rows, dtype=np.int64)
    bank = encode_rows(model, store, rows) if latents is None else latents
    bank_t = F.normalize(torch.as_tensor(bank, dtype=torch.float32), dim=-1, eps=1e-3)
    g = F.normalize(goal.latent.float().reshape(1, -1), dim=-1, eps=1e-3)
    cos = (bank_t @ g.T).squeeze(1).numpy()
    order = np.argsort(-cos)[: int(k)]
    df = row_table(store, rows[order])
    df["cosine"] = cos[order]
    df = df.reset_index(drop=True)
    df.attrs["searched_cosine"] = {
        "searched": int(len(cos)),
        "min": float(cos.min()) if len(cos) else float("nan"),
        "median": float(np.median(cos)) if len(cos) else float("nan"),
        "max": float(cos.max()) if len(cos) else float("nan"),
    }
    return df


class GoalExplorer:
    """ipywidgets to choose a goal and see its reward, Q values and nearest frames.

    The latents of the trajectory and of a bank of stored states are computed once; changing a
    control only recomputes the goal. Every control's callback can be driven from code: set
    ``explorer.alpha.value = 0.3`` (or call :meth:`update`) and read ``explorer.analysis``,
    ``explorer.nearest`` and the figures ``explorer.trajectory_view.figure`` and
    ``explorer.frames_view.figure``.

    Args:
        model: the encoder with its goal head.
        store: the dataset.
        rows: the trajectory (`trajectory_rows`).
        kind: initial goal kind (`GOAL_KINDS`).
        offset: initial offset of a ``future`` goal.
        alpha: initial noise weight.
        seed: initial seed (noise, other-episode choice).
        bank_size: stored states searched for the nearest frames.
        k: nearest frames shown.
        action_names: labels of the actions in the Q-value plot.
    """

    def __init__(
        self,
        model: SGIModel,
        store: TransitionStore,
        rows: np.ndarray,
        kind: str = "future",
        offset: int = 50,
        alpha: float = 0.0,
        seed: int = 0,
        bank_size: int = 2_000,
        k: int = 8,
        action_names: list[str] | None = None,
    ) -> None:
        import ipywidgets as widgets

        self.model, self.store, self.rows, self.k = model, store, np.asarray(rows), k
        self.action_names = action_names
        self.latents = _latents(model, store, self.rows)
        self.bank_rows = sample_rows(store, bank_size, seed=0)
        self.bank = encode_rows(model, store, self.bank_rows)
        max_offset = int(store.row_episode_end[self.rows[0]] - self.rows[0])
        style = {"description_width": "initial"}
        self.kind = widgets.Dropdown(options=list(GOAL_KINDS), value=kind, description="goal")
        self.offset = widgets.IntSlider(
            value=min(offset, max_offset), min=0, max=max(max_offset, 1), description="offset",
            style=style, continuous_update=False,
        )  # fmt: skip
        self.alpha = widgets.FloatSlider(
            value=alpha, min=0.0, max=1.0, step=0.05, description="noise alpha",
            style=style, continuous_update=False,
        )  # fmt: skip
        self.seed = widgets.IntText(value=seed, description="seed", style=style)
        self.status = widgets.HTML()
        self.trajectory_view = LiveFigure(widget=False)
        self.frames_view = LiveFigure(widget=False)
        for control in (self.kind, self.offset, self.alpha, self.seed):
            control.observe(self._on_change, names="value")
        self.widget = widgets.VBox(
            [widgets.HBox([self.kind, self.offset, self.alpha, self.seed]), self.status]
        )
        self.update()

    def _on_change(self, _change: dict[str, Any]) -> None:
        self.update()

    def update(self) -> None:
        """Recompute the goal from the controls and redraw both figures."""
        self.offset.disabled = self.kind.value != "future"
        try:
            self.goal = make_goal(
                self.model, self.store, self.rows, self.kind.value, self.offset.value,
                self.alpha.value, self.seed.value,
            )  # fmt: skip
        except ValueError as exc:
            self.status.value = f"<b>{exc}</b>"
            return
        self.analysis = goal_analysis(
            self.model, self.store, self.rows, self.goal, latents=self.latents
        )
        self.nearest = nearest_to_goal(
            self.model, self.store, self.goal, self.k, self.bank_rows, self.bank
        )
        self.status.value = self.goal.label
        self.trajectory_view.replace(goal_trajectory_figure(self.analysis, self.action_names))
        self.frames_view.replace(nearest_frames_figure(self.store, self.nearest, self.goal))

    def _ipython_display_(self) -> None:
        from IPython.display import display

        # The figures are shown one by one (display handles, or FigureWidgets when anywidget is
        # installed) rather than inside an ipywidgets.Output, which headless runs can hang on.
        display(self.widget)
        self.trajectory_view.show()
        self.frames_view.show()


def collapse_warning(analysis: pd.DataFrame, nearest: pd.DataFrame | None = None) -> str:
    """One line on whether the goal reward means anything for this encoder: the spread of the
    cosine to the goal along the trajectory (and over the frames searched for ``nearest``), or,
    when every cosine lies within `sgi_lab.viz.goal_rewards.COLLAPSE_SPREAD` of the others, a
    warning that the encoder has collapsed."""
    note = collapse_note(analysis["cosine"], "state on the trajectory")
    stats = nearest.attrs.get("searched_cosine") if nearest is not None else None
    if not note and stats and stats.get("searched", 0) > 1:
        spread = [stats["min"], stats["max"]]
        note = collapse_note(spread, f"one of the {stats['searched']:,} frames searched")
    if note:
        return note
    cosine = analysis["cosine"]
    return (
        f"cosine to the goal along the trajectory: {cosine.min():.4f} to {cosine.max():.4f} "
        "(the encoder tells these states apart)"
    )


def goal_summary(analysis: pd.DataFrame, nearest: pd.DataFrame) -> dict[str, float]:
    """The numbers the goal-rewards notebook records for one goal.

    Args:
        analysis: `goal_analysis` rows (``goal_reward``, ``similarity``).
        nearest: `nearest_to_goal` rows, nearest first (``cosine``).

    Returns:
        ``goal_reward_sum``, ``similarity_start``, ``similarity_max``, ``positive_reward_share``
        (share of the defined rewards that are positive), ``nearest_cosine`` and, from a
        ``cosine`` column, ``cosine_spread`` (max - min of the cosine to the goal along the
        trajectory: below 1e-4, a collapsed encoder).
    """
    rewards = analysis["goal_reward"].dropna()
    return {
        "goal_reward_sum": float(analysis["goal_reward"].sum()),
        "similarity_start": float(analysis["similarity"].iloc[0]),
        "similarity_max": float(analysis["similarity"].max()),
        "positive_reward_share": float((rewards > 0).mean()),
        "nearest_cosine": float(nearest["cosine"].iloc[0]),
        **({"cosine_spread": float(np.ptp(analysis["cosine"]))} if "cosine" in analysis else {}),
    }
