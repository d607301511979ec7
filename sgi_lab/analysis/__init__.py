"""What notebooks ask of runs: our finetuning runs as scores (`run_scores`), the ablation
explorer's model (`ablations`), its widgets (`ablation_explorer`) and the probe scores beside its
scores (`ablation_probes`), goal rewards (`goals`), representations (`representations`), the
one run reader and the report tables (`report`), each method's probability of improvement
over a baseline, one table for the report and the explorer (`improvement`), per-seed score
matrices (`score_matrices`), a
run as a Hub folder (`hub_export`), the one paper-column decision (`paper_column`), encoders
loaded for probing (`probe_encoders`), probe results as tables (`probe_study`).

The write-ups of particular studies sit one floor up, in `sgi_lab.studies`.
"""
