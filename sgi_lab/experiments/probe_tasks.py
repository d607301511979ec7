"""An experiment's probes as tasks (`sgi_lab.experiments.graph` builds the `Task`s): ``sgi-lab
probe`` of each pretraining run, or of random encoders, on a data source's store of each game;
a store the experiment does not make is checked before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sgi_lab.config import ConfigError
from sgi_lab.experiments.spec import NO_PRETRAINING, Experiment
from sgi_lab.probes.atariari import UnannotatedGameError
from sgi_lab.probes.probe_data import ProbeInputError, check_probe_store
from sgi_lab.runs.folder import run_name

__all__ = ["check_folder_store", "probe_task_fields"]


def check_folder_store(store: Path, where: str, game: str) -> None:
    """An existing folder store a probe reads, checked up front (before collection and
    pretraining run): a store of this game, with RAM, whose manifest's claims hold. Its
    checksums are verified by the probe itself; a folder not made yet is the probe's to refuse.

    Raises:
        ConfigError: naming the data source, the store and what is wrong.
    """
    if not store.exists():
        return
    try:
        opened = check_probe_store(store, option=where, verify=False)
    except (ProbeInputError, UnannotatedGameError) as exc:
        raise ConfigError(str(exc) if str(exc).startswith(where) else f"{where}: {exc}") from None
    if opened.game != game:
        raise ConfigError(f"{where}: {store} holds {opened.game} frames, not {game}'s")


def probe_task_fields(
    experiment: Experiment,
    out: Path,
    data_tasks: dict[tuple[str, str], Any],
    pretrain_configs: dict[str, Any],
    missing: dict[str, list[str]],
    dropped: list[str],
) -> list[dict[str, Any]]:
    """The fields of one probe task per (probe config, pretraining config or random seed,
    game): ``sgi-lab probe`` of the pretraining run (its probes.json) or of a random encoder (a
    folder under ``probes/``), on the data source's store of that game (``data_tasks``: a
    source's task, or the folder it names). A probe whose data or pretraining was dropped is
    named in ``dropped``."""
    tasks = []
    for spec in experiment.probe:
        if spec.data in missing:
            dropped.append(f"probe {spec.name} (its data {spec.data!r} was dropped)")
            continue
        options = ["--split-seed", str(spec.split_seed), "--no-progress"]
        options += ["--readout", spec.readout, "--features", spec.features]
        if spec.max_frames is not None:
            options += ["--max-frames", str(spec.max_frames)]
        if not spec.random_baseline:
            options.append("--no-random-baseline")
        for base in spec.pretrain:
            if base != NO_PRETRAINING and base not in pretrain_configs:
                dropped.append(f"probe {spec.name}@{base} (its pretraining was dropped)")
                continue
            for game in experiment.games:
                source = data_tasks[spec.data, game]
                named = isinstance(source, Path)  # a folder the experiment does not make
                store = source if named else source.folder
                data_deps = () if named else (source.id,)
                if named:
                    check_folder_store(store, f"data.{spec.data}", game)
                key = {
                    "store": str(store),
                    "split_seed": spec.split_seed,
                    "max_frames": spec.max_frames,
                    "random_baseline_seed": 0 if spec.random_baseline else None,
                    "readout": spec.readout,
                    "features": spec.features,
                }
                if base == NO_PRETRAINING:
                    encoders = [
                        (
                            out / "probes" / run_name(spec.name, "random_init", f"s{seed}", game),
                            ("--random-init", spec.encoder, "--seed", str(seed)),
                            (),
                            spec.encoder,
                            seed,
                        )
                        for seed in spec.seeds
                    ]
                else:
                    folder = out / "pretrain" / run_name(base, game)
                    config = pretrain_configs[base]
                    encoders = [(folder, (), (f"pretrain/{folder.name}",), config.encoder, None)]
                for folder, how, deps, encoder, seed in encoders:
                    if how:
                        argv = ("probe", *how, "--out", str(folder))
                    else:
                        argv = ("probe", str(folder))
                    label = base if seed is None else f"{base}__s{seed}"
                    tasks.append(
                        {
                            "id": f"probe/{run_name(spec.name, label, game)}",
                            "kind": "probe",
                            "folder": folder,
                            "deps": (*deps, *data_deps),
                            "argv": (*argv, "--data", str(store), *options),
                            "stage": "probe",
                            "encoder": encoder,
                            "steps": spec.max_frames or getattr(source, "steps", 0),
                            "probe": {**key, "objective": base, "seed": seed, "game": game},
                        }
                    )
    return tasks
