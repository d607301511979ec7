"""Analysis models behind the notebooks, and the write-ups of particular studies.

What notebooks ask of runs: the ablation explorer (`ablations`) and the probe scores beside its
scores (`ablation_probes`), goal rewards (`goals`), representations (`representations`), the one
run reader and the report tables (`report`), per-seed score matrices (`score_matrices`), a run as
a Hub folder (`hub_export`), the one paper-column decision (`paper_column`), encoders loaded for
probing (`probe_encoders`). Studies: probe results as tables (`probe_study`), the probe-drop
attribution (`probe_attribution`), the published probe study re-read (`probe_reread`), a probe
experiment's report (`probe_report`), tests over seeds, the independent unit
(`probe_seed_tests`), the MinAtar objective study (`minatar_study`; its probes beside
finetuning, `minatar_probes`), a study run twice (`reruns`).
"""
