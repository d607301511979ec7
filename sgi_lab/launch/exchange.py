"""Data and results in the field's formats, from the command line:

* ``sgi-lab export minari STORE OUT``: a store as a Minari dataset folder, lossless
  (`sgi_lab.data.minari_exchange`), with a dataset card (`sgi_lab.data.dataset_card`);
  ``sgi-lab import minari --src DATASET --out STORE`` back;
* ``sgi-lab export replay RUN OUT``: a finished finetuning run's whole replay as a store
  (`sgi_lab.data.replay_export`), and ``sgi-lab select STORE OUT --weak F | --mixed ROWS``
  its Weak and Mixed selections (`sgi_lab.data.replay_select`);
* ``sgi-lab export hub RUN OUT``: a finished run's model as a Hugging Face Hub folder
  (`sgi_lab.analysis.hub_export`), which ``sgi-lab finetune --pretrained OUT`` loads;
* ``sgi-lab report RUNS --export scores.npz``: per-seed score matrices in rliable's shape
  (`sgi_lab.analysis.score_matrices`).
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path

from sgi_lab.base.paths import did_you_mean
from sgi_lab.config import ConfigError

Handler = Callable[[argparse.Namespace], int]


def add_commands(subparsers: argparse._SubParsersAction, commands: dict[str, Handler]) -> None:
    """Register ``export`` and ``select``, and extend the CLI's ``import`` (``minari``) and
    ``report`` (``--export``), whose own handlers are ``commands["import"]`` and
    ``commands["report"]``."""
    add_export_parser(subparsers)
    add_select_parser(subparsers)
    route_import(subparsers.choices["import"], commands["import"])
    add_export_option(subparsers.choices["report"], commands["report"])


# -- export ------------------------------------------------------------------------------------


def add_export_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``export`` (``minari``, ``hub`` and ``replay``) on the CLI's sub-parsers."""
    p = subparsers.add_parser(
        "export",
        help="a store as a Minari dataset, a run's model as a Hugging Face Hub folder, or an "
        "agent's whole replay as a store",
        description="minari: STORE -> a Minari dataset folder OUT (raw frames, never JPEG; the "
        "store's manifest in its metadata; `sgi-lab import minari` reads it back bit for bit) "
        "with a dataset card OUT/README.md. "
        "hub: a finished run RUN -> OUT with model.safetensors, config.yaml, sgi_lab.json and a "
        "model card README.md (`huggingface-cli upload USER/NAME OUT` publishes it; "
        "`sgi-lab finetune --pretrained OUT` loads it). OUT must be new or empty. "
        "replay: a finished finetuning run RUN -> the store OUT of every transition its agent "
        "lived, from its last checkpoint, the agent's config, score, checkpoints and learning "
        "curve in the manifest (`sgi-lab select` takes Weak and Mixed from it).",
    )
    p.add_argument("format", choices=["minari", "hub", "replay"])
    p.add_argument(
        "source", type=Path, help="minari: a store folder; hub, replay: a finished run folder"
    )
    p.add_argument("out", type=Path, help="minari, hub: a new (or empty) folder; replay: a store")
    p.add_argument(
        "--overwrite", action="store_true", help="replay: replace a store of ours at OUT"
    )
    p.add_argument(
        "--dataset-id",
        default=None,
        help="minari: the dataset's id (default sgi-lab/<game>/<source>-v0); install the folder "
        "as $MINARI_DATASETS_PATH/<id> for minari.load_dataset",
    )
    p.set_defaults(handler=export)
    return p


def export(args: argparse.Namespace) -> int:
    """``sgi-lab export FORMAT SOURCE OUT``."""
    if not args.source.exists():
        raise FileNotFoundError(
            did_you_mean(args.source, "store" if args.format == "minari" else "run folder")
        )
    started = time.perf_counter()
    if args.format == "hub":
        # lazy: the CLI starts without torch; a command loads what it runs
        from sgi_lab.analysis.hub_export import export_hub

        print(f"hub folder: {export_hub(args.source, args.out)}")
        return 0
    if args.format == "replay":
        # lazy: the CLI starts without torch; a command loads what it runs
        from sgi_lab.data.replay_export import export_replay

        return _print_store(export_replay(args.source, args.out, overwrite=args.overwrite), started)
    # lazy: Minari is an optional extra, imported by the command that needs it
    from sgi_lab.data.dataset_card import write_dataset_card
    from sgi_lab.data.minari_exchange import export_minari, minari_metadata

    out = export_minari(args.source, args.out, dataset_id=args.dataset_id)
    meta = minari_metadata(out)
    write_dataset_card(args.source, out, meta["dataset_id"])
    _print_speed(out, meta["dataset_id"], meta["total_steps"], meta["total_episodes"], started)
    return 0


def _print_speed(path: Path, name: str, steps: int, episodes: int, started: float) -> None:
    seconds = time.perf_counter() - started
    size = sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
    summary = {
        "path": str(path), "dataset_id": name, "transitions": steps, "episodes": episodes,
        "mb": round(size / 1e6, 3), "seconds": round(seconds, 3),
        "transitions_per_s": round(steps / max(seconds, 1e-9)),
    }  # fmt: skip
    print(json.dumps(summary, indent=2))


def _print_store(store, started: float) -> int:
    """A written store's summary and the seconds it took, as JSON."""
    summary = store.summary()
    summary.update(path=str(store.path), seconds=round(time.perf_counter() - started, 3))
    print(json.dumps(summary, indent=2))
    return 0


