"""The write-ups of studies: what an experiment folder's finished runs say, as Markdown tables
and figures beside them (`sgi_lab.experiments.experiment_report` writes them into a study's
``results.md``; the ablations notebook shows them).

A finetuning study, read from its experiment folder: its agents and numbers (`finetune_study`),
its page with its learning curves (`finetune_report`), its pretraining and finetuning budgets
(`finetune_budgets`), its encoders' probes beside finetuning (`finetune_probes`); a study run
twice side by side (`reruns`); a probe study's report (`probe_report`), its encoders re-read
several ways (`probe_reread`), each run's probe change from its own initialisation and every
readout of the final encoders (`probe_changes`: what a probe drop is attributed to) and tests
over seeds, the independent unit (`probe_seed_tests`).

It sits above `sgi_lab.analysis` (the run readers these tables start from) and below
`sgi_lab.experiments` (which writes a study's report when its tasks finish).
"""
