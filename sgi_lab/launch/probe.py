"""``sgi-lab probe RUN... --data STORE``: linear probes of each run's frozen encoder
(`sgi_lab.probes`), written to ``RUN/probes.json``; a run already probed on that store with the
same settings is skipped."""

from __future__ import annotations

import argparse
import json
import typing
from pathlib import Path
from typing import Any

from sgi_lab.config import Encoder, encoder_problem
from sgi_lab.envs.factory import canonical_env_game, grid_observations
from sgi_lab.probes.choices import FEATURES, READOUTS

# The options (`add_probe_parser`) need no torch, so `sgi-lab probe --help` loads none: the
# probes, the encoders and the study tables are imported by the functions that run them.
ENCODERS = typing.get_args(Encoder)
"""The architectures ``--random-init`` takes (`sgi_lab.nets.encoders.ENCODERS`, read from the
config's field, which names the same)."""

__all__ = ["add_probe_parser", "main_probe"]


SEED_LIMIT = 2**63
"""Seeds torch and NumPy both take: 0 <= seed < 2**63."""


def check_probe_options(args: argparse.Namespace) -> None:
    """Refuse, naming the option and what it takes, a value the probes cannot use."""
    import torch

    # lazy: the probes load torch (see ENCODERS)
    from sgi_lab.probes.probe_data import ProbeInputError

    for option, value in (
        ("--seed", args.seed),
        ("--split-seed", args.split_seed),
        ("--random-baseline-seed", args.random_baseline_seed),
    ):
        if not 0 <= value < SEED_LIMIT:
            raise ProbeInputError(f"{option} {value}: a seed is a whole number in [0, 2**63)")
    if args.threads < 0:
        raise ProbeInputError(f"--threads {args.threads}: at least 0 (0: torch's default)")
    if args.max_frames is not None and args.max_frames < 3:
        raise ProbeInputError(
            f"--max-frames {args.max_frames}: at least 3 (a row each for the train, validation "
            "and test splits), or leave it out for every row"
        )
    device = str(args.device)
    if device != "auto" and device != "cpu" and not device.startswith("cuda"):
        raise ProbeInputError(f"--device {device}: one of auto, cpu, cuda (or cuda:N)")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ProbeInputError(
            f"--device {device}: CUDA is not available on this machine; use --device cpu or auto"
        )


def check_encoder_reads_store(encoder: Any, store: Any) -> None:
    """Refuse, before anything is computed, an encoder that cannot or should not read the
    store: another input shape (channels, size) than its frames, or a run of another game
    (its probes would be saved in the run's folder under the other game's name).

    Raises:
        ProbeInputError: naming the encoder, the store and what differs.
    """
    # lazy: the probes load torch (see ENCODERS)
    from sgi_lab.probes.probe_data import ProbeInputError

    args = encoder.model.init_args
    spec = store.observation_spec
    theirs = (int(args["in_channels"]), int(args["image_size"]))
    ours = (spec.input_channels, spec.height)
    if theirs != ours:
        raise ProbeInputError(
            f"{encoder.source}: reads {theirs[0]} channels of {theirs[1]}x{theirs[1]}, the store "
            f"{store.path} ({store.game}) gives {ours[0]} of {ours[1]}x{ours[1]}; probe a store "
            "of its own game"
        )
    game = encoder.game
    if game and canonical_env_game(game) != store.game:
        raise ProbeInputError(
            f"{encoder.source}: trained on {game}, the store {store.path} holds {store.game} "
            "frames; probe a store of its own game"
        )


