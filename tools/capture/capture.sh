#!/bin/bash
# Captures real failure output of the torch installed on this machine into $OUT/captures.tar.gz.
# The archive is rewritten after every step, so a run stopped early keeps what it captured;
# steps are skipped once BUDGET seconds (default 480) have passed.
set -u
export PYTHONUNBUFFERED=1
D=/tmp/cap; rm -rf $D; mkdir -p $D; cd "$(dirname "$0")"
PY=python3
BUDGET=${BUDGET:-480}
T0=$(date +%s)
step() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
late() { [ $(( $(date +%s) - T0 )) -ge "$BUDGET" ] && { echo "skipped (time): $*"; return 0; }; return 1; }
pack() { (cd /tmp && tar czf "$OUT/captures.tar.gz" cap); }
# run NAME TIMEOUT CMD...: output and exit status into $D/NAME.log
run() { local name=$1 t=$2; shift 2; late "$name" && return; step "$name"
  timeout "$t" "$@" > "$D/$name.log" 2>&1; echo "exit=$?" >> "$D/$name.log"; pack; }
$PY -c "import torch,sys; print(torch.__version__, torch.version.cuda, sys.version); print(torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).total_memory)" > $D/00-versions.txt 2>&1
nvidia-smi > $D/01-nvidia-smi.txt 2>&1
$PY -m pip list 2>/dev/null | grep -i -E "torch|deepspeed|transformers|accelerate|lightning|nccl|triton|cupy|jax" > $D/03-pip.txt
hostname > $D/99-hostname.txt; id >> $D/99-hostname.txt; pwd >> $D/99-hostname.txt
pack
# training-shaped failures (cap_train.py)
for c in forward backward optimizer leak eval ckpt_load hf_trainer hf_eval lightning; do
  run 60-$c 90 $PY cap_train.py $c
done
run 61-shm 90 unshare -m sh -c "mount -t tmpfs -o size=32m tmpfs /dev/shm && exec $PY cap_train.py shm"
for c in cupy cublas jax triton_smem; do run 62-$c 90 $PY cap_train.py $c; done
run 63-torchrun-nccl-dup 90 torchrun --nproc_per_node 2 cap_train.py nccl_dup
# allocator primitives (cap.py)
for c in plain frag fraction eb mempool pinned cpualloc summary; do run 10-$c 60 $PY cap.py $c; done
run 11-frag-expandable 60 env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $PY cap.py frag
waitready() { for i in $(seq 60); do [ -e /tmp/cap_ready ] && return 0; sleep 1; done; return 1; }
if ! late other-process; then
  rm -f /tmp/cap_ready; $PY cap.py hold > $D/20-holder.txt 2>&1 & HP=$!; waitready
  run 20-other-process 60 $PY cap.py plain
  nvidia-smi >> $D/20-other-process.log 2>&1
  kill $HP; wait $HP 2>/dev/null
fi
if ! late ctx; then
  rm -f /tmp/cap_ready; $PY cap.py full > $D/21-holder.txt 2>&1 & HP=$!; waitready
  run 21-context-oom 60 $PY cap.py ctx
  kill $HP; wait $HP 2>/dev/null
fi
run 30-torchrun-share 90 torchrun --nproc_per_node 2 cap_dist.py share
run 31-torchrun-tee-oom 90 torchrun --nproc_per_node 2 --tee 3 cap_dist.py oom
run 32-torchrun-sigkill 90 torchrun --nproc_per_node 2 cap_dist.py sigkill
run 40-dataloader-killed 60 $PY cap.py dataloader
run 50-illegal-access 60 $PY cap.py illegal
run 51-device-assert 60 $PY cap.py assert
run 52-device-mismatch 60 $PY cap.py mismatch
run 60-compiled 120 $PY cap_train.py compiled
run 02-collect-env 60 $PY -m torch.utils.collect_env
step done
pack
for f in /tmp/cap/*; do echo "== $f"; tail -c 200 "$f"; echo; done
