#!/usr/bin/env bash
# Run HERE (a machine with network), before the GPU session's first `run`: downloads the wheels the
# device image lacks (it has torch + CUDA but not gymnasium/ale-py/...) into .gpu-wheels/ (ignored
# by git; name it in the device tool's `carry`). Pure-Python wheels plus ale-py for the CPython
# versions the image may have. Keep the folder under the 64 MiB a run may carry.
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=.gpu-wheels
mkdir -p "$dest"
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx "/$dest/" "$exclude" 2>/dev/null || echo "/$dest/" >> "$exclude"
# rliable (confidence intervals of `sgi-lab report`) is published as source only: build its wheel
# here so that the image (no network, maybe no build backend) installs it with --no-index.
# plotly: `sgi-lab`'s parser imports the notebook runner, which imports the figures (viz)
pure="gymnasium farama-notifications cloudpickle typing_extensions tqdm plotly"
for py in 3.10 3.11 3.12 3.13; do
  pip download --quiet --dest "$dest" --only-binary :all: --no-deps \
      --python-version "$py" --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
      --platform manylinux_2_17_x86_64 \
      "ale-py>=0.9" "pyyaml>=6" "arch<8" || echo "no ale-py/pyyaml/arch wheel for Python $py"
done
pip download --quiet --dest "$dest" --no-deps $pure
# the MinAtar track's games (GPL-3.0, pure Python; its needs are in the image): the `minatar` job
pip download --quiet --dest "$dest" --no-deps "minatar==1.0.15"
ls "$dest"/rliable-*.whl >/dev/null 2>&1 || pip wheel --quiet --no-deps --wheel-dir "$dest" "rliable>=1.2"
rm -f "$dest"/rliable-*.tar.gz
du -sh "$dest"