def main_probe(args: argparse.Namespace) -> int:
    import torch

    # lazy: the probes, and the encoders they load, import torch (see ENCODERS)
    from sgi_lab.analysis.probe_encoders import load_probe_encoder, random_probe_encoder
    from sgi_lab.probes import ProbeInputError, ProbeSettings, check_probe_store, probe_run
    from sgi_lab.probes.splits import split_rows

    check_probe_options(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    # Every input is checked before anything is computed or written.
    store = check_probe_store(args.data, state_probes=not args.no_state_probes)
    if args.split_rows:
        if args.runs or args.random_init:
            raise ProbeInputError(
                "--split-rows measures the store alone: give no RUN or --random-init"
            )
        record = split_rows(store, args.split_seed, args.max_frames)
        print(json.dumps({"store": str(store.path), "game": store.game, **record}, indent=2))
        return 0
    if args.random_init:
        if args.runs or args.out is None:
            raise ProbeInputError(
                "--random-init probes a fresh encoder into --out DIR; give --out and no RUN"
            )
        grid = grid_observations(store.game, store.observation_spec.frame_shape)
        problem = encoder_problem(args.random_init, grid)
        if problem:
            raise ProbeInputError(
                f"--random-init: {problem} (the store {args.data} is {store.game})"
            )
        encoders = [
            random_probe_encoder(
                args.out, store.num_actions, args.random_init, args.seed, store.observation_spec
            )
        ]
    else:
        if not args.runs:
            raise ProbeInputError("give RUN folders or model files to probe, or --random-init")
        if args.out is not None:
            raise ProbeInputError("--out goes with --random-init; a run's probes go in its folder")
        encoders = [load_probe_encoder(run, args.allow_unfinished) for run in args.runs]
    for encoder in encoders:
        check_encoder_reads_store(encoder, store)
    settings = ProbeSettings(readout=args.readout, features=args.features)
    summaries: list[dict[str, Any]] = []
    for encoder in encoders:
        result, computed = probe_run(
            encoder,
            store,
            settings,
            split_seed=args.split_seed,
            max_frames=args.max_frames,
            random_baseline_seed=None if args.no_random_baseline else args.random_baseline_seed,
            state_probes=not args.no_state_probes,
            overwrite=args.overwrite,
            device=args.device,
            progress=not args.no_progress,
        )
        run = encoder.source if encoder.kind != "random_init" else str(args.out)
        summaries.append({"run": run, **probe_summary(result, encoder, computed)})
    print(json.dumps(summaries[0] if len(summaries) == 1 else summaries, indent=2))
    return 0


def probe_summary(result: dict[str, Any], encoder: Any, computed: bool) -> dict[str, Any]:
    """What ``sgi-lab probe`` prints of one result: the headline and the metric it is, F1 of
    the classified labels (AtariARI's category mean and the mean over variables), R^2 of the
    labels read by regression (MinAtar's positions, counters and ramp; never averaged with an
    F1), their baselines, the collapse diagnostic beside random init and the run's step 0, and
    the warnings (a test split under 1,000 rows)."""
    random_init = result.get("random_init") or {}
    collapse = result.get("collapse") or {}
    return {
        "probes": str(encoder.out),
        "computed": computed,
        "unfinished": encoder.unfinished,
        "game": result["store"]["game"],
        "readout": result.get("readout"),
        "features": result.get("features"),
        "headline": result.get("headline"),
        # AtariARI's headline is the mean of the category means; "overall" is the mean over
        # every classified variable.
        "category_mean_f1": result.get("across_categories"),
        "overall_f1": result.get("overall"),
        "categories": result.get("categories"),
        "r2": result.get("r2"),
        "coordinates": result.get("regression"),
        "majority_f1": result.get("majority", {}).get("overall"),
        "random_init_f1": random_init.get("overall"),
        "random_init_r2": (random_init.get("r2") or {}).get("mean"),
        "reward_f1": result.get("reward", {}).get("f1"),
        "action_accuracy": result.get("action", {}).get("accuracy"),
        # mean pairwise cosine of the projection: 1 is collapse; beside its references
        "cosine": {
            name: (collapse.get(name) or {}).get("projection")
            for name in ("encoder", "random_init", "step0")
            if name in collapse
        },
        "test_rows": result.get("split", {}).get("rows", {}).get("test"),
        "warnings": result.get("warnings") or [],
        "seconds": result.get("seconds", {}).get("total"),
    }


def add_probe_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``probe`` on an argparse sub-parser set; the handler is ``args.handler``."""
    p = subparsers.add_parser(
        "probe",
        help="linear probes of frozen encoders: AtariARI state variables, reward, action",
        description="Probe each run's frozen encoder on a store with RAM (an AtariARI-annotated "
        "game) or with MinAtar's game-state labels: each label read by its kind (F1 of a "
        "classifier for categories and AtariARI's variables; held-out R^2 of a ridge regression "
        "for MinAtar's positions, counters and ramp, never averaged with F1), a reward probe, an "
        "action probe on non-random data, beside the majority-class and random-init baselines, "
        "and the collapse diagnostic (mean pairwise cosine of the latents) beside a random "
        "encoder and the run's step 0; a test split under 1,000 rows is flagged. Writes "
        "RUN/probes.json (re-run: what is done is skipped).",
    )
    p.add_argument(
        "runs",
        type=Path,
        nargs="*",
        help="pretraining or finetuning run folders, or model/checkpoint files",
    )
    p.add_argument("--data", type=Path, required=True, help="TransitionStore folder with RAM")
    p.add_argument(
        "--random-init",
        default=None,
        choices=ENCODERS,
        help="probe a randomly initialized encoder of this architecture instead (into --out)",
    )
    p.add_argument("--seed", type=int, default=0, help="--random-init: initialization seed")
    p.add_argument("--out", type=Path, default=None, help="--random-init: folder of probes.json")
    p.add_argument(
        "--max-frames", type=int, default=None, help="rows used at most (default: the store's)"
    )
    p.add_argument("--split-seed", type=int, default=0, help="seeds the episode split")
    p.add_argument(
        "--readout",
        choices=READOUTS,
        default="lstsq",
        help="lstsq: least squares onto one-hot classes, early-stopped (the default, closed "
        "form); logistic: a multinomial logistic probe trained with early stopping (AtariARI's)",
    )
    p.add_argument(
        "--features",
        choices=FEATURES,
        default="renormalized",
        help="what the probes read: the conv map after the per-sample min-max renormalisation "
        "(default), before it (conv), or the projection y that SPR and inverse dynamics train",
    )
    p.add_argument(
        "--random-baseline-seed",
        type=int,
        default=0,
        help="seed of the random-init encoder probed on the same split as a baseline",
    )
    p.add_argument(
        "--no-random-baseline", action="store_true", help="skip the random-init baseline"
    )
    p.add_argument(
        "--no-state-probes",
        action="store_true",
        help="the reward and action probes only: for a store without RAM (a DQN Replay import) "
        "or a game AtariARI does not annotate",
    )
    p.add_argument(
        "--split-rows",
        action="store_true",
        help="print the rows each split of --data would hold (the test split after "
        "de-duplication; under 1,000 is flagged) and stop: is the probe store big enough?",
    )
    p.add_argument("--allow-unfinished", action="store_true", help="probe an unfinished run")
    p.add_argument("--overwrite", action="store_true", help="probe again what is done")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(handler=main_probe)
    return p


def split_probed(runs: list[Path]) -> tuple[list[Path], list[Path]]:
    """``sgi-lab report``'s runs: (those with a finetuning result, or without probe results,
    for the score tables; every run with probe results, for the probe table)."""
    # lazy: the probes' module loads torch (see ENCODERS)
    from sgi_lab.probes.encoder_probe import PROBES_FILE

    probed = [r for r in runs if (Path(r) / PROBES_FILE).is_file()]
    scored = [r for r in runs if (Path(r) / "eval.json").exists() or r not in probed]
    return scored, probed


def print_probes(runs: list[Path]) -> int:
    """Print the probe F1 of runs with probes.json (one row per run and store); returns 0."""
    import pandas as pd

    # lazy: the probe study's tables load pandas and torch (see ENCODERS)
    from sgi_lab.analysis.probe_study import probe_frame

    frame = probe_frame(runs)
    if frame.empty:
        return 0
    columns = [
        "folder", "game", "objective", "seed", "readout", "features", "headline_metric",
        "across_categories", "overall", "agent_localization",
        "small_object_localization", "other_localization", "score_clock_lives_display",
        "miscellaneous", "majority", "random_init", "state_r2", "random_init_r2",
        "coordinate_r2", "coordinate_within", "reward_f1", "action_accuracy", "cosine",
        "cosine_random_init", "cosine_step0", "test_rows",
    ]  # fmt: skip
    for column in columns:  # an entry made before a column was recorded has none
        if column not in frame:
            frame[column] = None
    names = frame["folder"].map(lambda f: Path(f).name)
    if "unfinished" in frame:  # a result of a run that had not finished says so
        names = names.where(~frame["unfinished"].astype(bool), names + " (unfinished)")
    shown = frame[columns].assign(folder=names)
    for column in columns[7:]:
        shown[column] = pd.to_numeric(shown[column])
    shown["seed"] = pd.to_numeric(shown["seed"]).astype("Int64")
    shown.columns = [
        c.replace("_localization", "_loc")
        .replace("score_clock_lives_display", "score_etc")
        .replace("across_categories", "category_mean")
        .replace("headline_metric", "headline")
        for c in columns
    ]
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        print(
            "\nProbes (linear probes on frozen encoders; sgi-lab probe). F1 of the classified "
            "labels: category_mean = mean of category means, AtariARI's headline; overall = "
            "mean over variables. state_r2 = mean held-out R^2 of the labels read by regression "
            "(MinAtar's positions, counters, ramp), never averaged with an F1; headline = which "
            "of the two leads. cosine = mean pairwise cosine of the projection (1: collapsed), "
            "beside a random encoder's and the run's step 0"
        )
        print(shown.to_string(index=False, float_format=lambda x: f"{x:.3f}", na_rep="-"))
    return 0
