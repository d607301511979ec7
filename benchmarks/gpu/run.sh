#!/usr/bin/env bash
# Run ON THE DEVICE, from the repo root, with .gpu-wheels carried (benchmarks/gpu/prepare.sh):
#   device run: bash benchmarks/gpu/run.sh JOB ; carry: [".gpu-wheels"]
# Every job fits one 10-minute device command; results land in $OUT (they come back).
#
#   first        checks, phases, pretrain, sampling, vector_env and memory, each time-capped
#                (~9 min in all), so one command answers everything but the 26-game run
#   checks       tests/runtime/test_cuda.py and tests/runtime/test_graphs.py on the GPU
#   phases       a population's step phase by phase (act, envs, append, sample, update,
#                priorities) at 1, 4 and 26 agents, vmap against a loop inside the CUDA graph:
#                time, kernel launches, GPU busy fraction, projected 100k-step wall-clock
#   pretrain     the pretraining step (CUDA graph, and eager for comparison): samples/s
#   sampling     the pretraining sampler on this machine's CPUs: batches/s at batch 256
#   vector_env   ale-py's C++ AtariVectorEnv against our EnvPool: same frames, env-steps/s
#   memory       a population's GPU memory per agent; the largest that fits 80 GB
#   population   agent-updates/s of populations of 1, 4 and 26 agents (older figure)
#   benchmark26 [resnet|nature]
#                the 26-game Atari 100k population, SGI-None, one seed. It stops cleanly
#                (every agent checkpointed) before the command's limit, exit 75; call the same
#                job again and it resumes, until the evaluation has run and `sgi-lab report`
#                prints the per-game scores and IQM. The machine keeps its files only while warm
#                (30 s after a call): call again at once.
#
# Plan for a 30-minute session: `first` (10 min), then `benchmark26 nature` (target <= 15 min:
# two calls); the ResNet run (target <= 25 min: three calls) needs a session of its own.
#
# Rehearsal without a GPU: SGI_REHEARSAL=1 bash benchmarks/gpu/run.sh JOB runs the same commands
# on the CPU at toy sizes (two games, a few hundred steps); tests/test_benchmarks.py rehearses
# `first` and `benchmark26`, so the scripts cannot rot between GPU sessions.
set -uo pipefail
what=${1:-first}
encoder=${2:-resnet}
rehearsal=${SGI_REHEARSAL:-0}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
python3 -V
if [ "$rehearsal" = 1 ]; then
  device=cpu; agents="1 2"; steps=2; rows=200; workers=1; stop=${SGI_REHEARSAL_STOP:-15}
  games=Pong,Breakout; bench=${SGI_REHEARSAL_ROOT:-/tmp/sgi-rehearsal}/benchmark26
  loop=(--set steps=300 --set learning_starts=100 --set batch_size=4 --set eval_episodes=2
        --set eval_envs=2 --set eval_max_frames=400 --set log_every=100)
else
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  # Only what the image lacks; pip picks the wheels built for this Python. The package itself
  # is used from the tree (PYTHONPATH), so no build backend is needed there.
  python3 -m pip install --quiet --no-index --find-links .gpu-wheels gymnasium ale-py rliable \
    || echo "gymnasium/ale-py/rliable not installed: envs, benchmark26 and its report will fail"
  device=cuda; agents="1 4 26"; steps=20; rows=2000; workers=15; stop=510
  games=$(python3 -c "from sgi_lab.envs.games import ATARI_100K_GAMES as g; print(','.join(g))")
  bench=/root/benchmark26
  # One episode per evaluation environment: the evaluation lasts about one long episode, not
  # the sum of 13 of them, and fits one command. No periodic checkpoints (a 26-agent set of
  # replays is ~18 GB at 100k steps): the stop before the command's limit writes one.
  loop=(--set eval_envs=100 --set checkpoint_every=1000000)
fi
sgi() { python3 -c 'import sys; from sgi_lab.launch.cli import main; sys.exit(main())' "$@"; }

