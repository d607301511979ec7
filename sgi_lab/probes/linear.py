"""Linear probes on frozen features, and the scores AtariARI reports for them.

One linear classifier per variable over the values it takes in the training split: a linear map
of the (standardized) features to one score per value, trained by gradient descent on the
squared error to the one-hot label from zero weights, and stopped early where its accuracy on the
validation split is best; each variable stops on its own. The gradient-descent iterates are
computed in closed form from one eigendecomposition of the features' Gram matrix (after ``t``
steps of size ``1/lambda_max``, the weights along eigenvector ``i`` are
``(1 - (1 - lambda_i/lambda_max)^t) / lambda_i`` times their least-squares value), so every
stopping step of every variable costs a matrix product, not an epoch: a probe of 50k frames fits in
seconds on a CPU. Scores are AtariARI's: weighted F1 per variable (sklearn's
``average="weighted"``), averaged per category, over all variables ("overall") and over the
category means ("across categories").

AtariARI itself trains a softmax layer with Adam (lr 3e-4, batch 64, up to 100 epochs, early
stopping with patience 15); on a 20k-frame Pong store of random play the two reach the same F1
within a few points per variable, the closed form 7x faster (benchmarks/README.md, "Probe speed").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch

__all__ = [
    "LinearProbes",
    "ProbeSettings",
    "accuracy",
    "category_averages",
    "f1_weighted",
    "fit_linear_probes",
    "gram_eigenbasis",
    "symmetric_eigh",
    "gradient_descent_filter",
    "label_entropy",
    "majority_predictions",
]


@dataclass(frozen=True)
class ProbeSettings:
    """How the probes train (recorded in probes.json; a change re-runs the probes)."""

    max_steps: float = 1.0e7
    """Longest gradient-descent run considered (then the least-squares solution itself)."""
    grid_points: int = 15
    """Stopping steps tried, log-spaced from 1 to ``max_steps``."""
    val_rows: int = 3000
    """Validation rows that choose the stopping step at most (an even subsample)."""
    entropy_threshold: float = 0.6
    """Variables whose training labels have less entropy (nats) are left out (AtariARI)."""

    def to_json(self) -> dict:
        return asdict(self)

    def steps(self) -> np.ndarray:
        """The stopping steps tried (float; the last is inf: the least-squares solution)."""
        grid = np.unique(np.round(np.logspace(0, np.log10(self.max_steps), self.grid_points)))
        return np.append(grid, np.inf)


def label_entropy(labels: np.ndarray) -> float:
    """Entropy (nats) of the empirical distribution of ``labels`` (N,)."""
    _, counts = np.unique(labels, return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum())


def f1_weighted(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """F1 per class averaged with the classes' support as weights (sklearn ``weighted``)."""
    from sklearn.metrics import f1_score

    if len(y_true) == 0:
        return float("nan")
    return float(f1_score(y_true, y_pred, average="weighted", zero_division=0))


def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.mean(np.asarray(y_true) == np.asarray(y_pred))) if len(y_true) else float("nan")


def majority_predictions(y_train: np.ndarray, count: int) -> np.ndarray:
    """The majority-class baseline: each column's most frequent training value, ``count`` times.

    Args:
        y_train: (N, V) training labels.
        count: rows to predict.

    Returns:
        (count, V) predictions.
    """
    y_train = np.asarray(y_train)
    modes = []
    for v in range(y_train.shape[1]):
        values, counts = np.unique(y_train[:, v], return_counts=True)
        modes.append(values[np.argmax(counts)])
    return np.tile(np.asarray(modes, dtype=y_train.dtype), (count, 1))


def category_averages(
    scores: Mapping[str, float], categories: Mapping[str, str | None]
) -> dict[str, object]:
    """AtariARI's summary of per-variable scores.

    Args:
        scores: ``{variable: score}`` of the variables probed.
        categories: ``{variable: category}`` (None: in no category).

    Returns:
        ``{"categories": {category: mean over its variables}, "overall": mean over every
        variable, "across_categories": mean of the category means}``; a category without
        probed variables is left out.
    """
    by_category: dict[str, list[float]] = {}
    for name, score in scores.items():
        category = categories.get(name)
        if category is not None:
            by_category.setdefault(category, []).append(float(score))
    means = {c: float(np.mean(v)) for c, v in by_category.items()}
    return {
        "categories": means,
        "overall": float(np.mean(list(scores.values()))) if scores else float("nan"),
        "across_categories": float(np.mean(list(means.values()))) if means else float("nan"),
    }


class LinearProbes:
    """Trained probes: standardization, one weight block per variable, each variable's classes.

    Attributes:
        classes: per variable, the label values its output units stand for.
        steps: per variable, the gradient-descent step it stopped at (inf: least squares).
        weight: (D + 1, sum of classes) on the standardized features and a constant 1; the
            columns of variable v are ``slices[v]``.
    """

    def __init__(
        self,
        mean: torch.Tensor,
        std: torch.Tensor,
        weight: torch.Tensor,
        classes: Sequence[np.ndarray],
        steps: Sequence[float],
    ) -> None:
        self.mean, self.std, self.weight = mean, std, weight
        self.classes = list(classes)
        self.steps = list(steps)
        bounds = np.cumsum([0, *(len(c) for c in classes)])
        self.slices = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    @torch.no_grad()
    def predict(self, x: np.ndarray, batch_size: int = 4096) -> np.ndarray:
        """Features (N, D) -> predicted label values (N, V)."""
        out = np.zeros((len(x), len(self.classes)), dtype=np.int64)
        for i in range(0, len(x), batch_size):
            scores = _design(x[i : i + batch_size], self.mean, self.std) @ self.weight
            for v, sl in enumerate(self.slices):
                out[i : i + batch_size, v] = self.classes[v][scores[:, sl].argmax(1).numpy()]
        return out


