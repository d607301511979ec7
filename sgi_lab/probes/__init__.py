"""Linear probes of frozen encoders: AtariARI's game-state variables read from the console RAM,
a reward probe and an action probe (Anand et al., 2019; Zhang et al., 2022)."""

from sgi_lab.probes.atariari import (
    CATEGORIES,
    UnannotatedGameError,
    Variable,
    annotated_games,
    annotations,
    labels_from_ram,
)
from sgi_lab.probes.linear import ProbeSettings, category_averages, fit_linear_probes
from sgi_lab.probes.probe import (
    PROBES_FILE,
    ProbeEncoder,
    ProbeInputError,
    check_probe_store,
    probe_encoder,
    split_episodes,
)
from sgi_lab.probes.results import probe_run, read_probes, write_probes

__all__ = [
    "CATEGORIES",
    "PROBES_FILE",
    "ProbeEncoder",
    "ProbeInputError",
    "ProbeSettings",
    "UnannotatedGameError",
    "Variable",
    "annotated_games",
    "annotations",
    "category_averages",
    "check_probe_store",
    "fit_linear_probes",
    "labels_from_ram",
    "probe_encoder",
    "probe_run",
    "read_probes",
    "split_episodes",
    "write_probes",
]
