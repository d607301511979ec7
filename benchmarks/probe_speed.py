"""Probe speed (``sgi_lab.probes``): one frozen encoder on one game's store, features plus every
probe (AtariARI state variables, reward; the action probe where the data are not Random).

    .venv/bin/python benchmarks/probe_speed.py --game pong --frames 50000
    .venv/bin/python benchmarks/probe_speed.py --data outputs/data/pong_random --frames 50000
    .venv/bin/python benchmarks/probe_speed.py --data STORE --readout logistic --features conv
    .venv/bin/python benchmarks/probe_speed.py --data STORE --frames 20000 --compare-logistic

Without ``--data`` a Random store of ``--frames`` steps (with RAM) is collected into a temp folder
first (not timed). The encoder is a random Nature CNN (``--encoder``): its weights do not change
the time. Prints one JSON row: seconds per phase, frames/s, the CPU time (over the torch threads:
about the wall time on an idle machine), the CPU model and the load average (this machine is
shared: a loaded CPU reads slower). ``--readout`` and ``--features`` time the other readouts
(`sgi_lab.probes.ProbeSettings`). ``--compare-logistic`` instead times the logistic readout two
ways on the same features, labels and split: this project's (torch, Adam, early stopping on
the validation episodes) and sklearn's ``LogisticRegression`` (lbfgs, multinomial, to
convergence, no early stopping), and prints each one's seconds and test F1 per variable.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from sgi_lab.analysis.probe_encoders import random_probe_encoder
from sgi_lab.base.files import cpu_model
from sgi_lab.data import TransitionStore
from sgi_lab.data.collect import collect_random
from sgi_lab.probes import ProbeSettings, annotations, labels_from_ram, probe_encoder
from sgi_lab.probes.encoder_probe import _features
from sgi_lab.probes.linear import f1_weighted, fit_logistic_probes, label_entropy
from sgi_lab.probes.splits import split_episodes, subsample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="pong")
    parser.add_argument("--frames", type=int, default=50_000, help="rows probed")
    parser.add_argument("--data", type=Path, default=None, help="a store with RAM to probe")
    parser.add_argument("--encoder", default="nature")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--random-baseline", action="store_true", help="time it too")
    parser.add_argument("--json", type=Path, default=None, help="also write the row here")
    parser.add_argument("--readout", default="lstsq", help="lstsq or logistic")
    parser.add_argument("--features", default="renormalized", help="renormalized, conv, projection")
    parser.add_argument(
        "--compare-logistic", action="store_true", help="torch against sklearn, same inputs"
    )
    parser.add_argument("--max-iter", type=int, default=100, help="sklearn's lbfgs iterations")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    settings = ProbeSettings(readout=args.readout, features=args.features)
    with tempfile.TemporaryDirectory() as tmp:
        if args.data is None:
            store = collect_random(args.game, args.frames, Path(tmp) / "store", progress=False)
        else:
            store = TransitionStore(args.data)
        if args.compare_logistic:
            row = compare_logistic(store, args.frames, args.encoder, settings, args.max_iter)
            print(json.dumps(row, indent=2))
            if args.json:
                args.json.write_text(json.dumps(row, indent=2) + "\n")
            return
        encoder = random_probe_encoder(Path(tmp) / "probe", store.num_actions, args.encoder)
        load = os.getloadavg()[0]
        cpu_started = time.process_time()
        started = time.perf_counter()
        result = probe_encoder(
            encoder,
            store,
            settings,
            max_frames=args.frames,
            random_baseline_seed=1 if args.random_baseline else None,
            progress=False,
        )
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
    frames = sum(result["split"]["rows"].values()) + result["split"]["test_duplicates_removed"]
    row = {
        "game": store.game,
        "encoder": args.encoder,
        "readout": args.readout,
        "features": args.features,
        "frames": frames,
        "variables": len(result["variables"]),
        "seconds": result["seconds"],
        "wall_s": round(wall, 1),
        "frames_per_s": round(frames / wall, 1),
        # CPU time over the threads: about the wall time on an otherwise idle machine.
        "cpu_s": round(cpu, 1),
        "cpu_s_per_thread": round(cpu / torch.get_num_threads(), 1),
        "overall_f1": round(result["overall"], 3),
        "category_mean_f1": round(result["across_categories"], 3),
        "coordinates": result.get("regression"),
        "torch_threads": torch.get_num_threads(),
        "cpu": cpu_model(),
        "load_average_1min_before": round(load, 2),
        "load_average_1min_after": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(row, indent=2))
    if args.json:
        args.json.write_text(json.dumps(row, indent=2) + "\n")


def compare_logistic(
    store: TransitionStore,
    frames: int,
    encoder_name: str,
    settings: ProbeSettings,
    max_iter: int = 100,
) -> dict:
    """The logistic readout on one encoder's features two ways: torch (this project's) and
    sklearn (lbfgs, at most ``max_iter`` iterations: its default), on the same split (test
    duplicates kept: both see the same rows), seconds and test F1 per state variable."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    split = subsample(split_episodes(store, 0), frames, rng)
    rows = np.concatenate([split[k] for k in ("train", "val", "test")])
    model = random_probe_encoder(Path("unused"), store.num_actions, encoder_name).model
    started = time.perf_counter()
    x, _ = _features(model, store, rows, 256, "cpu", False, "features", settings.features)
    seconds = {"features": round(time.perf_counter() - started, 1)}
    variables = annotations(store.game)
    labels = labels_from_ram(store.gather_ram(rows), variables).astype(np.int64)
    n_train, n_val = len(split["train"]), len(split["val"])
    train, val = np.arange(n_train), np.arange(n_train, n_train + n_val)
    test = np.arange(n_train + n_val, len(rows))
    keep = [i for i in range(len(variables)) if label_entropy(labels[train, i]) >= 0.6]
    y = labels[:, keep]
    # CPU seconds beside wall seconds: on a shared machine the CPU time compares fairly.
    started, cpu_started = time.perf_counter(), time.process_time()
    probes = fit_logistic_probes(x[train], y[train], x[val], y[val], settings)
    seconds["torch"] = round(time.perf_counter() - started, 1)
    seconds["torch_cpu"] = round(time.process_time() - cpu_started, 1)
    print(f"torch: {seconds}", file=sys.stderr, flush=True)  # sklearn may take long
    torch_pred = probes.predict(x[test])
    scaler = StandardScaler().fit(x[train])
    xs_train, xs_test = scaler.transform(x[train]), scaler.transform(x[test])
    started, cpu_started = time.perf_counter(), time.process_time()
    sk_pred, sk_iters = [], []
    for j in range(len(keep)):
        fit = LogisticRegression(max_iter=max_iter).fit(xs_train, y[train, j])
        sk_pred.append(fit.predict(xs_test))
        sk_iters.append(int(np.max(fit.n_iter_)))
    seconds["sklearn"] = round(time.perf_counter() - started, 1)
    seconds["sklearn_cpu"] = round(time.process_time() - cpu_started, 1)
    per_variable = {
        variables[i].name: {
            "torch_f1": round(f1_weighted(y[test, j], torch_pred[:, j]), 3),
            "torch_epochs": probes.steps[j],
            "sklearn_f1": round(f1_weighted(y[test, j], sk_pred[j]), 3),
            "sklearn_iterations": sk_iters[j],
            "sklearn_converged": sk_iters[j] < max_iter,
        }
        for j, i in enumerate(keep)
    }
    return {
        "game": store.game,
        "features": settings.features,
        "rows": {"train": n_train, "val": n_val, "test": len(test)},
        "seconds": seconds,
        "variables": per_variable,
        "torch_threads": torch.get_num_threads(),
        "cpu": cpu_model(),
        "load_average_1min_after": round(os.getloadavg()[0], 2),
    }


if __name__ == "__main__":
    main()
