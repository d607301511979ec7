"""Linear probes of frozen encoders: AtariARI's game-state variables read from the console RAM
(`atariari`) or a MinAtar store's recorded game state (`game_labels`), a reward probe and an
action probe (Anand et al., 2019; Zhang et al., 2022), with a least-squares or logistic readout
on the renormalized conv map, the conv map or the projection, and ridge regressions of the
coordinates (`linear`, `state_probes`); each label read by its kind (`kinds`: MinAtar's
positions, counters and ramp by R^2, categories by F1), small test splits flagged, and the
collapse diagnostic (`collapse`). Probing one encoder (`encoder_probe`) on a split of a store's
episodes (`splits`), the store checked and the result keyed (`probe_data`), and ``probes.json``
(`results`). What a probe can be asked for (readouts, features) is in `choices`, without torch.

The names below load their module when first used (`__getattr__`): importing the package, or
`choices` for ``sgi-lab probe``'s options, loads no torch."""

from sgi_lab.base.lazy import lazy_exports

# name -> the module that defines it, imported on first use
_HOMES = {
    "CATEGORIES": "atariari",
    "UnannotatedGameError": "atariari",
    "Variable": "atariari",
    "annotated_games": "atariari",
    "annotations": "atariari",
    "labels_from_ram": "atariari",
    "FEATURES": "choices",
    "READOUTS": "choices",
    "mean_pairwise_cosine": "collapse",
    "PROBES_FILE": "encoder_probe",
    "ProbeEncoder": "encoder_probe",
    "probe_encoder": "encoder_probe",
    "state_labels": "game_labels",
    "state_variables": "game_labels",
    "KINDS": "kinds",
    "MIN_TEST_ROWS": "kinds",
    "ProbeSettings": "linear",
    "category_averages": "linear",
    "fit_linear_probes": "linear",
    "fit_logistic_probes": "linear",
    "fit_probes": "linear",
    "fit_ridge_regressions": "linear",
    "ProbeInputError": "probe_data",
    "check_probe_store": "probe_data",
    "probe_run": "results",
    "read_probes": "results",
    "write_probes": "results",
    "split_episodes": "splits",
    "split_rows": "splits",
}

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


# NAME is imported from its module when first asked for (`sgi_lab.base.lazy`).
__getattr__, __dir__ = lazy_exports(__name__, _HOMES, globals(), __all__)
