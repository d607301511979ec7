"""``make demo``: the whole pipeline on the embedded default (see :mod:`sgi_lab.demo_pipeline`)."""

from __future__ import annotations

import sys

from sgi_lab.demo_pipeline import main

if __name__ == "__main__":
    sys.exit(main())
