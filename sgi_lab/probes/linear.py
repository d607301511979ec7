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

Least squares onto one-hot targets can hide the middle classes of an ordered variable (a
coordinate's score for its middle values is never the largest: "masking"), so two other readouts
stand beside it: the ``logistic`` readout (`fit_logistic_probes`: one multinomial logistic layer
per variable, Adam on the cross-entropy until the validation accuracy stops rising, AtariARI's
readout) and, for coordinates, a ridge regression onto the value itself (`fit_ridge_regressions`:
R^2 and the fraction of predictions within +-2 units).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np
import torch

from sgi_lab.probes.choices import FEATURES, READOUTS

__all__ = [
    "CONSTANT_STD",
    "FEATURES",
    "READOUTS",
    "LinearProbes",
    "ProbeSettings",
    "RidgeRegressions",
    "TrainDesign",
    "accuracy",
    "category_averages",
    "f1_weighted",
    "fit_linear_probes",
    "fit_logistic_probes",
    "fit_probes",
    "fit_ridge_regressions",
    "train_design",
    "within_accuracy",
    "r_squared",
    "standardization",
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
    readout: str = "lstsq"
    """``lstsq``: least squares onto one-hot classes, early-stopped (`fit_linear_probes`);
    ``logistic``: a multinomial logistic layer per variable (`fit_logistic_probes`)."""
    features: str = "renormalized"
    """What the probes read: ``renormalized`` (the conv map after the per-sample min-max
    renormalisation, what heads and transition model see), ``conv`` (the conv map before it) or
    ``projection`` (the projection y = p(z) that SPR and inverse dynamics train)."""
    logistic_lr: float = 1.0e-3
    """``logistic``: Adam's learning rate on the standardized features."""
    logistic_batch_size: int = 256
    """``logistic``: rows per Adam step."""
    logistic_max_epochs: int = 100
    """``logistic``: passes over the training rows at most."""
    logistic_patience: int = 5
    """``logistic``: epochs without a better validation accuracy before a variable stops."""
    ridge_alphas: tuple[float, ...] = (1.0e-3, 1.0e-2, 1.0e-1, 1.0, 10.0, 100.0)
    """Ridge penalties tried for the coordinate regressions (on the per-row Gram matrix of
    standardized features, whose eigenvalues average 1); the best validation R^2 wins."""
    within: float = 2.0
    """The coordinate regressions' tolerance: a prediction within this many units is right."""

    def __post_init__(self) -> None:
        if self.readout not in READOUTS:
            raise ValueError(f"readout {self.readout!r}: one of {', '.join(READOUTS)}")
        if self.features not in FEATURES:
            raise ValueError(f"features {self.features!r}: one of {', '.join(FEATURES)}")

    def to_json(self) -> dict:
        # Lists, not tuples: a key read back from probes.json must compare equal.
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

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


CONSTANT_STD = 1.0e-6
"""A feature whose training standard deviation is at most this is constant in training: it is
standardized to 0 everywhere (`standardization`)."""


def standardization(x_train: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and standard deviation (N, D) training features are standardized by; a feature
    constant in training (std at most `CONSTANT_STD`) gets an infinite std, so it reads 0 on
    every row, training or not (one training row: std 1).

    A fit on training rows gives such a feature no weight in exact arithmetic, but float32's
    eigendecomposition leaves it a small one; the old floor of 1e-6 then multiplied it by
    1e6 on a held-out row where the feature is not constant. On a MinAtar Breakout store
    (2026-11-29) 142 of a random MinAtar encoder's 1,024 renormalised features were 0 on
    every training row; on the 6 of 279 de-duplicated test rows where one was not, they
    stood at 1.6e5-4.5e5 standard deviations, the ridge predictions missed by up to 111 grid
    units, five rows held 86-100 % of each label's squared error and the state R^2 fell to
    -7.5; with the features left at 0 the same fit scored 0.94."""
    xt = torch.as_tensor(np.asarray(x_train, np.float32))
    if len(xt) < 2:
        return xt.mean(0), torch.ones(xt.shape[1])
    std = xt.std(0)
    return xt.mean(0), torch.where(std > CONSTANT_STD, std, torch.full_like(std, torch.inf))


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
    """``torch.linalg.eigh`` of a symmetric PSD matrix, in its own dtype when LAPACK converges
    to finite values; else in float64, and failing that with a jitter of 1e-10 of its trace on
    the diagonal (an encoder with many constant or repeated features makes a Gram matrix
    float32's solver gives up on). Results in the matrix's dtype.

    Giving up is not always an error: on a 2-core Xeon (family 6, model 167) MKL's float32
    solver returned NaN eigenvalues and eigenvectors without raising for the 3,137 x 3,137 Gram
    matrices of 4 of 296 probe reads, and every probe of those encoders then predicted one
    class (F1 0.02-0.10 against 0.83 from the float64 solution). A result is used only when
    every value in it is finite.

    Raises:
        torch.linalg.LinAlgError: not even the jittered float64 matrix gives finite values.
    """
    solved = _finite_eigh(matrix)
    if solved is not None:
        return solved
    wide = matrix.double()
    jitter = 1e-10 * wide.diagonal().sum().clamp_min(1e-12)
    solved = _finite_eigh(wide) or _finite_eigh(wide + jitter * torch.eye(len(wide)).to(wide))
    if solved is None:
        raise torch.linalg.LinAlgError(
            f"eigh of a {tuple(matrix.shape)} Gram matrix failed even in float64 with a "
            "jitter: its features hold NaN or inf"
        )
    values, vectors = solved
    return values.to(matrix.dtype), vectors.to(matrix.dtype)


def _finite_eigh(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``torch.linalg.eigh`` of ``matrix``, or None when LAPACK gives up or returns a
    non-finite value."""
    try:
        values, vectors = torch.linalg.eigh(matrix)
    except torch.linalg.LinAlgError:
        return None
    finite = bool(torch.isfinite(values).all()) and bool(torch.isfinite(vectors).all())
    return (values, vectors) if finite else None


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


class TrainDesign(NamedTuple):
    """The training features as every readout fits them: standardized, with a constant column,
    and (for the closed forms) the eigenbasis of their Gram matrix, computed once per encoder."""

    mean: torch.Tensor
    std: torch.Tensor
    x: torch.Tensor  # (N, D + 1)
    eigenvalues: torch.Tensor  # (r,), of x^T x / N
    basis: torch.Tensor  # (D + 1, r)


def train_design(x_train: np.ndarray) -> TrainDesign:
    """Standardize ``x_train`` (N, D) and take its Gram matrix's eigenbasis (`gram_eigenbasis`)."""
    if len(x_train) == 0:
        raise ValueError("train_design: the training split needs rows")
    mean, std = standardization(x_train)
    x = _design(x_train, mean, std)
    eigenvalues, basis = gram_eigenbasis(x)
    return TrainDesign(mean, std, x, eigenvalues, basis)


def _validation_rows(
    x_val: np.ndarray, y_val: np.ndarray, settings: ProbeSettings
) -> tuple[np.ndarray, np.ndarray]:
    """At most ``settings.val_rows`` validation rows, an even subsample (they choose the stop)."""
    x_val, y_val = np.asarray(x_val), np.asarray(y_val)
    if len(x_val) > settings.val_rows:
        keep = np.linspace(0, len(x_val) - 1, settings.val_rows).round().astype(int)
        x_val, y_val = x_val[keep], y_val[keep]
    return x_val, y_val


def fit_probes(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_val: np.ndarray,
    y_val: np.ndarray,
    settings: ProbeSettings = ProbeSettings(),
    design: TrainDesign | None = None,
) -> LinearProbes:
    """The classifiers of ``settings.readout``: `fit_linear_probes` or `fit_logistic_probes`."""
    if settings.readout == "logistic":
        return fit_logistic_probes(x_train, y_train, x_val, y_val, settings, design)
    return fit_linear_probes(x_train, y_train, x_val, y_val, settings, design)


def fit_linear_probes(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_val: np.ndarray,
    y_val: np.ndarray,
    settings: ProbeSettings = ProbeSettings(),
    design: TrainDesign | None = None,
) -> LinearProbes:
    """Train one linear classifier per label column, each stopped early on validation accuracy.

    Args:
        x_train: (N, D) features; ``y_train`` (N, V) integer labels.
        x_val: (M, D) features; ``y_val`` (M, V) labels (values training never saw count as
            errors).
        settings: the stopping steps tried.
        design: `train_design` of ``x_train`` when the caller has it (else computed here).

    Returns:
        The probes, each variable with the weights of its best validation step.
    """
    if len(x_train) == 0 or len(x_val) == 0:
        raise ValueError("fit_linear_probes: the training and validation splits need rows")
    design = design or train_design(x_train)
    mean, std, xt, eigenvalues, basis = design
    x_val, y_val = _validation_rows(x_val, y_val, settings)
    xv = _design(x_val, mean, std)
    y_train = np.asarray(y_train)
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


def fit_logistic_probes(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_val: np.ndarray,
    y_val: np.ndarray,
    settings: ProbeSettings = ProbeSettings(),
    design: TrainDesign | None = None,
    seed: int = 0,
) -> LinearProbes:
    """One multinomial logistic (softmax) classifier per label column, AtariARI's readout:
    from zero weights, Adam on the cross-entropy over minibatches of the standardized features,
    each variable keeping the weights of the epoch with its best validation accuracy and
    stopping after ``settings.logistic_patience`` epochs without a better one.

    The variables train side by side as one layer (their columns share no weight and the loss
    is a sum, so each trains exactly as it would alone); training ends when every variable has
    stopped or after ``settings.logistic_max_epochs``.

    Args:
        x_train, y_train, x_val, y_val: as `fit_linear_probes`.
        settings: the optimizer and stopping settings.
        design: the standardized training features (`train_design`), when the caller has them.
        seed: the minibatch order.

    Returns:
        The probes; ``steps`` holds each variable's best epoch (1-based).
    """
    if len(x_train) == 0 or len(x_val) == 0:
        raise ValueError("fit_logistic_probes: the training and validation splits need rows")
    if design is not None:
        mean, std, xt = design.mean, design.std, design.x
    else:
        mean, std = standardization(x_train)
        xt = _design(x_train, mean, std)
    x_val, y_val = _validation_rows(x_val, y_val, settings)
    xv = _design(x_val, mean, std)
    y_train = np.asarray(y_train)
    classes = [np.unique(y_train[:, v]) for v in range(y_train.shape[1])]
    bounds = np.cumsum([0, *(len(c) for c in classes)])
    slices = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    train_idx, val_idx = _class_indices(y_train, classes), _class_indices(y_val, classes)
    weight = torch.zeros(xt.shape[1], int(bounds[-1]), requires_grad=True)
    optimizer = torch.optim.Adam([weight], lr=settings.logistic_lr)
    generator = torch.Generator().manual_seed(seed)
    best_acc = [-1.0] * len(classes)
    best_epoch = [0] * len(classes)
    best_block = [weight.detach()[:, sl].clone() for sl in slices]
    for epoch in range(1, settings.logistic_max_epochs + 1):
        order = torch.randperm(len(xt), generator=generator)
        for i in range(0, len(xt), settings.logistic_batch_size):
            rows = order[i : i + settings.logistic_batch_size]
            loss = _softmax_loss(xt[rows] @ weight, train_idx[rows], slices)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            scores = xv @ weight
            for v, sl in enumerate(slices):
                acc = float((scores[:, sl].argmax(1) == val_idx[:, v]).float().mean())
                if acc > best_acc[v]:
                    best_acc[v], best_epoch[v] = acc, epoch
                    best_block[v] = weight.detach()[:, sl].clone()
        if all(epoch - e >= settings.logistic_patience for e in best_epoch):
            break
    return LinearProbes(mean, std, torch.cat(best_block, 1), classes, best_epoch)


def _class_indices(y: np.ndarray, classes: list[np.ndarray]) -> torch.Tensor:
    """(N, V) labels -> (N, V) indices into each variable's ``classes`` (-1: unseen value)."""
    return torch.as_tensor(np.stack([_class_index(y[:, v], c) for v, c in enumerate(classes)], 1))


def _softmax_loss(logits: torch.Tensor, targets: torch.Tensor, slices: list[slice]) -> torch.Tensor:
    """The variables' cross-entropies summed, averaged over the rows: (B, K) logits whose
    columns ``slices[v]`` are variable v's, (B, V) class indices."""
    per_variable = (
        torch.nn.functional.cross_entropy(logits[:, sl], targets[:, v], reduction="sum")
        for v, sl in enumerate(slices)
    )
    return sum(per_variable) / len(logits)


def r_squared(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Coefficient of determination 1 - SSE/SST (NaN without rows; 0 SST: 1 if exact else 0)."""
    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    if len(y_true) == 0:
        return float("nan")
    sse = float(((y_true - y_pred) ** 2).sum())
    sst = float(((y_true - y_true.mean()) ** 2).sum())
    if sst == 0:
        return 1.0 if sse == 0 else 0.0
    return 1.0 - sse / sst


def within_accuracy(y_true: np.ndarray, y_pred: np.ndarray, tolerance: float = 2.0) -> float:
    """The fraction of predictions within ``tolerance`` units of the truth."""
    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    return float(np.mean(np.abs(y_pred - y_true) <= tolerance)) if len(y_true) else float("nan")


class RidgeRegressions:
    """Ridge regressions of label columns on standardized features (`fit_ridge_regressions`).

    Attributes:
        weight: (D + 1, V) on the standardized features and a constant 1.
        offset: (V,) the training mean of each column (the regressions fit the centred values).
        alphas: per column, the penalty that won on validation.
    """

    def __init__(self, mean, std, weight, offset, alphas) -> None:
        self.mean, self.std, self.weight, self.offset = mean, std, weight, offset
        self.alphas = list(alphas)

    @torch.no_grad()
    def predict(self, x: np.ndarray) -> np.ndarray:
        """Features (N, D) -> predicted values (N, V), float."""
        return (_design(x, self.mean, self.std) @ self.weight + self.offset).double().numpy()


def fit_ridge_regressions(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_val: np.ndarray,
    y_val: np.ndarray,
    settings: ProbeSettings = ProbeSettings(),
    design: TrainDesign | None = None,
) -> RidgeRegressions:
    """A ridge regression of each label column on the features, its penalty chosen among
    ``settings.ridge_alphas`` by validation R^2: ``w = (X^T X / N + alpha I)^-1 X^T (y -
    mean y) / N`` on the standardized features, in closed form from the eigenbasis (one matrix
    product per penalty).

    Args:
        x_train: (N, D) features; ``y_train`` (N, V) numeric labels (coordinates).
        x_val: (M, D); ``y_val`` (M, V).
        settings: the penalties tried.
        design: `train_design` of ``x_train`` when the caller has it.
    """
    if len(x_train) == 0 or len(x_val) == 0:
        raise ValueError("fit_ridge_regressions: the training and validation splits need rows")
    design = design or train_design(x_train)
    mean, std, xt, eigenvalues, basis = design
    x_val, y_val = _validation_rows(x_val, y_val, settings)
    yt = torch.as_tensor(np.asarray(y_train, np.float32))
    offset = yt.mean(0)
    target = basis.T @ (xt.T @ (yt - offset)) / len(xt)  # (r, V)
    xv_basis = _design(x_val, mean, std) @ basis
    y_val = np.asarray(y_val, float)
    weights, chosen = [], []
    for v in range(yt.shape[1]):
        best = (-np.inf, settings.ridge_alphas[0], None)
        for alpha in settings.ridge_alphas:
            coef = target[:, v] / (eigenvalues + alpha)
            score = r_squared(y_val[:, v], (xv_basis @ coef + offset[v]).double().numpy())
            if score > best[0] or best[2] is None:
                best = (score, alpha, coef)
        weights.append(basis @ best[2])
        chosen.append(best[1])
    return RidgeRegressions(mean, std, torch.stack(weights, 1), offset, chosen)
