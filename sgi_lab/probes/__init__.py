"""Linear probes of frozen encoders: AtariARI's game-state variables read from the console RAM
(`atariari`) or a MinAtar store's recorded game state (`game_labels`), a reward probe and an
action probe (Anand et al., 2019; Zhang et al., 2022), with a least-squares or logistic readout
on the renormalized conv map, the conv map or the projection, and ridge regressions of the
coordinates (`linear`, `state_probes`); each label read by its kind (`kinds`: MinAtar's
positions, counters and ramp by R^2, categories by F1), small test splits flagged, and the
collapse diagnostic (`collapse`). Probing one encoder (`encoder_probe`) on a split of a store's
episodes (`splits`), the store checked and the result keyed (`probe_data`), and ``probes.json``
(`results`)."""

from sgi_lab.probes.atariari import (
    CATEGORIES,
    UnannotatedGameError,
    Variable,
    annotated_games,
    annotations,
    labels_from_ram,
)
from sgi_lab.probes.collapse import mean_pairwise_cosine
from sgi_lab.probes.encoder_probe import PROBES_FILE, ProbeEncoder, probe_encoder
from sgi_lab.probes.game_labels import state_labels, state_variables
from sgi_lab.probes.kinds import KINDS, MIN_TEST_ROWS
from sgi_lab.probes.linear import (
    FEATURES,
    READOUTS,
    ProbeSettings,
    category_averages,
    fit_linear_probes,
    fit_logistic_probes,
    fit_probes,
    fit_ridge_regressions,
)
from sgi_lab.probes.probe_data import ProbeInputError, check_probe_store
from sgi_lab.probes.results import probe_run, read_probes, write_probes
from sgi_lab.probes.splits import split_episodes, split_rows

__all__ = [
    "CATEGORIES",
    "FEATURES",
    "KINDS",
    "MIN_TEST_ROWS",
    "PROBES_FILE",
    "READOUTS",
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
    "fit_logistic_probes",
    "fit_probes",
    "fit_ridge_regressions",
    "labels_from_ram",
    "mean_pairwise_cosine",
    "probe_encoder",
    "probe_run",
    "read_probes",
    "split_episodes",
    "split_rows",
    "state_labels",
    "state_variables",
    "write_probes",
]
