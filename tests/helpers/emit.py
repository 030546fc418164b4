"""Print two recorded files, one to stdout and one to stderr, then exit with a status.

    python emit.py STDOUT_FILE STDERR_FILE STATUS

The bytes are written as they are (binary, in uneven pieces, flushed), so a wrapper that
changes, reorders within a stream, or delays any byte is caught by the test.
"""
import os
import sys


def pour(fd: int, data: bytes) -> None:
    sizes = (1, 7, 4096, 3, 65536, 13)
    pos = i = 0
    while pos < len(data):
        n = sizes[i % len(sizes)]
        written = os.write(fd, data[pos:pos + n])
        pos += written
        i += 1


if __name__ == "__main__":
    out_path, err_path, status = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(out_path, "rb") as fh:
        pour(1, fh.read())
    with open(err_path, "rb") as fh:
        pour(2, fh.read())
    sys.exit(status)
