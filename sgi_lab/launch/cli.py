r"""``sgi-lab`` command line: collect, import, info, pretrain, finetune, evaluate, report, status,
probe, run, sweep, experiment, export.

Examples::

    sgi-lab collect random --game pong --steps 100000 --seed 0 --out outputs/data/pong_random
    sgi-lab pretrain --params params/pretrain/sgi_m.yaml --data outputs/data/pong_random \
        --out outputs/runs/pretrain__sgi_m__Pong
    sgi-lab finetune --params params/finetune/reduced_lr.yaml --game pong --seed 1 \
        --pretrained outputs/runs/pretrain__sgi_m__Pong --out outputs/runs/finetune__Pong__s1
    sgi-lab report outputs/runs/finetune__* --csv outputs/report.csv
    sgi-lab status outputs/runs
    sgi-lab run pretrain -f params/notebooks/pretrain_smoke.yaml -p game Pong
    sgi-lab sweep finetune -f params/notebooks/finetune_smoke.yaml --grid seed=0,1,2
    sgi-lab experiment params/experiments/finetune_schemes.yaml --dry-run
    sgi-lab probe outputs/runs/pretrain__sgi_m__Pong --data outputs/data/pong_random
"""

from __future__ import annotations

import argparse
import functools
import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sgi_lab.base.errors import SgiLabError
from sgi_lab.launch import exchange, report_command
from sgi_lab.launch.collect_options import add_collect_options
from sgi_lab.launch.hints import pretraining_params_problem, unrecognized

# The CLI imports torch (through sgi_lab.runs.stopping) only when a command needs it.
if TYPE_CHECKING:
    from sgi_lab.runs.stopping import Deadline

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}
COMMANDS["report"] = report_command.run_report  # its own module (`sgi_lab.launch.report_command`)


def command(name: str):
    def register(fn):
        COMMANDS[name] = fn
        return fn

    return register


# -- data --------------------------------------------------------------------------------------


@command("collect")
def _collect(args: argparse.Namespace) -> int:
    # lazy: the CLI starts without torch; a command loads what it runs
    from sgi_lab.data.collect import collect_random

    store = collect_random(
        args.game,
        args.steps,
        args.out,
        seed=args.seed,
        hold_p=args.hold_p,
        chunk_size=args.chunk_size,
        overwrite=args.overwrite,
        full_action_space=args.full_action_space,
        terminal_on_life_loss=args.terminal_on_life_loss,
        progress=not args.no_progress,
        env_protocol=args.env_protocol,
    )
    print(json.dumps(store.summary(), indent=2))
    return 0


@command("import")
def _import(args: argparse.Namespace) -> int:
    # lazy: the CLI starts without torch; a command loads what it runs
    from sgi_lab.data.dqn_replay_importer import import_dqn_replay

    try:
        checkpoints = [int(c) for c in args.checkpoints.split(",") if c.strip()]
    except ValueError:
        raise ValueError(
            f"--checkpoints: expected comma-separated checkpoint numbers (e.g. 1,25,50), "
            f"got {args.checkpoints!r}"
        ) from None
    store = import_dqn_replay(
        args.src[0] if len(args.src) == 1 else args.src,
        args.game,
        checkpoints,
        args.samples,
        args.out,
        overwrite=args.overwrite,
        progress=not args.no_progress,
    )
    print(json.dumps(store.summary(), indent=2))
    return 0


