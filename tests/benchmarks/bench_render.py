"""Benchmark: render the whole shared corpus through the render-batch code path.

Prints wall time, records per second and peak memory.  Not a test: it fails only
when the corpus is missing.  Target on the 2-core CI machine: under 20 s.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "conformance"
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

from vllm_fleet import loader  # noqa: E402
from vllm_fleet.corpus import render_lines  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=str(SHARED / "cases.jsonl.gz"))
    ap.add_argument("--recipes", default=str(SHARED / "recipes"))
    ap.add_argument("--cli", action="store_true", help="also time the vllm-fleet render-batch process")
    args = ap.parse_args()
    if not Path(args.cases).exists():
        print(f"corpus not found: {args.cases}", file=sys.stderr)
        return 2
    with gzip.open(args.cases, "rt", encoding="utf-8") as fh:
        lines = [json.dumps({k: r[k] for k in ("inputs", "role", "node_rank")})
                 for r in map(json.loads, fh)]
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    cat = loader.load([args.recipes])
    loaded = time.perf_counter()
    out = sum(len(line) for line in render_lines(cat, lines))
    end = time.perf_counter()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"bench render-batch (in-process): {len(lines)} records, load {loaded - start:.2f} s, "
          f"render {end - loaded:.2f} s, total {end - start:.2f} s, "
          f"{len(lines) / (end - start):,.0f} records/s, output {out / 1e6:.1f} MB, "
          f"peak RSS {rss / 1024:.0f} MiB (inputs held in memory: {rss_before / 1024:.0f} MiB)")
    if args.cli:
        data = ("\n".join(lines) + "\n").encode()
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "vllm_fleet.cli", "render-batch", "--recipes",
                               args.recipes], input=data, stdout=subprocess.PIPE, check=True,
                              env={"PYTHONPATH": str(ROOT / "plugins" / "module_utils"), "PATH": "/usr/bin:/bin"})
        t1 = time.perf_counter()
        child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        n = sum(1 for _ in io.BytesIO(proc.stdout))
        print(f"bench render-batch (CLI process): {n} lines out, wall {t1 - t0:.2f} s, "
              f"peak RSS {child / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
