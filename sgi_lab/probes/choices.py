"""What a probe can be asked for, without torch: the readouts and the features, read by
``sgi-lab probe``'s options (its ``--help`` loads no torch) and by `ProbeSettings`."""

from __future__ import annotations

__all__ = ["FEATURES", "READOUTS"]

READOUTS = ("lstsq", "logistic")
"""The classification readouts (`ProbeSettings.readout`)."""
FEATURES = ("renormalized", "conv", "projection")
"""The features a probe can read (`ProbeSettings.features`)."""
