#!/bin/bash
# Captures real failure output of the torch installed on this machine into $OUT/captures.tar.gz.
set -u
export PYTHONUNBUFFERED=1
D=/tmp/cap; rm -rf $D; mkdir -p $D; cd "$(dirname "$0")"
PY=python3
T0=$(date +%s)
step() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
$PY -c "import torch,sys; print(torch.__version__, torch.version.cuda, sys.version); print(torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).total_memory)" > $D/00-versions.txt 2>&1
nvidia-smi > $D/01-nvidia-smi.txt 2>&1
timeout 90 $PY -m torch.utils.collect_env > $D/02-collect-env.txt 2>&1
$PY -m pip list 2>/dev/null | grep -i -E "torch|deepspeed|transformers|accelerate|nccl|triton|cupy" > $D/03-pip.txt
for c in plain frag fraction eb mempool pinned cpualloc summary; do
  step $c
  timeout 120 $PY cap.py $c > $D/10-$c.log 2>&1; echo "exit=$?" >> $D/10-$c.log
done
step expandable
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 120 $PY cap.py frag > $D/11-frag-expandable.log 2>&1; echo "exit=$?" >> $D/11-frag-expandable.log
waitready() { for i in $(seq 60); do [ -e /tmp/cap_ready ] && return 0; sleep 1; done; return 1; }
step other-process
rm -f /tmp/cap_ready; $PY cap.py hold > $D/20-holder.txt 2>&1 & HP=$!; waitready
timeout 120 $PY cap.py plain > $D/20-other-process.log 2>&1; echo "exit=$?" >> $D/20-other-process.log
nvidia-smi >> $D/20-other-process.log 2>&1
kill $HP; wait $HP 2>/dev/null
step ctx
rm -f /tmp/cap_ready; $PY cap.py full > $D/21-holder.txt 2>&1 & HP=$!; waitready
timeout 120 $PY cap.py ctx > $D/21-context-oom.log 2>&1; echo "exit=$?" >> $D/21-context-oom.log
kill $HP; wait $HP 2>/dev/null
step torchrun
timeout 150 torchrun --nproc_per_node 2 cap_dist.py share > $D/30-torchrun-share.log 2>&1; echo "exit=$?" >> $D/30-torchrun-share.log
timeout 150 torchrun --nproc_per_node 2 --tee 3 cap_dist.py oom > $D/31-torchrun-tee-oom.log 2>&1; echo "exit=$?" >> $D/31-torchrun-tee-oom.log
timeout 150 torchrun --nproc_per_node 2 cap_dist.py sigkill > $D/32-torchrun-sigkill.log 2>&1; echo "exit=$?" >> $D/32-torchrun-sigkill.log
step dataloader
timeout 120 $PY cap.py dataloader > $D/40-dataloader-killed.log 2>&1; echo "exit=$?" >> $D/40-dataloader-killed.log
step errors
timeout 90 $PY cap.py illegal > $D/50-illegal-access.log 2>&1; echo "exit=$?" >> $D/50-illegal-access.log
timeout 60 $PY cap.py assert > $D/51-device-assert.log 2>&1; echo "exit=$?" >> $D/51-device-assert.log
timeout 60 $PY cap.py mismatch > $D/52-device-mismatch.log 2>&1; echo "exit=$?" >> $D/52-device-mismatch.log
step done
hostname > $D/99-hostname.txt; id >> $D/99-hostname.txt; pwd >> $D/99-hostname.txt
cd /tmp && tar czf $OUT/captures.tar.gz cap
for f in cap/*; do echo "== $f"; head -c 600 $f | tail -c 400; echo; done
