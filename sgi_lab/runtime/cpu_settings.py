"""CPU precision and memory layout chosen by measuring the real step on this machine.

Which of bf16 autocast and channels-last is fastest depends on the CPU, and no CPU flag tells
(benchmarks/README.md, "Why the CPU runtime settings"). So with a config's ``cpu_amp`` /
``channels_last`` set to ``"auto"`` (the default) a run times a few real steps under each
candidate setting and keeps the fastest. The figures are cached in
``~/.cache/sgi-lab/cpu_settings.json`` (or ``$SGI_LAB_CACHE``) under a key naming the CPU model,
torch version, thread count, workload and the installed code's folder (a clone or a virtualenv
of its own measures for itself), so a machine measures once; an explicit true/false always wins.

A cached time stands for the CPU, not for the load it met: a measurement taken while the
machine was busy (a 1-minute load average of at least half its cores before timing, the rule
`sgi_lab.base.threads.busy_machine_threads` applies) still chooses for the run that made it,
but is not cached, and a one-line message says so. On a 2-core machine shared with a study,
two MinAtar workloads once cached opposite ``channels_last`` choices from such noise.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from sgi_lab.base.files import atomic_write_text, cpu_model
from sgi_lab.base.threads import current_load
from sgi_lab.runtime.device import cpu_has_native_bf16

__all__ = [
    "AUTO",
    "CpuChoice",
    "busy_note",
    "cache_file",
    "cache_key",
    "choose_cpu_settings",
    "load_average",
    "settle",
    "time_step",
]

AUTO = "auto"

log = logging.getLogger(__name__)

# The installed code's folder (a clone's sgi_lab/, or a virtualenv's site-packages copy): part
# of the cache key, so clones and virtualenvs sharing one home never share measurements.
CODE_FOLDER = str(Path(__file__).resolve().parents[1])


def cache_file() -> Path:
    """Where measured choices are kept: ``$SGI_LAB_CACHE/cpu_settings.json``, else the user's
    cache folder (``$XDG_CACHE_HOME`` or ``~/.cache``) under ``sgi-lab``."""
    root = os.environ.get("SGI_LAB_CACHE")
    if root:
        return Path(root) / "cpu_settings.json"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sgi-lab" / "cpu_settings.json"


@dataclass(frozen=True)
class CpuChoice:
    """The settings a CPU run uses, and why.

    Attributes:
        bf16: bf16 autocast.
        channels_last: channels-last memory format.
        times: seconds per step of every candidate measured, ``"bf16=..,channels_last=.."``.
        source: ``"explicit"`` (nothing to choose), ``"measured"`` or ``"cache"``.
        key: the cache entry (CPU model, torch version, threads, workload, code folder).
        note: why a measurement was not cached (the machine was busy), else empty.
    """

    bf16: bool
    channels_last: bool
    times: dict[str, float] = field(default_factory=dict)
    source: str = "explicit"
    key: str = ""
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        out = {
            "bf16": self.bf16,
            "channels_last": self.channels_last,
            "times": self.times,
            "source": self.source,
            "key": self.key,
        }
        if self.note:
            out["note"] = self.note
        return out


def _label(bf16: bool, channels_last: bool) -> str:
    return f"bf16={bf16},channels_last={channels_last}"


def load_average() -> float | None:
    """The cores other work keeps busy now (`current_load`: a 1-second reading of ``/proc/stat``,
    else the 1-minute load average); None where the platform has neither."""
    return current_load()


def busy_note(load: float | None, cores: int | None = None) -> str:
    """Why a measurement taken at ``load`` (1-minute load average) is not cached: empty when the
    machine was idle enough (load below half the ``cores``, default this machine's) or no load
    is known."""
    cores = cores or os.cpu_count() or 1
    if load is None or load < cores / 2:
        return ""
    return (
        f"cpu settings measured on a busy machine (load {load:.1f} on {cores} cores): used for "
        "this run only, not cached; an idle machine's measurement is kept"
    )


def cache_key(workload: str) -> str:
    """The cache entry of ``workload`` here: CPU model, torch version, threads, workload and
    the installed code's folder (`CODE_FOLDER`)."""
    return (
        f"{cpu_model()}|torch {torch.__version__}|threads {torch.get_num_threads()}|{workload}"
        f"|code {CODE_FOLDER}"
    )


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        payload = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return payload if isinstance(payload, dict) else {}


def _write_cache(path: Path, key: str, times: dict[str, float]) -> None:
    """Merge ``times`` into the cache (atomic replace; a cache that cannot be written is only
    a lost shortcut, never an error)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = _read_cache(path)
        payload[key] = {**payload.get(key, {}), **times}
        atomic_write_text(path, json.dumps(payload, indent=2, sort_keys=True))
    except OSError:
        pass


def choose_cpu_settings(
    workload: str,
    bf16: bool | str,
    channels_last: bool | str,
    measure: Callable[[bool, bool], float],
    cache: Path | None = None,
    native_bf16: bool | None = None,
    load: Callable[[], float | None] | None = None,
) -> CpuChoice:
    """Settle ``"auto"`` settings for ``workload`` on this CPU by measurement (or the cache).

    Candidates: every combination of the settings given as ``"auto"`` (bf16 only where the CPU
    has native bf16 instructions: emulated bf16 is never faster); an explicit value is the only
    candidate of its axis. With one candidate nothing is measured.

    Args:
        workload: what is timed, e.g. ``"finetune-update/nature/agents=4"``; part of the key.
        bf16: True, False or ``"auto"``.
        channels_last: True, False or ``"auto"``.
        measure: ``measure(bf16, channels_last)`` -> seconds per step (called once per
            candidate missing from the cache).
        cache: the cache file (default `cache_file`).
        native_bf16: whether bf16 can pay here (default `cpu_has_native_bf16`).
        load: reads the 1-minute load average before measuring (default `load_average`); a
            measurement on a busy machine (`busy_note`) is used but not cached.

    Returns:
        The fastest candidate, with every candidate's time (and, measured busy, the note).
    """
    for name, value in (("cpu_amp", bf16), ("channels_last", channels_last)):
        if value != AUTO and not isinstance(value, bool):
            raise ValueError(f"{name}: expected true, false or 'auto', got {value!r}")
    native = cpu_has_native_bf16() if native_bf16 is None else native_bf16
    bf16_options: Sequence[bool] = (
        [bf16] if isinstance(bf16, bool) else ([False, True] if native else [False])
    )
    layouts: Sequence[bool] = [channels_last] if isinstance(channels_last, bool) else [False, True]
    candidates = [(b, c) for b in bf16_options for c in layouts]
    if len(candidates) == 1:
        return CpuChoice(*candidates[0])
    key = cache_key(workload)
    path = cache or cache_file()
    known = _read_cache(path).get(key, {})
    times = {_label(*c): float(known[_label(*c)]) for c in candidates if _label(*c) in known}
    source, note = "cache", ""
    missing = [c for c in candidates if _label(*c) not in times]
    if missing:
        source = "measured"
        note = busy_note((load or load_average)())
        for c in missing:
            times[_label(*c)] = float(measure(*c))
        if note:
            log.warning("%s", note)
        else:
            _write_cache(path, key, times)
    best = min(candidates, key=lambda c: times[_label(*c)])
    return CpuChoice(best[0], best[1], times, source, key, note)


OVERRIDE_ENV = "SGI_LAB_CPU_SETTINGS"
"""Settle every ``"auto"`` without measuring, e.g. ``cpu_amp=false,channels_last=true`` (tests,
CI, or a shared machine whose timings mean nothing); an explicit config value still wins."""


def _override() -> dict[str, bool]:
    text = os.environ.get(OVERRIDE_ENV, "").strip()
    if not text:
        return {}
    out = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        key, value = key.strip(), value.strip().lower()
        if key not in ("cpu_amp", "channels_last") or value not in ("true", "false"):
            raise ValueError(
                f"{OVERRIDE_ENV}: expected cpu_amp=true|false,channels_last=true|false, "
                f"got {text!r}"
            )
        out[key] = value == "true"
    return out


def settle(
    config: Any,
    device: torch.device,
    workload: str,
    measure: Callable[[bool, bool], float],
    cache: Path | None = None,
) -> tuple[Any, CpuChoice]:
    """``config`` (a dataclass with ``cpu_amp`` and ``channels_last``) with no ``"auto"`` left,
    and the choice made: on a CPU by `choose_cpu_settings`, elsewhere channels-last on and
    ``cpu_amp`` moot. ``$SGI_LAB_CPU_SETTINGS`` settles ``"auto"`` without measuring."""
    bf16, layout = config.cpu_amp, config.channels_last
    forced = _override()
    if bf16 == AUTO and "cpu_amp" in forced:
        bf16 = forced["cpu_amp"]
    if layout == AUTO and "channels_last" in forced:
        layout = forced["channels_last"]
    if device.type != "cpu":
        choice = CpuChoice(bf16 if isinstance(bf16, bool) else True, layout is not False)
    else:
        choice = choose_cpu_settings(workload, bf16, layout, measure, cache)
    settled = dataclasses.replace(config, cpu_amp=choice.bf16, channels_last=choice.channels_last)
    return settled, choice


def time_step(
    step: Callable[[], Any], warmup: int = 2, repeats: int = 3, budget_s: float = 0.0
) -> float:
    """The fastest of at least ``repeats`` timed calls of ``step`` after ``warmup`` untimed ones,
    timing more calls while less than ``budget_s`` seconds have gone into timed calls (fast
    steps get more tries; the minimum is the steadier figure on a shared machine)."""
    for _ in range(warmup):
        step()
    best, spent, count = float("inf"), 0.0, 0
    while count < repeats or (spent < budget_s and count < 50):
        start = time.perf_counter()
        step()
        took = time.perf_counter() - start
        best, spent, count = min(best, took), spent + took, count + 1
    return best