# -- select ------------------------------------------------------------------------------------


def add_select_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``select`` (Weak and Mixed of an agent's replay) on the CLI's sub-parsers."""
    p = subparsers.add_parser(
        "select",
        help="Weak or Mixed: a selection of an agent's replay store (sgi-lab export replay)",
        description="Weak: the first FRACTION of the run's steps. Mixed: ROWS rows drawn "
        "uniformly over the whole run in segments of --segment rows (each segment starts an "
        "episode, so no K-step sequence crosses two). The selection's manifest records what "
        "was selected, of which replay, and the agent that made it.",
    )
    p.add_argument("store", type=Path, help="an agent's replay store (source 'replay')")
    p.add_argument("out", type=Path, help="the selection's store")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--weak", type=float, metavar="FRACTION", help="the first FRACTION (0-1]")
    how.add_argument("--mixed", type=int, metavar="ROWS", help="ROWS rows over the whole run")
    p.add_argument("--seed", type=int, default=0, help="--mixed: which segments (default 0)")
    p.add_argument("--segment", type=int, default=None, help="--mixed: rows a segment (1000)")
    p.add_argument("--overwrite", action="store_true", help="replace a store of ours at OUT")
    p.set_defaults(handler=select)
    return p


def select(args: argparse.Namespace) -> int:
    """``sgi-lab select STORE OUT --weak FRACTION | --mixed ROWS [--seed S] [--segment L]``."""
    if not args.store.exists():
        raise FileNotFoundError(did_you_mean(args.store, "store"))
    if args.weak is not None and args.segment is not None:
        raise ConfigError("select: --segment is --mixed's; --weak keeps one piece")
    started = time.perf_counter()
    # lazy: the CLI starts without torch; a command loads what it runs
    from sgi_lab.data.replay_select import DEFAULT_SEGMENT, select_mixed, select_weak

    if args.weak is not None:
        store = select_weak(args.store, args.out, args.weak, overwrite=args.overwrite)
    else:
        segment = DEFAULT_SEGMENT if args.segment is None else args.segment
        store = select_mixed(
            args.store, args.out, args.mixed, args.seed, segment, overwrite=args.overwrite
        )
    return _print_store(store, started)


# -- import ------------------------------------------------------------------------------------


def route_import(parser: argparse.ArgumentParser, dqn_replay: Handler) -> None:
    """``import``'s handler: ``dqn-replay`` to ``dqn_replay`` (the CLI's own), ``minari`` here."""
    parser.set_defaults(handler=functools.partial(import_data, dqn_replay=dqn_replay))


def import_data(args: argparse.Namespace, dqn_replay: Handler) -> int:
    """``sgi-lab import FORMAT --src ... --out STORE``."""
    if args.format == "dqn-replay":
        missing = [o for o in ("game", "checkpoints") if getattr(args, o) is None]
        if missing:
            raise ConfigError(f"import dqn-replay: --{' and --'.join(missing)} required")
        return dqn_replay(args)
    if len(args.src) != 1 or args.checkpoints is not None or args.samples is not None:
        raise ConfigError(
            "import minari: --src names one dataset folder (its data/ or the folder holding "
            "it); --checkpoints and --samples are dqn-replay's"
        )
    # lazy: Minari is an optional extra, imported by the command that needs it
    from sgi_lab.data.minari_exchange import import_minari

    started = time.perf_counter()
    store = import_minari(args.src[0], args.out, game=args.game, overwrite=args.overwrite)
    summary = store.summary()
    summary["seconds"] = round(time.perf_counter() - started, 3)
    print(json.dumps(summary, indent=2))
    return 0


# -- report --export ---------------------------------------------------------------------------


def add_export_option(parser: argparse.ArgumentParser, report: Handler) -> None:
    """``report --export FILE``: the report, then its runs' per-seed score matrices."""
    parser.add_argument(
        "--export",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="also write the runs' per-seed score matrices, {method: array(runs, games)} of raw "
        "and normalised scores in rliable's shape, to FILE.npz (np.load(allow_pickle=False)) or "
        "FILE.json; repeat for both; an existing file is never overwritten",
    )
    parser.set_defaults(handler=functools.partial(report_and_export, report=report))


def report_and_export(args: argparse.Namespace, report: Handler) -> int:
    """The report, then ``--export``'s files (their names checked before anything runs)."""
    for path in args.export:
        if path.suffix.lower() not in (".npz", ".json"):
            raise ValueError(f"--export: {path} must end in .npz or .json")
        if path.exists():
            raise FileExistsError(f"--export: {path} exists; name a new file")
    runs = list(args.runs)  # the report sets aside runs with probe results only
    status = report(args)
    if status or not args.export:
        return status
    # lazy: the CLI starts without torch; a command loads what it runs
    from sgi_lab.analysis.score_matrices import score_matrices, write_score_matrices
    from sgi_lab.launch.probe import split_probed

    matrices = score_matrices(split_probed(runs)[0], allow_unfinished=args.allow_unfinished)
    shape = ", ".join(f"{m} {a.shape[0]}x{a.shape[1]}" for m, a in matrices.raw.items())
    for path in args.export:
        write_score_matrices(matrices, path)
        print(f"wrote {path}: (runs x games) per method: {shape}; {matrices.normalization}")
    return 0