def _design(x: np.ndarray, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Standardized features with a constant column (the bias)."""
    x = (torch.as_tensor(np.asarray(x, np.float32)) - mean) / std
    return torch.cat([x, torch.ones(len(x), 1)], 1)


def _class_index(labels: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Index of each label in ``classes`` (sorted), -1 for a value training never saw."""
    idx = np.searchsorted(classes, labels)
    idx = np.clip(idx, 0, len(classes) - 1)
    return np.where(classes[idx] == labels, idx, -1)


def gradient_descent_filter(eigenvalues: torch.Tensor, steps: float) -> torch.Tensor:
    """Per eigen-direction, the gain of ``steps`` gradient-descent steps of size
    ``1/lambda_max`` on a least-squares problem from zero: ``(1 - (1 - l/l_max)^t) / l``
    (``1/l`` for ``t = inf``, 0 for directions without data).

    Args:
        eigenvalues: (D,) of the Gram matrix, ascending.
        steps: t.
    """
    top = eigenvalues[-1].clamp_min(1e-12)
    live = eigenvalues > top * 1e-7
    safe = torch.where(live, eigenvalues, torch.ones_like(eigenvalues))
    if np.isinf(steps):
        gain = 1.0 / safe
    else:
        gain = (1 - (1 - safe / top).clamp(0, 1) ** steps) / safe
    return torch.where(live, gain, torch.zeros_like(gain))


def symmetric_eigh(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.linalg.eigh`` of a symmetric PSD matrix, in its own dtype when LAPACK converges;
    else in float64, and failing that with a jitter of 1e-10 of its trace on the diagonal (an
    encoder with many constant or repeated features makes a Gram matrix float32's solver
    gives up on). Results in the matrix's dtype."""
    try:
        return torch.linalg.eigh(matrix)
    except torch.linalg.LinAlgError:
        wide = matrix.double()
    try:
        values, vectors = torch.linalg.eigh(wide)
    except torch.linalg.LinAlgError:
        jitter = 1e-10 * wide.diagonal().sum().clamp_min(1e-12)
        eye = torch.eye(len(wide), dtype=wide.dtype)
        values, vectors = torch.linalg.eigh(wide + jitter * eye)
    return values.to(matrix.dtype), vectors.to(matrix.dtype)


def gram_eigenbasis(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenvalues (ascending) and eigenvectors (D, r) of ``x^T x / N`` for ``x`` (N, D), from
    the smaller of the two Gram matrices: with fewer rows than features, ``x x^T / N`` (N x N)
    gives the same nonzero eigenvalues, and its eigenvectors ``u`` map to ``x^T u / sqrt(N l)``
    (gradient descent from zero never leaves that span)."""
    n, d = x.shape
    if n >= d:
        eigenvalues, basis = symmetric_eigh(x.T @ x / n)
        return eigenvalues.clamp_min(0), basis
    eigenvalues, u = symmetric_eigh(x @ x.T / n)
    live = eigenvalues > eigenvalues[-1].clamp_min(1e-12) * 1e-7
    eigenvalues, u = eigenvalues[live], u[:, live]
    return eigenvalues, (x.T @ u) / torch.sqrt(n * eigenvalues)


def fit_linear_probes(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_val: np.ndarray,
    y_val: np.ndarray,
    settings: ProbeSettings = ProbeSettings(),
) -> LinearProbes:
    """Train one linear classifier per label column, each stopped early on validation accuracy.

    Args:
        x_train: (N, D) features; ``y_train`` (N, V) integer labels.
        x_val: (M, D) features; ``y_val`` (M, V) labels (values training never saw count as
            errors).
        settings: the stopping steps tried.

    Returns:
        The probes, each variable with the weights of its best validation step.
    """
    if len(x_train) == 0 or len(x_val) == 0:
        raise ValueError("fit_linear_probes: the training and validation splits need rows")
    xt = torch.as_tensor(np.asarray(x_train, np.float32))
    mean, std = xt.mean(0), xt.std(0).clamp_min(1e-6) if len(xt) > 1 else torch.ones(xt.shape[1])
    xt = _design(x_train, mean, std)
    if len(x_val) > settings.val_rows:  # an even subsample chooses the step
        keep = np.linspace(0, len(x_val) - 1, settings.val_rows).round().astype(int)
        x_val, y_val = np.asarray(x_val)[keep], np.asarray(y_val)[keep]
    xv = _design(x_val, mean, std)
    y_train, y_val = np.asarray(y_train), np.asarray(y_val)
    eigenvalues, basis = gram_eigenbasis(xt)
    xv_basis = xv @ basis
    classes, blocks, stopped = [], [], []
    filters = [(t, gradient_descent_filter(eigenvalues, t)) for t in settings.steps()]
    for v in range(y_train.shape[1]):
        values = np.unique(y_train[:, v])
        train_idx = torch.as_tensor(_class_index(y_train[:, v], values))
        val_idx = torch.as_tensor(_class_index(y_val[:, v], values))
        onehot = torch.zeros(len(xt), len(values))
        onehot[torch.arange(len(xt)), train_idx] = 1.0
        target = basis.T @ (xt.T @ onehot) / len(xt)  # (D+1, K): X^T Y in the eigenbasis
        best = (-1.0, filters[0][0], filters[0][1])
        for steps, gain in filters:
            acc = float(((xv_basis @ (gain[:, None] * target)).argmax(1) == val_idx).float().mean())
            if acc > best[0]:
                best = (acc, steps, gain)
        classes.append(values)
        stopped.append(best[1])
        blocks.append(basis @ (best[2][:, None] * target))
    return LinearProbes(mean, std, torch.cat(blocks, 1), classes, stopped)