@command("info")
def _info(args: argparse.Namespace) -> int:
    # lazy: the CLI starts without torch; a command loads what it runs
    from sgi_lab.base.paths import did_you_mean
    from sgi_lab.data import TransitionStore
    from sgi_lab.runs.status import read_status

    if not Path(args.store).exists():
        raise FileNotFoundError(did_you_mean(args.store, "store"))
    if read_status(args.store) is not None:  # a run folder, not a store: how far it has got
        from sgi_lab.launch.status_command import run_progress, status_table

        print(f"{args.store} is a run folder, not a store (sgi-lab status shows every run):")
        print(status_table([run_progress(args.store)]))
        return 0
    store = TransitionStore(args.store)
    print(json.dumps(store.summary(), indent=2))
    if store.sticky_action_prob:
        print(
            f"note: recorded with sticky actions (repeat probability {store.sticky_action_prob:g}),"
            " unlike Atari 100k (0)"
        )
    if args.verify:
        # lazy: the claim check loads the ALE for the game's action count (--verify only)
        from sgi_lab.probes.probe_data import store_claim_problem

        problems = store.verify()
        claim = store_claim_problem(store)
        if claim:  # the manifest's game against what the data shows
            problems.append(f"{store.path / 'manifest.json'}: {claim}")
        for problem in problems:
            print(f"sgi-lab info: {problem}", file=sys.stderr)
        if not store.manifest.checksums:
            print("sgi-lab info: no checksums recorded (an older store): counts checked only")
        print(f"verify: {'FAILED' if problems else 'ok'} ({len(problems)} problem(s))")
        return 1 if problems else 0
    return 0


@command("prune")
def _prune(args: argparse.Namespace) -> int:
    # lazy: the CLI starts without torch; a command loads what it runs
    from sgi_lab.runs.prune import prune_checkpoints

    results = prune_checkpoints(args.paths, dry_run=args.dry_run)
    freed = 0
    for r in results:
        gb = r.size / 1e9
        if r.kept:
            print(f"kept     {r.folder}: {len(r.files)} checkpoint(s), {gb:.2f} GB ({r.kept})")
            continue
        freed += r.size
        verb = "would remove" if args.dry_run else "removed"
        print(f"{verb} {r.folder}: {len(r.files)} checkpoint(s), {gb:.2f} GB")
    kept = sum(1 for r in results if r.kept)
    done = "would free" if args.dry_run else "freed"
    print(f"{done} {freed / 1e9:.2f} GB from {len(results) - kept} finished run(s); kept {kept}")
    return 0


# -- pretraining -------------------------------------------------------------------------------


@command("pretrain")
def _pretrain(args: argparse.Namespace) -> int:
    # lazy: the CLI starts without torch; a command loads what it runs
    from sgi_lab.config import PretrainConfig, load_config, parse_overrides, read_params
    from sgi_lab.runs.stopping import RunStopped, stop_on_signals
    from sgi_lab.train.pretrain import pretrain

    config = load_config(PretrainConfig, args.params, parse_overrides(args.set))
    name = read_params(args.params).get("name", Path(args.params).stem)
    stop = _deadline(args)
    try:
        with stop_on_signals(stop, signal.SIGTERM):
            model = pretrain(
                config,
                args.data,
                args.out,
                overwrite=args.overwrite,
                params_name=name,
                progress=not args.no_progress,
                stop=stop,
            )
    except RunStopped as exc:
        print(f"sgi-lab pretrain: {exc}", file=sys.stderr)
        return EXIT_STOPPED
    print(f"pretrained model: {model}")
    return 0


# -- finetuning, evaluation, report ------------------------------------------------------------


