"""Print a little, then die the way the kernel's OOM killer ends a process: SIGKILL."""
import os
import signal
import sys

sys.stdout.write("loading shards\n{'loss': 1.31, 'epoch': 0.01}\n")
sys.stdout.flush()
os.kill(os.getpid(), signal.SIGKILL)
