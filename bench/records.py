"""Write, or compare against, the records of a set of logs: a behaviour snapshot.

    python bench/records.py --write bench/out/before.jsonl            # every fixture + corpus log + archive
    python bench/records.py --check bench/out/before.jsonl            # same inputs, exit 1 on any difference

Each record is the diagnose JSON of one log (tool version and timings left out), or a
scan record of a generated archive (``../shared/bench/make_archive.py --size 64M``).
Used to show that a refactoring changes nothing a user sees.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.path.join(os.path.dirname(ROOT), "shared")


def log_paths() -> list[str]:
    pats = [os.path.join(ROOT, "tests", "fixtures", "logs", "*.log"),
            os.path.join(SHARED, "corpus", "cases", "*.log")]
    return sorted(p for pat in pats for p in glob.glob(pat))


def diagnose_records(paths: list[str]) -> dict[str, dict]:
    from oomdoctor.pipeline import diagnose_source

    out = {}
    for p in paths:
        rep = json.loads(diagnose_source(p).model_dump_json())
        rep.pop("tool_version", None)
        out[os.path.relpath(p, os.path.dirname(ROOT))] = rep
    return out


def archive_records(size: str) -> dict[str, dict]:
    arch = os.path.join(HERE, "out", f"records-archive-{size}")
    if not os.path.exists(os.path.join(arch, "manifest.json")):
        subprocess.run([sys.executable, os.path.join(SHARED, "bench", "make_archive.py"), "--size", size,
                        "--seed", "0", "--out", arch, "--force", "-q"], check=True)
    import oomdoctor

    out = {}
    for rec in oomdoctor.scan([arch], jobs=1):
        rec = json.loads(json.dumps(rec, default=str))
        for k in ("tool_version", "elapsed_s", "seconds"):
            rec.pop(k, None)
        out["archive:" + os.path.relpath(str(rec.get("path", "")), arch)] = rec
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write")
    g.add_argument("--check")
    ap.add_argument("--archive", default="64M", help="archive size ('0' for none)")
    args = ap.parse_args()
    recs = diagnose_records(log_paths())
    if args.archive != "0":
        recs.update(archive_records(args.archive))
    if args.write:
        os.makedirs(os.path.dirname(os.path.abspath(args.write)), exist_ok=True)
        with open(args.write, "w") as f:
            for k in sorted(recs):
                f.write(json.dumps({"key": k, "record": recs[k]}, sort_keys=True) + "\n")
        print(f"{len(recs)} records written to {args.write}")
        return 0
    old = {}
    with open(args.check) as f:
        for line in f:
            d = json.loads(line)
            old[d["key"]] = d["record"]
    diff = sorted(k for k in set(old) | set(recs) if old.get(k) != recs.get(k))
    for k in diff[:50]:
        print("differs:", k)
    print(f"{len(recs)} records, {len(diff)} differ from {args.check}")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
