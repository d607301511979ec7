"""The collapse diagnostic: the mean pairwise cosine similarity of an encoder's latents over a
probe store (the paper's representation-diversity measure, Fig. 4; pretraining logs the same
quantity on its training batches as ``charts/cosine_similarity``), beside a random encoder of the
same architecture and, for a pretraining run, the weights it started from (its step 0).

A value near 1 means every state maps to nearly the same direction: the latents have collapsed.
A random encoder's value is the reference, not 0: its ReLU features are non-negative, so their
cosines are positive however diverse the states (a random MinAtar encoder's projection read
0.51 on Freeway, 0.68-0.69 on Asterix, Seaquest and Space Invaders and 0.95 on Breakout on
5k-10k-step Random stores, 2026-11-29).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from sgi_lab.data.store import TransitionStore
from sgi_lab.nets import SGIModel
from sgi_lab.runtime.device import resolve_device

__all__ = [
    "COLLAPSE_ROWS",
    "LATENTS",
    "collapse_record",
    "collapse_rows",
    "latent_cosines",
    "mean_pairwise_cosine",
]

COLLAPSE_ROWS = 2048
"""States the diagnostic reads at most (evenly spaced over the probe rows): 2 million pairs."""
LATENTS = ("renormalized", "projection")
"""The latents measured: the renormalized conv map (what heads and the transition model see)
and the projection y = p(z) (what SPR and inverse dynamics train, and pretraining measures)."""


def mean_pairwise_cosine(latents: np.ndarray | torch.Tensor) -> float:
    """Mean cosine similarity over all pairs ``i != j`` of the rows of ``latents`` (N, D).

    Computed from the sum of the unit vectors, ``(|sum u|^2 - sum |u|^2) / (N (N - 1))``: exact
    and O(N D), so every pair of thousands of states counts. A zero row has no direction and
    contributes 0 to each of its pairs (as pretraining's measure, eps 1e-6). NaN under 2 rows.
    """
    x = torch.as_tensor(np.asarray(latents) if not torch.is_tensor(latents) else latents)
    x = x.detach().double().reshape(len(x), -1)
    n = len(x)
    if n < 2:
        return float("nan")
    u = F.normalize(x, dim=1, eps=1e-6)
    total = u.sum(0)
    return float((total @ total - (u * u).sum()) / (n * (n - 1)))


def collapse_rows(rows: np.ndarray, count: int = COLLAPSE_ROWS) -> np.ndarray:
    """At most ``count`` of ``rows``, evenly spaced (the same for every encoder of a split)."""
    rows = np.asarray(rows)
    if len(rows) <= count:
        return rows
    return rows[np.linspace(0, len(rows) - 1, count).round().astype(int)]


@torch.no_grad()
def latent_cosines(
    model: SGIModel,
    store: TransitionStore,
    rows: np.ndarray,
    batch_size: int = 256,
    device: str = "auto",
) -> dict[str, float]:
    """``{latent: mean pairwise cosine}`` of ``model``'s `LATENTS` of the states at ``rows``."""
    dev = resolve_device(device)
    model = model.to(dev).eval()
    parts: dict[str, list[torch.Tensor]] = {name: [] for name in LATENTS}
    for i in range(0, len(rows), batch_size):
        obs = torch.from_numpy(store.stack(rows[i : i + batch_size])).to(dev)
        z = model.encode(obs)
        parts["renormalized"].append(z.flatten(1).float().cpu())
        parts["projection"].append(model.project(z).float().cpu())
    return {name: mean_pairwise_cosine(torch.cat(p)) for name, p in parts.items() if p}


def collapse_record(
    models: dict[str, SGIModel | None],
    store: TransitionStore,
    rows: np.ndarray,
    batch_size: int = 256,
    device: str = "auto",
    sources: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The diagnostic of several encoders on the same states, as a probe result records it:
    ``{"rows": n, "latents": LATENTS, "encoder": {latent: cos}, "random_init": {...},
    "step0": {...}, "sources": {...}}`` (an encoder given as None is left out).

    Args:
        models: ``{"encoder": the probed model, "random_init": a random one of its
            architecture, "step0": the weights it started from}``.
        store: the probe store.
        rows: the probe rows (`collapse_rows` picks the states).
        sources: where each model came from, recorded as given.
    """
    picked = collapse_rows(rows)
    record: dict[str, Any] = {"rows": int(len(picked)), "latents": list(LATENTS)}
    for name, model in models.items():
        if model is not None:
            record[name] = latent_cosines(model, store, picked, batch_size, device)
    if sources:
        record["sources"] = dict(sources)
    return record
