"""Write N bytes of training-log lines to stdout as fast as possible, then exit STATUS.

    python flood.py N [STATUS]

Most lines are progress and metrics lines (several of which the prefilter flags as
context); every 8,001st line is a warning with failure anchors, so the capture has
windows to keep all along the run.
"""
import os
import sys

LINES = [
    "{'loss': 1.2345, 'grad_norm': 0.87, 'learning_rate': 1.9e-05, 'epoch': 0.12}\n",
    " 45%|####5     | 900/2000 [10:00<12:13,  1.50it/s]\n",
    "[INFO|2025-01-01 12:00:00] trainer.py:2134 >> step 100/2000 throughput 12.3 samples/s\n",
    "2025-01-01 12:00:00,123 - INFO - data - processed shard 17 of 128 in 3.2s\n",
]
WARNING = "UserWarning: retrying a step after an Error: transient NCCL WARN on link 3\n"
CHUNK = ("".join(LINES * 2000) + WARNING).encode()


def expected_lines(total: int) -> int:
    """Lines (complete or not) in the first ``total`` bytes this program writes."""
    whole, rest = divmod(total, len(CHUNK))
    tail = CHUNK[:rest]
    return whole * CHUNK.count(b"\n") + tail.count(b"\n") + (1 if tail and not tail.endswith(b"\n") else 0)


def main() -> None:
    total = int(sys.argv[1])
    status = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    written = 0
    while written < total:
        view = memoryview(CHUNK[: total - written])
        written += len(view)
        while view:
            n = os.write(1, view)
            view = view[n:]
    sys.exit(status)


if __name__ == "__main__":
    main()
