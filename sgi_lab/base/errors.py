"""The one base of every error sgi-lab raises about what a person gave it (a params file, a store,
a run folder, a game name) or about the machine (a full disk, a missing optional package).

Each error class also keeps its familiar builtin base (``ValueError``, ``OSError``, ...), so code
that catches those goes on working; the command line catches `SgiLabError`, prints its message
as one line and exits with the class's `exit_code`.
"""

from __future__ import annotations


class SgiLabError(Exception):
    """Something sgi-lab refuses, explained in its message (one line, naming the culprit)."""

    exit_code = 2
    """The ``sgi-lab`` command's exit status for this error (2: bad input, as argparse's)."""
