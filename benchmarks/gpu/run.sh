#!/usr/bin/env bash
# Run ON THE DEVICE, from the repo root, with .gpu-wheels carried (benchmarks/gpu/prepare.sh):
#   device run: bash benchmarks/gpu/run.sh [checks|phases|population|benchmark26] ; carry: [".gpu-wheels"]
# checks       tests/test_cuda.py (CUDA path, population equivalence on the GPU in fp32 and bf16)
# population   agent-updates/s of populations of 1, 4 and 26 agents (Nature and ResNet)
# phases       a population's step phase by phase (act, envs, append, sample, update, priorities):
#              time, kernel launches, GPU busy fraction, projected 100k-step wall-clock
# benchmark26  the 26-game Atari 100k population (SGI-None, one seed), resumable across calls:
#              run it again after a timeout and it continues from its last checkpoints.
set -euo pipefail
what=${1:-checks}
python3 -V; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
# Only what the image lacks; pip picks the wheels built for this Python. The package itself is
# used from the tree (PYTHONPATH), so no build backend is needed there.
python3 -m pip install --quiet --no-index --find-links .gpu-wheels gymnasium ale-py \
  || echo "gymnasium/ale-py not installed: the environments' phases and benchmark26 will fail"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
sgi() { python3 -c 'import sys; from sgi_lab.launch.cli import main; sys.exit(main())' "$@"; }
out=${OUT:-/tmp/out}; mkdir -p "$out"
case "$what" in
  checks)
    python3 -m pytest -q tests/test_cuda.py tests/test_graphs.py -p no:cacheprovider 2>&1 | tail -20 | tee "$out/checks.txt" ;;
  population)
    for n in 1 4 26; do
      python3 benchmarks/finetune_speed.py population --device cuda --agents "$n" --repeats 10 \
        --precision bf16 --json "$out/population_$n.json" | tail -30
    done ;;
  phases)
    # vmap (grouped convolutions) against a loop over the agents inside the same CUDA graph
    python3 benchmarks/population_phases.py --device cuda --agents 1 4 26 --encoders nature resnet \
      --batching vmap loop --envs --env-workers 15 --steps 20 --json "$out/phases.json" ;;
  benchmark26)
    games=$(python3 -c "from sgi_lab.envs.games import ATARI_100K_GAMES as g; print(','.join(g))")
    timeout 560 python3 -c 'import sys; from sgi_lab.launch.cli import main; sys.exit(main())' finetune --params params/finetune/sgi_none.yaml --game "$games" --seed 0 \
      --set device=cuda --set checkpoint_every=10000 --set env_workers=15 --out /root/benchmark26 --no-progress 2>&1 | tail -40 || true
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv || true
    df -h /root | tail -1  # 26 agents x 2 kept checkpoints x ~0.75 GB of replay each: ~40 GB
    ls /root/benchmark26 | head -30
    sgi report /root/benchmark26/* --csv "$out/benchmark26.csv" 2>&1 | tail -40 || true ;;
esac