@command("finetune")
def _finetune(args: argparse.Namespace) -> int:
    import logging

    # lazy: the CLI starts without torch; a command loads what it runs
    from sgi_lab.config import ConfigError, parse_overrides
    from sgi_lab.runs.stopping import RunStopped, stop_on_signals
    from sgi_lab.train.finetune import finetune_agents, finetune_in_parts, read_agents

    if (args.params is None) == (args.agents is None):
        raise ConfigError("finetune: give --params (one config) or --agents (a shared population)")
    if args.agents is not None:
        given = [f"--{k}" for k in ("game", "seed", "pretrained", "out") if getattr(args, k)]
        if given:
            raise ConfigError(
                f"finetune --agents: {', '.join(given)} not allowed (the agents file gives each "
                "agent's game, seed, pretrained model and run folder)"
            )
        configs, outs, names = read_agents(args.agents, parse_overrides(args.set))
        train = functools.partial(finetune_agents, configs, outs, names)
    else:
        configs, outs, name = _finetune_population_args(args)
        train = functools.partial(finetune_in_parts, configs, outs, params=name)

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    stop = _deadline(args)
    try:
        with stop_on_signals(stop, signal.SIGTERM):
            runs = train(
                max_agents=_max_agents(args.max_agents),
                progress=not args.no_progress,
                overwrite=args.overwrite,
                stop=stop,
            )
    except FloatingPointError as exc:  # NaN/Inf loss; status.json says failed
        raise RuntimeError(f"{exc} (run folders {', '.join(map(str, outs))})") from exc
    except RunStopped as exc:
        print(f"sgi-lab finetune: {exc}", file=sys.stderr)
        return EXIT_STOPPED
    summaries = []
    for run in runs:
        evaluation = run.evaluation or {}
        keys = ("game", "episodes", "mean", "std", "hns", "step")
        summaries.append({"run": str(run.path), **{k: evaluation.get(k) for k in keys}})
    print(json.dumps(summaries[0] if len(summaries) == 1 else summaries, indent=2))
    return 0


def _finetune_population_args(args: argparse.Namespace) -> tuple[list, list[Path], str]:
    """``finetune --params``: the configs of every (game, seed) agent, their run folders and
    the params name."""
    # lazy: the CLI starts without torch; a command loads what it runs
    from sgi_lab.config import (
        ConfigError,
        FinetuneConfig,
        load_config,
        parse_overrides,
        read_params,
    )
    from sgi_lab.runs.folder import run_name
    from sgi_lab.train.finetune import population_configs, population_folders

    params = read_params(args.params)
    if problem := pretraining_params_problem(params, args.params):
        raise ConfigError(problem)
    name = params.get("name") or Path(args.params).stem
    overrides = parse_overrides(args.set)
    # Top-level literals of the params file (game, seed, pretrained) are defaults; flags win.
    # --game and --seed take comma lists: every (game, seed) pair is one agent of a population.
    games = _list_option(args.game, "--game") if args.game is not None else None
    seeds = _list_option(args.seed, "--seed", int) if args.seed is not None else None
    for key, value in (("game", games), ("seed", seeds)):
        if value is not None:
            overrides[key] = value[0]
        elif params.get(key) is not None and key not in overrides:
            overrides[key] = params[key]
    pattern = args.pretrained if args.pretrained is not None else params.get("pretrained")
    if pattern is not None and "pretrained" not in overrides:
        overrides["pretrained"] = str(pattern)
    base = load_config(FinetuneConfig, args.params, overrides)
    configs = population_configs(base, games or (), seeds or ())
    c = configs[0]
    default = (
        run_name(name, c.game, f"s{c.seed}") if len(configs) == 1 else run_name(name, "population")
    )
    outs = population_folders(args.out or Path("outputs") / "finetune" / default, configs)
    return configs, outs, name


# Exit status of a run that stopped cleanly at a checkpoint (--stop-after, SIGTERM) and resumes
# when the same command is run again: EX_TEMPFAIL, "try again later".
EXIT_STOPPED = 75


def _deadline(args: argparse.Namespace) -> Deadline:
    """``--stop-after DURATION`` as a `Deadline` (none: no time limit, SIGTERM still stops)."""
    # lazy: the CLI starts without torch; a command loads what it runs
    from sgi_lab.runs.stopping import Deadline, parse_duration

    return Deadline(parse_duration(args.stop_after) if args.stop_after else None)


def _max_agents(text: str) -> int | str:
    """``--max-agents``: a positive count, or ``auto``."""
    # lazy: the CLI starts without torch; a command loads what it runs
    from sgi_lab.config import ConfigError

    if str(text) == "auto":
        return "auto"
    try:
        limit = int(text)
    except ValueError:
        limit = 0
    if limit < 1:
        raise ConfigError(f"--max-agents: expected a positive count or 'auto', got {text!r}")
    return limit


