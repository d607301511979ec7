#!/usr/bin/env bash
# Run ON THE DEVICE, from the repo root, with .gpu-wheels carried (benchmarks/gpu/prepare.sh):
#   device run: bash benchmarks/gpu/run.sh JOB ; carry: [".gpu-wheels"]
# Every job fits one 10-minute device command; results land in $OUT (they come back).
#
# THE PLAN (a GPU slot is 15 minutes of device time in all, start-up included, at most 10
# minutes per command, and the machine keeps its files only ~30 s after a call):
#   1. here: bash benchmarks/gpu/prepare.sh   (wheels for the image, < 64 MiB, carried)
#   2. device run, ONCE: bash benchmarks/gpu/run.sh slot ; carry [".gpu-wheels"] ; timeout_s 540
#   3. give the machine back; commit the figures to docs/results/gpu.md with what they show.
# `slot` is at most ~6 minutes of work, every part capped and writing its JSON into $OUT as soon
# as it has it, so a run cut off still returns what it measured. The next slots follow the
# order in docs/results/gpu.md ("next stages").
#
#   speedlab     the GPU path's levers (<= ~8 min): device anchors (copy bandwidth, matmul rates,
#                launch cost, whether autocast reaches vmap; <= 40 s), the CUDA checks (<= 75 s),
#                the Nature N = 26 learn step in fp32 / TF32 / bf16 with a kernel table each
#                (<= 210 s), the ResNet N = 26 population with its environments (<= 60 s), the
#                MinAtar population (<= 90 s); run it first whenever a GPU is lent
#   slot         checks (<= 90 s), the 26-game population phase by phase (Nature <= 150 s,
#                ResNet <= 45 s), pretraining samples/s (<= 45 s), and a pretraining budget
#                curve on Random Pong with probes (the rest, <= 150 s)
#   first        the older 9-minute job: checks, phases, pretrain, sampling, vector_env, memory
#   checks       tests/runtime/test_cuda.py and tests/runtime/test_graphs.py on the GPU
#   phases       a population's step phase by phase (act, envs, append, sample, update,
#                priorities) at 1, 4 and 26 agents, vmap against a loop inside the CUDA graph:
#                time, kernel launches, GPU busy fraction, projected 100k-step wall-clock
#   pretrain     the pretraining step (CUDA graph, and eager for comparison): samples/s
#   curve        the pretraining budget curve alone (a Random Pong store with RAM, SGI and
#                SPR-only at batch 256, probed at least 5 times on other episodes)
#   minatar      the MinAtar track's finetuning population on the GPU: 16 agents
#                (Breakout and Asterix, 8 seeds each, SGI-None) for ~100 s, then agent steps/s
#                and the projection of the study's finetuning; call it right after `slot`,
#                while the machine is warm (~140 s)
#   minatar_shared [cap]
#                the GPU command's first shared population (minatar_objectives_full.yaml,
#                share_populations: 110 agents, reduced-lr objectives, naive and scratch on
#                Asterix + Breakout at the paper's budget) for ~cap s (150), then agent steps/s
#                and the whole study's finetuning projected (goal: 9 minutes)
#   recheck      after a slot's failures are fixed on the CPU: whether autocast reaches inside vmap,
#                the CUDA tests with their tracebacks, the Nature population phases (<= 90 s)
#                and the MinAtar population (<= 90 s); ~5 minutes with the start
#   sampling     the pretraining sampler on this machine's CPUs: batches/s at batch 256
#   vector_env   ale-py's C++ AtariVectorEnv against our EnvPool: same frames, env-steps/s
#   memory       a population's GPU memory per agent; the largest that fits 80 GB
#   population   agent-updates/s of populations of 1, 4 and 26 agents (older figure)
#   benchmark26 [resnet|nature]
#                the 26-game Atari 100k population, SGI-None, one seed. It stops cleanly
#                (every agent checkpointed) before the command's limit, exit 75; call the same
#                job again and it resumes, until the evaluation has run and `sgi-lab report`
#                prints the per-game scores and IQM. Run it in one call only where the slot's
#                projection says it fits 9 minutes (docs/results/gpu.md).
#
# Rehearsal without a GPU: SGI_REHEARSAL=1 bash benchmarks/gpu/run.sh JOB runs the same commands
# on the CPU at toy sizes (two games, a few hundred steps); tests/test_benchmarks.py rehearses
# `slot`, `first` and `benchmark26` (slow tier), so the scripts cannot rot between GPU slots.
set -uo pipefail
what=${1:-slot}
encoder=${2:-resnet}
rehearsal=${SGI_REHEARSAL:-0}
out=${OUT:-/tmp/out}
if [ -e "$out" ] && [ ! -d "$out" ]; then
  echo "OUT=$out exists and is not a folder; name a folder for the job's files"; exit 2
