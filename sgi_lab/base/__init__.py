"""Shared low helpers every layer may use: atomic files, JSON lines, paths, threads, errors.

- `files`: the one atomic write (and its full-disk message), folder locks, the one lenient
  reader of small JSON/YAML files, JSON lines, the one JSON cleaner, provenance;
- `yaml_io`: YAML a person wrote, read safe and strict (duplicate keys and alias bombs refused);
- `paths`: "did you mean" for a missing file or folder a person typed;
- `threads`: the one thread rule, a user's ``OMP_NUM_THREADS`` wins, else a process's share of
  the cores;
- `errors`: `SgiLabError`, the base of every error about what a person gave or the machine;
- `driver`: `die_with_driver`, a task process ends with the experiment driver that started it;
- `lazy`: `lazy_exports`, a package that imports each public name's module on first use.
"""