def _list_option(text: str, option: str, kind: type = str) -> list:
    """``a,b,c`` -> [a, b, c] of ``kind``; a clear error naming the option otherwise."""
    # lazy: the CLI starts without torch; a command loads what it runs
    from sgi_lab.config import ConfigError

    items = [t.strip() for t in str(text).split(",")]
    if not all(items):
        raise ConfigError(f"{option}: empty item in {text!r} (write a,b,c)")
    try:
        values = [kind(t) for t in items]
    except ValueError:
        raise ConfigError(
            f"{option}: expected {kind.__name__}s separated by commas, got {text!r}"
        ) from None
    if len(set(values)) != len(values):
        raise ConfigError(f"{option}: repeated item in {text!r}")
    return values


@command("evaluate")
def _evaluate(args: argparse.Namespace) -> int:
    # lazy: the CLI starts without torch; a command loads what it runs
    from sgi_lab.base.paths import did_you_mean
    from sgi_lab.train.evaluate import evaluate_run

    if not Path(args.run).exists():  # a file: evaluate_run says what it expected instead
        raise FileNotFoundError(did_you_mean(args.run, "run folder"))
    result = evaluate_run(
        args.run,
        episodes=args.episodes,
        device=args.device,
        progress=not args.no_progress,
        allow_unfinished=args.allow_unfinished,
    )
    summary = {k: result.get(k) for k in ("game", "episodes", "mean", "std", "median", "hns")}
    print(
        json.dumps(
            {"run": str(args.run), "eval": str(Path(args.run) / "eval.json"), **summary}, indent=2
        )
    )
    return 0


# -- parser ------------------------------------------------------------------------------------


# Commands whose options are defined beside their handler, in modules that load torch, scipy or
# pandas (several seconds): `sgi-lab --help`, a mistyped command and the other commands never
# import them; each is imported when its command is named. Name -> the one line of `--help`.
DEFERRED = {
    "status": "how far the runs under a folder have got: stage, step, rate, time left, metrics",
    "probe": "linear probes of frozen encoders: AtariARI state variables, reward, action",
    "run": "execute a notebook with papermill into its own run folder",
    "sweep": "run a notebook over a grid of parameters (locally or on Ray)",
    "experiment": "run a table of the paper (params/experiments/*.yaml) as a task graph",
}