fi
mkdir -p "$out"
JOBS="speedlab, slot, curve, first, checks, phases, pretrain, sampling, vector_env, memory, population, benchmark26, minatar, minatar_shared, recheck, minatar_vmap_traceback"
positive_cap() {  # a job's time cap: a whole number of seconds above 0
  case "$1" in ''|*[!0-9]*|0) echo "$what: the cap must be a whole number of seconds above 0, got '$1'"; exit 2 ;; esac
}
# what is asked for is checked before anything is installed or run
case ", $JOBS," in *", $what,"*) ;; *) echo "unknown job $what ($JOBS)"; exit 2 ;; esac
case "$what" in minatar|minatar_shared) [ $# -ge 2 ] && positive_cap "$2" ;; esac
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
python3 -V
if [ "$rehearsal" = 1 ]; then
  # the image's Python here: what it lacks (plotly, papermill, ...) cannot be imported
  export PYTHONPATH=$PWD/benchmarks/gpu/image_site:$PYTHONPATH
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
  # plotly alone, without its needs' versions checked (narwhals is in the image)
  python3 -m pip install --quiet --no-index --no-deps --find-links .gpu-wheels plotly \
    || echo "plotly not installed: every sgi-lab command will fail"
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
    -p no:cacheprovider --tb=short > "$out/checks.txt" 2>&1  # all of it: the tracebacks come back
  grep -E '^(FAILED|E  )|passed|failed' "$out/checks.txt" | head -40
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

population26() {
  # The 26-game population (SGI-None, Nature then ResNet), phase by phase with real envs: agent
  # steps/s, updates/s, the phase split, GPU busy fraction, peak memory and the projected
  # wall-clock of the whole 26 x 100k run with its evaluation (benchmarks/population_phases.py).
  local n=26; [ "$rehearsal" = 1 ] && n=2
  timeout "${1:-150}" python3 benchmarks/population_phases.py --device "$device" --agents "$n" \
    --encoders nature --batching vmap --envs --env-workers "$workers" --steps "$steps" \
    --rows "$rows" --params params/finetune/sgi_none.yaml --json "$out/population26_nature.json" \
    2>&1 | tail -12
  timeout "${2:-45}" python3 benchmarks/population_phases.py --device "$device" --agents "$n" \
    --encoders resnet --batching vmap --envs --env-workers "$workers" --steps "$steps" \
    --rows "$rows" --params params/finetune/sgi_none.yaml --json "$out/population26_resnet.json" \
    2>&1 | tail -12
}
pretrain_graphs() {
  local batch=256; [ "$rehearsal" = 1 ] && batch=8
  timeout "${1:-45}" python3 benchmarks/pretrain_speed.py --device "$device" \
    --encoders nature resnet --batch "$batch" --steps "$steps" --profile '' --conv-reps 2 \
    --json "$out/pretrain.json" | tail -6
}
curve() {
  # A pretraining budget curve at the paper's batch: Random Pong (with RAM) collected on the
  # device's cores, probed on other episodes (another seed) at least 5 times per run.
  local cap=${1:-150} start=$SECONDS data=/tmp/sgi-curve probe_every=250 batch=256
  local collect_steps=20000 probe_steps=6000 steps_per=500 game=pong
  if [ "$rehearsal" = 1 ]; then
    # Breakout: random play ends episodes within ~200 steps, and the probes need 3 episodes
    data=${SGI_REHEARSAL_ROOT:-/tmp/sgi-rehearsal}/curve; collect_steps=800; probe_steps=1200
    probe_every=2; batch=4; steps_per=1; game=breakout
    export SGI_LAB_CPU_SETTINGS=cpu_amp=false,channels_last=false  # no measuring on 2 cores
  fi
  mkdir -p "$data"
  # the training store and the probe store are collected side by side (two cores)
  sgi collect random --game "$game" --steps "$collect_steps" --seed 0 --out "$data/train" \
    --no-progress > "$out/curve_collect_train.log" 2>&1 &
  sgi collect random --game "$game" --steps "$probe_steps" --seed 100 --out "$data/probe" \
    --no-progress > "$out/curve_collect_probe.log" 2>&1
  wait
  echo "curve: stores collected in $((SECONDS - start)) s"
  local left=$((cap - (SECONDS - start)))
  for objective in sgi_m s; do
    local share=$((left / 2)); [ "$objective" = s ] && share=$((cap - (SECONDS - start) - 5))
    [ "$share" -lt 10 ] && { echo "curve: no time left for $objective"; continue; }
    # --stop-after ends the run cleanly (checkpointed, exit 75) when its share is spent; the
    # steps are an upper bound, and the probes of probe_every are the curve.
    timeout $((share + 20)) python3 -c 'import sys; from sgi_lab.launch.cli import main; sys.exit(main())' \
      pretrain --params "params/pretrain/$objective.yaml" --data "$data/train" \
      --out "$data/run_$objective" --overwrite --no-progress --stop-after "$share" \
      --set encoder=nature --set batch_size="$batch" --set steps="$((steps_per * 20))" \
      --set device="$device" --set probe_every="$probe_every" --set probe_data="$data/probe" \
      > "$out/curve_$objective.log" 2>&1
    echo "curve: $objective exit $? after $((SECONDS - start)) s"
    cp "$data/run_$objective/metrics.jsonl" "$out/curve_${objective}_metrics.jsonl" 2>/dev/null
    cp "$data/run_$objective/status.json" "$out/curve_${objective}_status.json" 2>/dev/null
    python3 -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "probe/f1" in l]
print("  step  probe/f1  agent_loc  samples/s")
for r in rows:
    step, f1 = r["step"], r["probe/f1"]
    loc = r.get("probe/f1_agent_localization", float("nan"))
    sps = r.get("charts/samples_per_s", float("nan"))
    print(f"{step:6d}  {f1:.3f}     {loc:.3f}      {sps:.0f}")
' "$out/curve_${objective}_metrics.jsonl" 2>/dev/null
  done
}
minatar() {
  # A MinAtar population (games of equal channel counts share one input shape) on the device:
  # its agent steps/s and updates/s, read from each agent's metrics after a clean stop.
  local cap=${1:-100} root=/tmp/sgi-minatar seeds=0,1,2,3,4,5,6,7 extra=()
  if [ "$rehearsal" = 1 ]; then
    root=${SGI_REHEARSAL_ROOT:-/tmp/sgi-rehearsal}/minatar; seeds=0
    extra=(--set learning_starts=100 --set batch_size=4 --set log_every=50)
  else
    python3 -m pip install --quiet --no-index --no-deps --find-links .gpu-wheels minatar \
      || echo "minatar not installed: the minatar job will fail"
  fi
  timeout -k 20 $((cap + 60)) python3 -c 'import sys; from sgi_lab.launch.cli import main; sys.exit(main())' \
    finetune --params params/finetune/minatar_none.yaml --game minatar/breakout,minatar/asterix \
    --seed "$seeds" --set device="$device" --set checkpoint_every=1000000 "${extra[@]}" \
    --out "$root" --overwrite --no-progress --stop-after "$cap" > "$out/minatar.log" 2>&1
  echo "minatar: finetune exit $? (75: stopped cleanly at --stop-after)"
  tail -15 "$out/minatar.log"
  python3 - "$root" "$out/minatar.json" <<'PY'
import json, sys
from pathlib import Path
rows = {}
for metrics in sorted(Path(sys.argv[1]).rglob("metrics.jsonl")):
    last = [json.loads(l) for l in metrics.open() if "charts/sps" in l]
    if last:
        rows[str(metrics.parent.relative_to(sys.argv[1]))] = {k: last[-1][k] for k in ("step", "charts/sps", "charts/ups")}
json.dump(rows, open(sys.argv[2], "w"), indent=1)
if not rows:
    sys.exit("minatar: no agent logged a speed (see minatar.log): the job failed")
sps = sorted(r["charts/sps"] for r in rows.values())
if sps:
    per_agent = sps[len(sps) // 2]
    print(f"minatar: {len(rows)} agents, median agent steps/s {per_agent:.1f}; a 100k-step agent "
          f"{100_000 / per_agent / 60:.1f} min in a population of {len(rows)}")
PY
}
minatar_shared() {
  # The GPU command's first shared population: minatar_objectives_full.yaml's
  # Asterix + Breakout population (every reduced-lr objective, SGI naive and from scratch, 5
  # seeds: 110 agents at the paper's budget, 2 updates a step), the pretrained agents loading a
  # stand-in SGI run of their game (10 pretraining steps: speed does not depend on the weights),
  # for ~cap s; then agent steps/s and the whole study's finetuning projected from it.
  local cap=${1:-150} root=/tmp/sgi-minatar-shared keep="" steps=2000 pre=(--set steps=10)
  if [ "$rehearsal" = 1 ]; then
    root=${SGI_REHEARSAL_ROOT:-/tmp/sgi-rehearsal}/minatar_shared; keep="--agents 4"; steps=300
    pre=(--set steps=2 --set batch_size=4)
    extra=(--set learning_starts=100 --set batch_size=4 --set log_every=50)
  else
    extra=()
    python3 -m pip install --quiet --no-index --no-deps --find-links .gpu-wheels minatar \
      || echo "minatar not installed: the minatar_shared job will fail"
  fi
  local start=$SECONDS
  for game in asterix breakout; do
    sgi collect random --game "minatar/$game" --steps "$steps" --seed 0 --out "$root/data__$game" \
      --overwrite --no-progress > "$out/minatar_shared_collect_$game.log" 2>&1 &
  done
  wait
  for game in asterix breakout; do
    sgi pretrain --params params/pretrain/minatar_sgi.yaml --data "$root/data__$game" \
      --out "$root/pre__minatar-$game" --overwrite --no-progress --set device="$device" \
      "${pre[@]}" > "$out/minatar_shared_pretrain_$game.log" 2>&1 \
      || { echo "minatar_shared: pretraining $game failed"; tail -5 "$out/minatar_shared_pretrain_$game.log"; }
  done
  python3 benchmarks/gpu/minatar_shared.py agents "$root" $keep || return
  local left=$((cap - (SECONDS - start)))
  echo "minatar_shared: stand-ins ready in $((SECONDS - start)) s; finetuning for ${left} s"
  timeout -k 20 $((left + 60)) python3 -c 'import sys; from sgi_lab.launch.cli import main; sys.exit(main())' \
    finetune --agents "$root/agents.yaml" --set device="$device" --set checkpoint_every=1000000 \
    "${extra[@]}" --overwrite --no-progress --stop-after "$left" > "$out/minatar_shared.log" 2>&1
  echo "minatar_shared: finetune exit $? (75: stopped cleanly at --stop-after)"
  tail -8 "$out/minatar_shared.log"
  python3 benchmarks/gpu/minatar_shared.py project "$root" "$out/minatar_shared.json"
}
recheck() {
  # the device's own question (a rehearsal asks the CPU's)
  DEV="$device" python3 - <<'PY' 2>&1 | tee "$out/autocast.txt"
import os

import torch
import torch.nn.functional as F
from torch.func import vmap
from sgi_lab.runtime.device import autocast_reaches_vmap
dev = os.environ["DEV"]
print("torch", torch.__version__, f"autocast_reaches_vmap({dev}):", autocast_reaches_vmap(dev))
x, w, b = (torch.ones(2, 1, 1, 2, 2, device=dev), torch.ones(2, 1, 1, 1, 1, device=dev),
           torch.zeros(2, 1, device=dev))
def inside(x, w, b):
    with torch.autocast(dev, dtype=torch.bfloat16):
        return F.conv2d(x, w, b)
for name, fn, args in (("conv, autocast inside vmap", vmap(inside), (x, w, b)),
                       ("conv, autocast outside", vmap(F.conv2d), (x, w, b)),
                       ("linear, autocast outside", vmap(F.linear),
                        (torch.ones(2, 3, 4, device=dev), torch.ones(2, 5, 4, device=dev),
                         torch.zeros(2, 5, device=dev)))):
    try:
        with torch.autocast(dev, dtype=torch.bfloat16):
            print(name, "->", fn(*args).dtype)
    except Exception as error:
        print(name, "-> error:", error)
PY
  timeout 150 python3 -m pytest -q tests/runtime/test_cuda.py tests/runtime/test_graphs.py \
    -p no:cacheprovider --tb=short > "$out/checks_full.txt" 2>&1
  grep -E '^(FAILED|E  )|passed|failed' "$out/checks_full.txt" | head -40
  local n=26 cap=90; [ "$rehearsal" = 1 ] && n=2 cap=270  # a rehearsal: 2 agents, 3x the time
  timeout "$cap" python3 benchmarks/population_phases.py --device "$device" --agents "$n" \
    --encoders nature --batching vmap --envs --env-workers "$workers" --steps "$steps" \
    --rows "$rows" --params params/finetune/sgi_none.yaml --json "$out/population26_nature.json" \
    2>&1 | tail -12
  minatar 90
}
speedlab() {
  # Caps for the GPU machine's 10-minute command; a rehearsal on 2 cores gets 3x as long.
  local k=1 n=26; [ "$rehearsal" = 1 ] && k=3 n=2
  local size=8192 copy=1024; [ "$rehearsal" = 1 ] && size=256 copy=16
  timeout $((40 * k)) python3 benchmarks/gpu/anchors.py --device "$device" --size "$size" \
    --copy-mb "$copy" --json "$out/anchors.json" 2>&1 | tail -10
  checks $((75 * k))
  # learn step (sample + update + priorities) per precision, kernels counted per learn step
  timeout $((210 * k)) python3 benchmarks/population_phases.py --device "$device" --agents "$n" \
    --encoders nature --batching vmap --precision fp32 tf32 bf16 --kernels 25 --steps "$steps" \
    --rows "$rows" --params params/finetune/sgi_none.yaml --json "$out/speedlab_nature.json" \
    2>&1 | tail -6
  timeout $((60 * k)) python3 benchmarks/population_phases.py --device "$device" --agents "$n" \
    --encoders resnet --batching vmap --precision bf16 --kernels 25 --envs \
    --env-workers "$workers" --steps "$steps" --rows "$rows" \
    --params params/finetune/sgi_none.yaml --json "$out/speedlab_resnet.json" 2>&1 | tail -4
  minatar $((90 * k))
}
minatar_vmap_traceback() {
  # The MinAtar population under vmap failed on CUDA (torch 2.11) with "NYI: querying
  # is_contiguous inside of vmap ..."; the CLI prints one line, so call its handler directly for
  # the traceback, then time the same population batched by a loop instead (<= 60 s).
  python3 -m pip install --quiet --no-index --no-deps --find-links .gpu-wheels minatar || true
  timeout 90 python3 - "$device" <<'PY' 2>&1 | tail -40 | tee "$out/minatar_vmap_traceback.txt"
import sys, traceback
from sgi_lab.launch.cli import COMMANDS, build_parser
args = build_parser().parse_args([
    "finetune", "--params", "params/finetune/minatar_none.yaml",
    "--game", "minatar/breakout,minatar/asterix", "--seed", "0", "--set", f"device={sys.argv[1]}",
    "--set", "learning_starts=100", "--set", "steps=300", "--set", "eval_episodes=2",
    "--out", "/tmp/sgi-minatar-tb", "--overwrite", "--no-progress"])
try:
    COMMANDS[args.command](args)
    print("minatar under vmap: finished")
except Exception:
    traceback.print_exc()
PY
  local root=/tmp/sgi-minatar-loop
  timeout -k 20 120 python3 -c 'import sys; from sgi_lab.launch.cli import main; sys.exit(main())' \
    finetune --params params/finetune/minatar_none.yaml --game minatar/breakout,minatar/asterix \
    --seed 0,1,2,3,4,5,6,7 --set device="$device" --set population_batching=loop \
    --set checkpoint_every=1000000 --out "$root" --overwrite --no-progress --stop-after 60 \
    > "$out/minatar_loop.log" 2>&1
  echo "minatar (loop): finetune exit $?"; grep -v '^INFO' "$out/minatar_loop.log" | tail -3
  python3 - "$root" <<'PY'
import json, sys
from pathlib import Path
for m in sorted(Path(sys.argv[1]).rglob("metrics.jsonl")):
    rows = [json.loads(l) for l in m.open() if "charts/sps" in l]
    if rows:
        r = rows[-1]
        print(m.parent.name, r["step"], round(r["charts/sps"], 1), round(r.get("charts/ups", 0), 1))
PY
  timeout 60 python3 -m pytest -q tests/runtime/test_cuda.py -k graphed_pretraining -p no:cacheprovider \
    --tb=short 2>&1 | tail -3
}
slot() {
  # Caps for one 540 s device command (start-up and the wheel install come first); a
  # rehearsal on 2 cores gets 3x as long. Each part writes its files as soon as it has them.
  local k=1; [ "$rehearsal" = 1 ] && k=3
  local t0=$SECONDS
  checks $((90 * k)); echo "slot: checks done at $((SECONDS - t0)) s"
  population26 $((150 * k)) $((45 * k)); echo "slot: population26 done at $((SECONDS - t0)) s"
  pretrain_graphs $((45 * k)); echo "slot: pretrain done at $((SECONDS - t0)) s"
  curve $((150 * k)); echo "slot: curve done at $((SECONDS - t0)) s"
}

case "$what" in
  minatar) minatar "${2:-100}" ;;
  minatar_shared) minatar_shared "${2:-150}" ;;
  recheck) recheck ;;
  minatar_vmap_traceback) minatar_vmap_traceback ;;
  speedlab) speedlab ;;
  first)
    # Caps for the GPU machine's 10-minute command; a rehearsal on 2 cores gets 3x as long.
    k=1; [ "$rehearsal" = 1 ] && k=3
    checks $((130 * k)); phases $((180 * k)); pretrain $((40 * k)); sampling $((35 * k))
    vector_env $((50 * k)); memory $((60 * k)) ;;
  slot) slot ;;
  curve) curve ;;
  checks|phases|pretrain|sampling|vector_env|memory) "$what" ;;
  population)
    for n in $agents; do
      python3 benchmarks/finetune_speed.py population --device "$device" --agents "$n" \
        --repeats 10 --precision bf16 --json "$out/population_$n.json" | tail -30
    done ;;
  benchmark26) benchmark26 ;;
  *) echo "unknown job $what ($JOBS)"; exit 2 ;;
esac
