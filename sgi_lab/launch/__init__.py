"""Launchers: the command line, notebook runs, sweeps and the demo pipeline.

- `cli`: the ``sgi-lab`` parser, its entry point `main`, and the handlers of ``collect``,
  ``import``, ``info``, ``prune``, ``pretrain``, ``finetune`` and ``evaluate``;
- `collect_options`: ``sgi-lab collect``'s options, each with its help;
- `hints`: what the command line says of arguments its parser does not take;
- `collect_exploratory`: ``sgi-lab collect exploratory``, the Exploratory data (SGI-E);
- `collect_agent`: ``sgi-lab collect agent``, a store played by a trained finetuning agent;
- `exchange`: data and results in the field's formats (``export``, ``import minari``,
  ``select``, ``report --export``);
- `probe`: ``sgi-lab probe``, linear probes of each run's frozen encoder;
- `report_command`: ``sgi-lab report``'s handler;
- `status_command`: ``sgi-lab status``, how far every run under a folder has got, checked
  against its lock and files;
- `notebook_runner`: ``sgi-lab run``, a notebook executed with papermill into its own run
  folder (`run_notebook`);
- `sweep`: grids of notebook runs, every point through `run_notebook`;
- `notebook_page`: an executed notebook as an HTML page that opens offline;
- `demo`: ``make demo``, the whole pipeline on the embedded default, every notebook executed,
  one report;
- `demo_minatar`: the demo's MinAtar stage, SGI-pretrained and from-scratch agents finetuning
  on MinAtar Breakout;
- `demo_notes`: what the demo's page says of each stage.
"""
