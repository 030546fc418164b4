"""A job that starts a worker process, says 'ready', and waits to be terminated.

    python terminable.py handle|ignore MARKER_DIR

``handle``: on SIGTERM or SIGINT, the job and its worker each write a marker file
(``job-<SIGNAL>``, ``worker-<SIGNAL>``) and exit the way Python's default does.
``ignore``: both ignore SIGTERM and SIGINT (they write the marker, then keep running),
so only a SIGKILL ends them.
"""
import os
import signal
import subprocess
import sys
import time

mode, markers = sys.argv[1], sys.argv[2]
role = sys.argv[3] if len(sys.argv) > 3 else "job"


def on_signal(num, _frame):
    name = signal.Signals(num).name
    with open(os.path.join(markers, f"{role}-{name}"), "w") as fh:
        fh.write(str(os.getpid()))
    if mode == "handle":
        signal.signal(num, signal.SIG_DFL)
        os.kill(os.getpid(), num)


for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, on_signal)

worker = None
if role == "job":
    worker = subprocess.Popen([sys.executable, __file__, mode, markers, "worker"])
    # the worker is ready once its pid file exists
    while not os.path.exists(os.path.join(markers, "worker-ready")):
        time.sleep(0.02)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
else:
    with open(os.path.join(markers, "worker-ready"), "w") as fh:
        fh.write(str(os.getpid()))
while True:
    time.sleep(0.1)