class _CommandParser(argparse.ArgumentParser):
    """A command's parser; a `DEFERRED` one is filled (``fill(self)``) when it first parses."""

    def __init__(
        self,
        *args: Any,
        fill: Callable[[argparse.ArgumentParser], None] | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self._fill = fill

    def parse_known_args(self, args=None, namespace=None):  # noqa: ANN001 (argparse's own)
        fill, self._fill = self._fill, None
        if fill is not None:
            fill(self)
        return super().parse_known_args(args, namespace)


class _Into:
    """Stands in for the sub-parser set a module's ``add_X_parser(subparsers)`` registers on:
    the parser it asks for is the one already registered under that name."""

    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs.pop("help", None)  # the listing's line is DEFERRED's
        for key, value in kwargs.items():  # description, formatter_class, epilog
            setattr(self.parser, key, value)
        return self.parser


def _fill_deferred(name: str, parser: argparse.ArgumentParser) -> None:
    """Add `DEFERRED` command ``name``'s options from its module (which sets its ``handler``)."""
    if name == "status":
        # lazy: a command's module, and torch through it, loads when the command is named
        from sgi_lab.launch.status_command import add_status_parser as add
    elif name == "probe":
        # lazy: as above
        from sgi_lab.launch.probe import add_probe_parser as add
    elif name == "run":
        # lazy: as above
        from sgi_lab.launch.notebook_runner import add_run_parser as add
    elif name == "sweep":
        # lazy: as above
        from sgi_lab.launch.sweep import add_sweep_parser as add
    else:
        # lazy: as above
        from sgi_lab.experiments.options import add_experiment_parser as add
    add(_Into(parser))


def _add_stop_after(p: argparse.ArgumentParser, what: str, evaluation: bool = False) -> None:
    p.add_argument(
        "--stop-after",
        default=None,
        metavar="DURATION",
        help=f"stop cleanly after this wall-clock time (540, 9m, 1.5h): {what} and the command "
        "exits with status 75; the same command resumes. "
        + ("The final evaluation starts only with half of it left. " if evaluation else "")
        + "SIGTERM stops the same way",
    )


def build_parser(complete: bool = False) -> argparse.ArgumentParser:
    """The ``sgi-lab`` parser. The `DEFERRED` commands get their options when one is named (or
    all at once with ``complete``, for whoever reads every command's options, as the docs' check)."""
    parser = argparse.ArgumentParser(
        prog="sgi-lab", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_CommandParser)

    p = sub.add_parser("collect", help="collect an offline dataset into a TransitionStore")
    p.add_argument(
        "policy",
        choices=["random", "exploratory"],
        help="random: the paper's Random policy; exploratory: the IDF curiosity agent (SGI-E)",
    )
    # lazy: the CLI starts without torch; a command loads what it runs
    from sgi_lab.launch import collect_exploratory

    # --envs, --params, --set; routes `exploratory` to its collector, `random` back to ours.
    collect_exploratory.add_arguments(p, COMMANDS["collect"])
    add_collect_options(p)

    p = sub.add_parser("import", help="import external data into a TransitionStore")
    p.add_argument("format", choices=["dqn-replay", "minari"])
    p.add_argument(
        "--src",
        type=Path,
        nargs="+",
        required=True,
        help="dqn-replay: folders of Dopamine checkpoint files (a run's replay_logs), imported one "
        "after another, e.g. Weak: checkpoint 0 of runs 1-5; minari: one Minari dataset folder",
    )
    p.add_argument("--game", help="dqn-replay: the game; minari: a foreign dataset's (its env's)")
    p.add_argument("--checkpoints", help="dqn-replay: comma-separated numbers, e.g. 1,25,50")
    p.add_argument("--samples", type=int, default=None, help="transitions from each checkpoint")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser("pretrain", help="offline pretraining (SGI, its ablations, ATC, BC)")
    p.add_argument("--params", type=Path, required=True, help="params/pretrain/NAME.yaml")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override")
    p.add_argument("--data", type=Path, required=True, help="TransitionStore folder")
    p.add_argument("--out", type=Path, required=True, help="run folder (re-run to resume)")
    _add_stop_after(p, "the run checkpoints at its current step")
    p.add_argument("--overwrite", action="store_true", help="discard an existing run there")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser(
        "finetune", help="finetune on Atari 100k or MinAtar (Rainbow + SPR), then evaluate"
    )
    p.add_argument("--params", type=Path, default=None, help="params/finetune/NAME.yaml")
    p.add_argument(
        "--agents",
        type=Path,
        default=None,
        help="instead of --params: a shared population's agents file (agents: [{params, game, "
        "seed, pretrained, out}], each agent its own params file: pretrained and from-scratch "
        "agents in one batch; an experiment with share_populations writes them)",
    )
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override")
    p.add_argument(
        "--game",
        default=None,
        help="an Atari 100k game (pong) or a MinAtar one (minatar/breakout), or games a,b,c "
        "(default: the params file's); with several games or seeds every (game, seed) pair is "
        "one agent of a population trained as one batch",
    )
    p.add_argument("--seed", default=None, help="seed, or seeds 0,1,2")
    p.add_argument(
        "--pretrained",
        default=None,
        help="pretraining run folder (or a model file, or a folder of `sgi-lab export hub`); "
        "{game} is filled in per agent, e.g. 'outputs/runs/pretrain__sgi_m__{game}'",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="run folder (re-run to resume); for a population the folder holding one run "
        "folder per agent, OUT/<game>__s<seed>",
    )
    p.add_argument(
        "--max-agents",
        default="auto",
        help="agents per population: more (game, seed) pairs than this train as several "
        "populations, one after another, into the same run folders; 'auto' (default): as many "
        "as the device's free memory holds (sgi_lab.train.capacity)",
    )
    _add_stop_after(p, "every agent checkpoints at its current step", evaluation=True)
    p.add_argument("--overwrite", action="store_true", help="discard an existing run there")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser("evaluate", help="evaluate a finetuning run's final model (eval.json)")
    p.add_argument("run", type=Path, help="finetuning run folder")
    p.add_argument("--episodes", type=int, default=None, help="default: the run's eval_episodes")
    p.add_argument("--device", default=None, help="default: the run's device setting")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--allow-unfinished", action="store_true", help="evaluate a run that never finished"
    )

    p = sub.add_parser("report", help="per-game and aggregate results of finetuning runs")
    p.add_argument("runs", type=Path, nargs="+", help="finetuning run folders")
    p.add_argument("--csv", type=Path, default=None, help="write the tables as CSV")
    p.add_argument("--reps", type=int, default=5000, help="bootstrap resamples")
    p.add_argument(
        "--curves",
        type=Path,
        default=None,
        metavar="OUT.html",
        help="also write the runs' training curves overlaid, one colour per run, to OUT.html",
    )
    p.add_argument(
        "--baseline",
        default=None,
        metavar="METHOD",
        help="also print each method's probability of improvement over METHOD (a method as the "
        "report names it, e.g. sgi_none): the chance that a run of the method beats a run of "
        "METHOD on a game drawn at random from those both have (rliable; ties count half; 0.5: "
        "neither is better), on their normalised scores, with a 95%% stratified bootstrap CI",
    )
    p.add_argument(
        "--allow-unfinished",
        action="store_true",
        help="include runs that never finished (marked in an 'unfinished' column)",
    )

    p = sub.add_parser("info", help="print a store's summary (a run folder: its status)")
    p.add_argument("store", type=Path)
    p.add_argument(
        "--verify",
        action="store_true",
        help="read every chunk: checksums and counts against the manifest (exit 1 if not)",
    )
    p = sub.add_parser(
        "prune",
        help="delete the checkpoints of finished runs (an unfinished run's, a folder in use and "
        "any file not named ckpt_*.pt are kept)",
        description="Delete checkpoints/ckpt_*.pt of every finished training run (status "
        "finished and its model.pt there) at or below PATHS: what resumes an interrupted run, "
        "and no longer needed once it has finished, unless you mean to start from an "
        "intermediate step. Unfinished runs keep theirs (they resume from them).",
    )
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="run or study folders")
    p.add_argument("--dry-run", action="store_true", help="list what would go, delete nothing")
    # Commands whose options live beside their handler register their parser when named.
    for name, help_text in DEFERRED.items():
        fill = functools.partial(_fill_deferred, name)
        p = sub.add_parser(name, help=help_text, fill=None if complete else fill)
        if complete:
            fill(p)
    exchange.add_commands(sub, COMMANDS)  # export, import minari, report --export
    return parser


def main(argv: list[str] | None = None) -> int:
    # lazy: the CLI starts without torch; a command loads what it runs
    from sgi_lab.base.driver import die_with_driver

    die_with_driver()  # a task of an experiment ends with its driver
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        parser.error(unrecognized(extra))
    try:
        # lazy: as die_with_driver (the CLI starts without torch); a mistyped
        # SGI_LAB_TENSORBOARD / SGI_LAB_WANDB is refused before any run folder is touched
        from sgi_lab.runs.tracking import tracking_settings

        tracking_settings()
        handler = getattr(args, "handler", None) or COMMANDS[args.command]
        return handler(args) or 0
    except SgiLabError as exc:  # what sgi-lab refuses: one line, the class's exit status
        print(f"sgi-lab {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except (ValueError, RuntimeError, OSError) as exc:  # FileExistsError etc. are OSErrors
        print(f"sgi-lab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"sgi-lab {args.command}: interrupted (re-run the same command to resume)",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
