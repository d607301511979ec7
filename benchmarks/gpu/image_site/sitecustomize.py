"""The GPU image's Python, on this machine: the project's dependencies that the device image lacks
(../../.library/device/KINDS.md's package list, 2026-11-17) cannot be imported.

`SGI_REHEARSAL=1 bash benchmarks/gpu/run.sh JOB` puts this folder first on PYTHONPATH, so that a
rehearsal fails here, at no device time, where a slot would fail there (a training command that
imports plotly through a package's ``__init__`` did once). The wheels the slot carries
(benchmarks/gpu/prepare.sh: gymnasium, ale-py, rliable, minatar, plotly) are not blocked: without
plotly, `sgi-lab`'s parser fails (it imports the notebook runner, which imports the figures).
"""

import sys

ABSENT_ON_THE_IMAGE = frozenset(
    {
        "ipywidgets",
        "anywidget",
        "jupyterlab",
        "ipykernel",
        "papermill",
        "nbformat",
        "nbconvert",
        "umap",
        "IPython",
        "kaleido",
        "ray",
    }
)


class _AbsentOnTheImage:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ABSENT_ON_THE_IMAGE:
            raise ModuleNotFoundError(
                f"No module named {name!r} (absent on the GPU image)", name=name
            )
        return None


sys.meta_path.insert(0, _AbsentOnTheImage())
