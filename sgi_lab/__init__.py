"""sgi-lab: a research workbench for SGI."""