checks() {
  timeout "${1:-600}" python3 -m pytest -q tests/runtime/test_cuda.py tests/runtime/test_graphs.py \
    -p no:cacheprovider 2>&1 | tail -25 | tee "$out/checks.txt"
}
phases() {
  # vmap (grouped convolutions) against a loop over the agents inside the same CUDA graph;
  # the JSON is written row by row, so a time cap keeps what was measured.
  timeout "${1:-600}" python3 benchmarks/population_phases.py --device "$device" \
    --agents $agents --encoders nature resnet --batching vmap loop --envs \
    --env-workers "$workers" --steps "$steps" --rows "$rows" --json "$out/phases.json"
}
pretrain() {
  local batch=256; [ "$rehearsal" = 1 ] && batch=8
  for graphs in "" --no-cuda-graphs; do
    timeout "${1:-600}" python3 benchmarks/pretrain_speed.py --device "$device" \
      --encoders nature resnet --batch "$batch" --steps "$steps" --profile '' --conv-reps 2 \
      $graphs --json "$out/pretrain${graphs:+_eager}.json" | tail -6
  done
}
sampling() {
  local n=200000; [ "$rehearsal" = 1 ] && n=3000
  timeout "${1:-600}" python3 benchmarks/foundation.py sampling --rows "$n" \
    --workdir /tmp/sgi-bench 2>&1 | tail -5 | tee "$out/sampling.txt"
}
vector_env() {
  # ale-py's C++ vector env against our pool: same frames? how fast on this machine's cores?
  local threads="1 15" workers="0 15"; [ "$rehearsal" = 1 ] && threads="1 2" workers="0 2"
  timeout "${1:-600}" python3 benchmarks/vector_env_check.py --games Pong Breakout --steps 500 \
    --resets 160 --speed-envs 26 --threads $threads --workers $workers \
    --json "$out/vector_env.json" 2>&1 | tail -8
}
memory() {
  timeout "${1:-600}" python3 benchmarks/population_memory.py --device "$device" \
    --agents $agents --budget-gb 80 2>&1 | tail -20 | tee "$out/memory.txt"
}
benchmark26() {
  local args=(finetune --params params/finetune/sgi_none.yaml --game "$games" --seed 0
              --set device="$device" --set env_workers="$workers" --set encoder="$encoder"
              "${loop[@]}" --out "$bench/$encoder" --no-progress --stop-after "$stop")
  # SIGTERM at 570 s also stops cleanly; KILL 20 s later if a checkpoint is still being written.
  timeout -k 20 570 python3 -c 'import sys; from sgi_lab.launch.cli import main; sys.exit(main())' \
    "${args[@]}" > "$out/benchmark26_$encoder.log" 2>&1
  local rc=$?
  tail -30 "$out/benchmark26_$encoder.log"
  echo "finetune exit status $rc (0: finished; 75, or 124 after the SIGTERM of timeout: stopped at a checkpoint, call again)"
  [ "$rehearsal" = 1 ] || nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv || true
  df -h "$(dirname "$bench")" | tail -1
  grep -ho '"state": "[a-z]*"' "$bench/$encoder"/*/status.json | sort | uniq -c
  if [ "$rc" = 0 ]; then
    sgi report "$bench/$encoder"/* --csv "$out/benchmark26_$encoder.csv" 2>&1 | tail -40
  fi
  return "$rc"  # 75 or 124: call the job again
}

case "$what" in
  first)
    # Caps for the GPU machine's 10-minute command; a rehearsal on 2 cores gets 3x as long.
    k=1; [ "$rehearsal" = 1 ] && k=3
    checks $((130 * k)); phases $((180 * k)); pretrain $((40 * k)); sampling $((35 * k))
    vector_env $((50 * k)); memory $((60 * k)) ;;
  checks|phases|pretrain|sampling|vector_env|memory) "$what" ;;
  population)
    for n in $agents; do
      python3 benchmarks/finetune_speed.py population --device "$device" --agents "$n" \
        --repeats 10 --precision bf16 --json "$out/population_$n.json" | tail -30
    done ;;
  benchmark26) benchmark26 ;;
  *) echo "unknown job $what (first, checks, phases, pretrain, sampling, vector_env, memory, population, benchmark26)"; exit 2 ;;
esac
