"""Launchers: the command line, notebook runs, sweeps and the demo pipeline."""
