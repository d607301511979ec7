"""What an encoder makes of a dataset: latents of stored states, 2-D embeddings (UMAP), the
paper's representation-diversity measure (Fig. 4), and how far a dataset strays from its start
states.

Typical use (``notebooks/representations.ipynb``)::

    model, label = load_encoder(run_dir, store)            # or a random one when run_dir == ""
    rows = sample_rows(store, 1_000)
    emb = embedding_frame(model, store, rows, label)       # x, y, step, action, reward, episode
    viz.embedding_grid(pd.concat([emb, emb_random]))
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from sgi_lab.analysis.probe_study import (
    DEFAULT_READOUT,
    objective_summary,
    probe_curves,
    probe_folders,
    probe_frame,
    training_probe_curves,
)
from sgi_lab.analysis.probe_study import METRICS as STUDY_METRICS
from sgi_lab.analysis.probe_study import summary_table as probe_summary_table
from sgi_lab.base.files import read_jsonl
from sgi_lab.data import TransitionStore
from sgi_lab.envs.spec import ObservationSpec
from sgi_lab.nets import SGIModel
from sgi_lab.probes.encoder_probe import random_init_model
from sgi_lab.runtime.device import resolve_device
from sgi_lab.train.pretrain import load_pretrained_model
from sgi_lab.train.pretrain_step import representation_similarity
from sgi_lab.train.transfer import observation_args
from sgi_lab.viz.tables import LiveTable

__all__ = [
    "COLLAPSE_LEVEL",
    "DIVERSITY_KEY",
    "PROBE_METRICS",
    "collapse_note",
    "diversity_curves",
    "embed_2d",
    "embedding_frame",
    "encode_rows",
    "load_encoder",
    "load_encoders",
    "load_probes",
    "mean_pairwise_cosine",
    "pretraining_probe_curves",
    "probe_curve_hint",
    "probe_hint",
    "probe_sources",
    "probe_table",
    "random_model",
    "representation_diversity",
    "row_table",
    "sample_rows",
    "start_distance",
]

DIVERSITY_KEY = "charts/cosine_similarity"
"""The metrics.jsonl key under which pretraining logs the mean pairwise cosine similarity."""


# -- models -------------------------------------------------------------------------------------


def random_model(
    num_actions: int,
    encoder: str = "nature",
    seed: int = 0,
    goal_head: bool = True,
    spec: ObservationSpec | None = None,
) -> SGIModel:
    """A randomly initialized SGIModel (eval mode), built like a pretraining one, with the goal
    head by default (`sgi_lab.probes.encoder_probe.random_init_model`, the probes' random-init baseline),
    sized for observations of ``spec`` (default: Atari's 84x84 frames)."""
    sizes = observation_args(spec) if spec is not None else {}
    return random_init_model(num_actions, encoder, seed, goal_head, **sizes)


def load_encoder(
    run_dir: str | os.PathLike = "",
    store: TransitionStore | None = None,
    encoder: str = "nature",
    seed: int = 0,
    num_actions: int | None = None,
) -> tuple[SGIModel, str]:
    """The pretrained model of a run folder, or a random one when ``run_dir`` is empty.

    Args:
        run_dir: a pretraining run folder (``model.pt`` or a checkpoint), or ``""``.
        store: gives the action count of a random model.
        encoder: architecture of a random model.
        seed: initialization seed of a random model.
        num_actions: action count of a random model when no store is given.

    Returns:
        ``(model in eval mode, label)``: label ``"pretrained: <folder>"`` or ``"random init"``.
    """
    if run_dir:
        return load_pretrained_model(run_dir), f"pretrained: {Path(run_dir).name}"
    if num_actions is None:
        if store is None:
            raise ValueError("a random model needs a store or num_actions")
        num_actions = store.num_actions
    spec = store.observation_spec if store is not None else None
    return random_model(num_actions, encoder, seed, spec=spec), f"random init ({encoder})"


def load_encoders(
    pretrained: str | os.PathLike = "",
    store: TransitionStore | None = None,
    encoder: str = "nature",
    seed: int = 0,
) -> dict[str, SGIModel]:
    """``{label: model}`` to compare: the pretrained run's model first (when ``pretrained`` is
    given), then a random one of architecture ``encoder`` (see `load_encoder`)."""
    models = {}
    if pretrained:
        model, label = load_encoder(pretrained, store)
        models[label] = model
    model, label = load_encoder("", store, encoder=encoder, seed=seed)
    models[label] = model
    return models


# -- rows and latents ---------------------------------------------------------------------------


def sample_rows(
    store: TransitionStore, count: int, seed: int = 0, episodes: Sequence[int] | None = None
) -> np.ndarray:
    """``count`` distinct rows drawn uniformly (from ``episodes`` only, when given), sorted."""
    if episodes is None:
        pool = np.arange(len(store))
    else:
        pool = np.concatenate(
            [np.arange(store.episode_starts[e], store.episode_ends[e] + 1) for e in episodes]
        )
    rng = np.random.default_rng(seed)
    take = min(int(count), len(pool))
    return np.sort(rng.choice(pool, size=take, replace=False))


def row_table(store: TransitionStore, rows: np.ndarray) -> pd.DataFrame:
    """Per row: ``row, episode, step`` (steps since its episode's start), ``action, reward``."""
    rows = np.asarray(rows, dtype=np.int64)
    return pd.DataFrame(
        {
            "row": rows,
            "episode": store.episode_index[rows],
            "step": rows - store.row_episode_start[rows],
            "action": store.actions[rows],
            "reward": store.rewards[rows],
        }
    )


@torch.no_grad()
def encode_rows(
    model: SGIModel,
    store: TransitionStore,
    rows: np.ndarray,
    projected: bool = False,
    batch_size: int = 256,
    device: str = "auto",
) -> np.ndarray:
    """Latents of the states at ``rows``: (N, C*7*7) renormalized encoder outputs, or the SPR
    projections (N, P) with ``projected=True``. Frame stacks never cross episode starts."""
    rows = np.asarray(rows, dtype=np.int64)
    dev = resolve_device(device)
    model = model.to(dev).eval()
    out = []
    for i in range(0, len(rows), batch_size):
        obs = torch.from_numpy(store.stack(rows[i : i + batch_size])).to(dev)
        z = model.encode(obs)
        y = model.project(z) if projected else z.flatten(1)
        out.append(y.float().cpu().numpy())
    if not out:
        return np.zeros((0, model.projection_size if projected else model.latent_size), np.float32)
    return np.concatenate(out)


def embed_2d(
    latents: np.ndarray,
    method: str = "umap",
    n_neighbors: int = 15,
    min_dist: float = 0.1,
    seed: int = 0,
) -> np.ndarray:
    """(N, D) latents -> (N, 2) coordinates by UMAP (cosine metric) or PCA.

    UMAP's neighbourhood is clipped to N - 1 so small samples work; with fewer than 4 points
    PCA is used whatever ``method`` says.
    """
    x = np.asarray(latents, dtype=np.float32)
    if method not in ("umap", "pca"):
        raise ValueError(f"method must be 'umap' or 'pca', got {method!r}")
    if method == "umap" and len(x) >= 4:
        import warnings

        import umap

        # numba's OpenMP layer sets the process's OpenMP thread count (torch's too) to every
        # core when it starts: a process kept to one torch thread (a test worker, a task
        # beside others) would thrash on two from then on; give torch its count back
        threads = torch.get_num_threads()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # n_jobs overridden by random_state, etc.
                reducer = umap.UMAP(
                    n_neighbors=max(2, min(n_neighbors, len(x) - 1)),
                    min_dist=min_dist,
                    metric="cosine",
                    random_state=seed,
                    init="random" if len(x) < 20 else "spectral",
                )
                return np.asarray(reducer.fit_transform(x), dtype=np.float32)
        finally:
            torch.set_num_threads(threads)
    centered = x - x.mean(axis=0, keepdims=True)
    if len(x) < 2:
        return np.zeros((len(x), 2), np.float32)
    _, _, vt = np.linalg.svd(centered, full_matrices=False)
    coords = centered @ vt[:2].T
    if coords.shape[1] < 2:
        coords = np.pad(coords, ((0, 0), (0, 2 - coords.shape[1])))
    return coords.astype(np.float32)


def embedding_frame(
    model: SGIModel,
    store: TransitionStore,
    rows: np.ndarray,
    label: str,
    method: str = "umap",
    projected: bool = False,
    seed: int = 0,
    **kwargs: Any,
) -> pd.DataFrame:
    """Encode ``rows``, embed them in 2-D and join what is known about each row.

    Returns:
        A DataFrame with ``x, y`` and the `row_table` columns, plus ``encoder`` = ``label``.
    """
    coords = embed_2d(
        encode_rows(model, store, rows, projected=projected), method, seed=seed, **kwargs
    )
    df = row_table(store, rows)
    df.insert(0, "y", coords[:, 1])
    df.insert(0, "x", coords[:, 0])
    df["encoder"] = label
    # What `sgi_lab.viz.embedding_grid` needs to name the actions.
    df.attrs.update(game=store.game, num_actions=store.num_actions)
    return df


# -- representation diversity (paper Fig. 4) ----------------------------------------------------


def mean_pairwise_cosine(latents: np.ndarray | torch.Tensor) -> float:
    """Mean cosine similarity over all pairs of distinct rows of (N, D) latents.

    1 means every state looks the same to the encoder (collapse); lower is more diverse.
    """
    return float(representation_similarity(torch.as_tensor(np.asarray(latents, np.float32))))


def representation_diversity(model: SGIModel, store: TransitionStore, rows: np.ndarray) -> float:
    """Mean pairwise cosine similarity of the projected latents y = p(f(s)) of ``rows``."""
    return mean_pairwise_cosine(encode_rows(model, store, rows, projected=True))


COLLAPSE_LEVEL = 0.99
"""Mean pairwise cosine similarity from which an encoder is called near collapse."""


def collapse_note(diversity: dict[str, float], level: float = COLLAPSE_LEVEL) -> str:
    """What the similarities of `representation_diversity` (``{label: value}``, random init's
    label starting ``random``) say about collapse, in one sentence.

    When random init is itself at ``level`` or above, an untrained encoder already maps these
    states close together (small data, a small network), so a pretrained value near 1 says
    nothing about collapse: the sentence says so rather than letting "near 1" read as collapse.
    """
    randoms = {k: v for k, v in diversity.items() if str(k).startswith("random")}
    trained = {k: v for k, v in diversity.items() if k not in randoms}
    shown = ", ".join(f"{k} {v:.4f}" for k, v in diversity.items())
    if randoms and max(randoms.values()) >= level:
        return (
            f"{shown}: random init is itself at {max(randoms.values()):.4f} (>= {level}), so on "
            "these states near 1 says nothing about collapse; compare runs' curves over "
            "pretraining, or sample more varied states"
        )
    collapsed = [k for k, v in trained.items() if v >= level]
    if collapsed:
        return f"{shown}: {', '.join(collapsed)} near 1 while random init is not: collapse"
    return f"{shown}: no collapse (1 = every state looks the same; lower is more diverse)"


def diversity_curves(
    run_dirs: Sequence[str | os.PathLike] | dict[str, str | os.PathLike], key: str = DIVERSITY_KEY
) -> pd.DataFrame:
    """The diversity curves that pretraining runs logged, in one tidy frame.

    Args:
        run_dirs: pretraining run folders, or ``{label: folder}``.
        key: the metrics.jsonl column to read.

    Returns:
        Columns ``run, step, cosine_similarity``; runs that logged nothing are left out.
    """
    named = run_dirs if isinstance(run_dirs, dict) else {Path(p).name: p for p in run_dirs}
    frames = []
    for label, folder in named.items():
        rows = [r for r in read_jsonl(Path(folder) / "metrics.jsonl") if r.get(key) is not None]
        if rows:
            frames.append(
                pd.DataFrame(
                    {
                        "run": label,
                        "step": [r["step"] for r in rows],
                        "cosine_similarity": [r[key] for r in rows],
                    }
                )
            )
    if not frames:
        return pd.DataFrame(columns=["run", "step", "cosine_similarity"])
    return pd.concat(frames, ignore_index=True)


# -- probes of the encoders ---------------------------------------------------------------------


PROBE_METRICS = (
    *STUDY_METRICS,
    "random_init",
    "random_init_r2",
    "r2_coordinate",
    "r2_counter",
    "r2_ordinal",
    "cosine_random_init",
    "cosine_step0",
)
"""What the representations notebook summarises: the probe study's metrics and, beside the
majority class, the same split's random-init encoder (its F1 and R²); MinAtar's R² per label
kind; the collapse diagnostic's cosines of a random init and of the run's step 0."""


def probe_sources(
    probe_runs: Sequence[str | os.PathLike], pretrained: str | os.PathLike = ""
) -> list[str]:
    """Where to read probe results: ``probe_runs`` when given, else the pretrained run itself
    (``sgi-lab probe RUN`` writes ``RUN/probes.json``), else nothing."""
    if probe_runs:
        return [str(p) for p in probe_runs]
    return [str(pretrained)] if pretrained else []


def load_probes(
    probe_runs: Sequence[str | os.PathLike], pretrained: str | os.PathLike = ""
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(one row per probed encoder and store, per-objective summary)`` of `probe_sources`;
    an encoder without a parameter set counts under its folder's name. Empty frames when
    nothing there has been probed."""
    # the default readout's results (a folder may hold others: objective_summary refuses a mix)
    frame = probe_frame(probe_folders(probe_sources(probe_runs, pretrained)), *DEFAULT_READOUT)
    if not frame.empty:
        named = frame["folder"].map(lambda f: Path(f).name if f else "encoder")
        frame["objective"] = frame["objective"].fillna(named)
    return frame, objective_summary(frame, PROBE_METRICS)


def probe_hint(run: str | os.PathLike = "", store: TransitionStore | None = None) -> str:
    """How to get probe results for ``run`` on ``store``, as a command naming both (the one
    that works on a run that kept no checkpoints, as the demo's: its final model)."""
    if not run:
        return "no pretraining run to probe: set pretrained (or probe_runs) to a run folder"
    data = store.path if store is not None else "STORE"
    return (
        f"no probe results for {run} yet: sgi-lab probe {run} --data {data} probes its final "
        "model (then run this section again), or set probe_runs"
    )


def probe_curve_hint(
    runs: Sequence[str | os.PathLike], store: TransitionStore | None = None
) -> str:
    """What would draw probe F1 over pretraining for ``runs`` (nothing drawn yet), naming their
    folders and ``store``: probing their checkpoints when they kept some; else (the demo keeps
    ``model.pt`` only) the final model's probe, one point, and a run pretrained with
    ``probe_every`` for a curve. Lines are joined with ``<br>`` (a figure's message)."""
    if not runs:
        return "no pretraining run to probe: set pretrained (or diversity_runs) to a run folder"
    data = store.path if store is not None else "STORE"
    kept = [Path(r) for r in runs if any((Path(r) / "checkpoints").glob("*.pt"))]
    if kept:
        return f"no checkpoint probes yet: sgi-lab probe {kept[0]}/checkpoints/*.pt --data {data}"
    run, game = Path(runs[0]), store.game if store is not None else "GAME"
    return "<br>".join(
        [
            f"{run} kept no checkpoints, so there is no curve to probe:",
            f"sgi-lab probe {run} --data {data} probes its final model (one point);",
            "for a curve, pretrain with --set probe_every=50 --set probe_data=STORE2",
            f"(STORE2 other episodes: sgi-lab collect random --game {game} --seed 1 --out ...)",
        ]
    )


def pretraining_probe_curves(runs: Sequence[str | os.PathLike]) -> pd.DataFrame:
    """Probe F1 over pretraining for each of ``runs``: its checkpoints' and final model's
    probes (`sgi_lab.analysis.probe_study.probe_curves`) when it has any, else the probes it
    made of itself as it trained (``probe_every``: `training_probe_curves`); ``run, game,
    step, overall, ...`` rows, empty when neither exists."""
    frames = []
    for run in runs:
        probed = probe_curves([run])
        frames.append(probed if not probed.empty else training_probe_curves([run]))
    keep = ["run", "game", "step", "overall"]
    # columns a source never fills (a metrics row has no split sizes) are left out, not NaN
    frames = [
        f[keep].join(f.drop(columns=keep).dropna(axis=1, how="all")) for f in frames if len(f)
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def probe_table(
    summary: pd.DataFrame, where: str = "", store: TransitionStore | None = None
) -> LiveTable:
    """The probe summary as a table (objective, then ``mean [lower, upper]`` per metric), or a
    sentence saying there are no results for ``where`` and the command that makes them
    (`probe_hint`, with ``store`` named when given)."""
    frame = probe_summary_table(summary, PROBE_METRICS)
    if not frame.empty:
        frame = frame.reset_index()
    if store is not None and where and "," not in where:
        empty = probe_hint(where, store)
    else:
        empty = (
            f"no probe results for {where or 'these encoders'} yet: "
            "sgi-lab probe PRETRAINING_RUN --data STORE (a store with RAM), or set probe_runs"
        )
    return LiveTable(frame, title="probe test F1 (95% CIs over seeds)", empty=empty)


# -- how far the data goes ----------------------------------------------------------------------


RESET_FRAME_JUMP = 10.0
"""Mean gray-level change between an episode's first two stored frames above which the first is
the emulator's reset frame: with zero no-op starts the frame stored at reset is drawn before the
game's first playing frame and shaded differently (Pong: 37 levels from every later frame,
where consecutive frames differ by about 0.1)."""


def start_distance(
    store: TransitionStore, episodes: Sequence[int] | None = None, stride: int = 1
) -> pd.DataFrame:
    """Mean absolute pixel difference between each state and its episode's first frame.

    A policy that never leaves the start screen stays near 0; one that reaches new parts of the
    game climbs. Computed on single frames (the newest of each stack), in [0, 255]. An episode
    whose first stored frame is the emulator's reset frame (zero no-op starts, `RESET_FRAME_JUMP`)
    is measured from its second frame instead, so that one odd frame does not make the whole
    episode look far from its start; ``df.attrs["reset_frame_episodes"]`` lists them.

    Args:
        store: the dataset.
        episodes: which episodes (default: all).
        stride: take every ``stride``-th step.

    Returns:
        Columns ``episode, step, pixel_distance`` (``step`` counted from the episode's first
        stored frame; a reset-frame episode's step 0 is left out).
    """
    episodes = range(store.num_episodes) if episodes is None else episodes
    frames, reset_frames = [], []
    for e in episodes:
        start, end = int(store.episode_starts[e]), int(store.episode_ends[e])
        rows = np.arange(start, end + 1, max(1, int(stride)))
        head = store.gather_frames(np.array([start, min(start + 1, end)])).astype(np.int16)
        reference = start
        if end > start and np.abs(head[1] - head[0]).mean() > RESET_FRAME_JUMP:
            reset_frames.append(int(e))
            reference = start + 1
            rows = rows[rows >= reference]
        first = head[reference - start]
        # over every cell of a frame: (H, W) grey or (C, H, W) MinAtar grids alike
        diff = np.abs(store.gather_frames(rows).astype(np.int16) - first)
        distance = diff.reshape(len(rows), -1).mean(axis=1)
        frames.append(
            pd.DataFrame({"episode": e, "step": rows - start, "pixel_distance": distance})
        )
    df = pd.concat(frames, ignore_index=True)
    df.attrs["reset_frame_episodes"] = reset_frames
    return df
