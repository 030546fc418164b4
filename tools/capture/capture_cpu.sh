#!/bin/bash
set -u
export PYTHONUNBUFFERED=1
D=/tmp/cap_cpu; rm -rf $D; mkdir -p $D; cd "$(dirname "$0")"
PY=/tmp/torchcap/bin/python; TR=/tmp/torchcap/bin/torchrun
$PY -c "import torch,sys; print(torch.__version__, torch.version.cuda, sys.version)" > $D/00-versions.txt 2>&1
for c in cpualloc cpualloc_model dataloader mismatch; do
  timeout 120 $PY cap_cpu.py $c > $D/10-$c.log 2>&1; echo "exit=$?" >> $D/10-$c.log
done
timeout 150 $TR --nproc_per_node 2 --tee 3 cap_cpu_dist.py cpuoom > $D/31-torchrun-tee-cpuoom.log 2>&1; echo "exit=$?" >> $D/31-torchrun-tee-cpuoom.log
timeout 150 $TR --nproc_per_node 2 cap_cpu_dist.py cpuoom > $D/33-torchrun-cpuoom.log 2>&1; echo "exit=$?" >> $D/33-torchrun-cpuoom.log
timeout 150 $TR --nproc_per_node 2 cap_cpu_dist.py sigkill > $D/32-torchrun-sigkill.log 2>&1; echo "exit=$?" >> $D/32-torchrun-sigkill.log
