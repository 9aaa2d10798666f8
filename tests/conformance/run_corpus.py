"""Render every record of the upstream golden corpus and require exact agreement.

Usage: python tests/conformance/run_corpus.py [--cases PATH] [--recipes DIR ...]
       [--show N] [--limit N]

Exit 0 only when every expected ``outputs`` key of every record matches exactly
(types included: the integer 0 is not the string "0").
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

from vllm_fleet import loader  # noqa: E402
from vllm_fleet.corpus import BatchRenderer  # noqa: E402

SHARED = ROOT.parent / "shared" / "conformance"


def canon(value):
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=str(SHARED / "cases.jsonl.gz"))
    ap.add_argument("--recipes", nargs="+", default=[str(SHARED / "recipes")])
    ap.add_argument("--show", type=int, default=5, help="mismatches to print")
    ap.add_argument("--limit", type=int, default=0)
    args = ap.parse_args(argv)
    if not Path(args.cases).exists():
        print(f"corpus not found: {args.cases}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    cat = loader.load(args.recipes)
    batch = BatchRenderer(cat)
    total = bad = 0
    by_key = collections.Counter()
    by_role = collections.Counter()
    shown = 0
    opener = gzip.open if args.cases.endswith(".gz") else open
    with opener(args.cases, "rt", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            total += 1
            got = batch.outputs(rec)
            want = rec["outputs"]
            diff = [k for k in want if canon(got.get(k)) != canon(want[k])]
            if diff:
                bad += 1
                for k in diff:
                    by_key[k] += 1
                by_role[(rec["role"], rec["context"].get("group"))] += 1
                if shown < args.show:
                    shown += 1
                    print(f"--- MISMATCH {rec['call_id']} role={rec['role']} rank={rec['node_rank']}")
                    for k in diff:
                        print(f"  {k}:\n    want {canon(want[k])[:600]}\n    got  {canon(got.get(k))[:600]}")
                    if "error" in got:
                        print("  error:", got["error"])
            if args.limit and total >= args.limit:
                break
    elapsed = time.perf_counter() - start
    print(f"records: {total}  exact: {total - bad}  mismatched: {bad}  "
          f"agreement: {100.0 * (total - bad) / max(total, 1):.3f}%  time: {elapsed:.1f}s")
    print(f"{total - bad} passed, {bad} failed")
    if by_key:
        print("mismatched keys:", dict(by_key.most_common()))
        print("by role/group:", dict(by_role.most_common(20)))
    return 0 if bad == 0 and total > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
