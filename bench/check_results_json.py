#!/usr/bin/env python3
"""Checks the shape of `mapfs bench ... --json` files (CI's smoke runs).

  check_results_json.py FILE...

Each file must hold {"suite", "machine", "results": [rows]} (or a `bench all`
document with such suites), every row the fields BENCHMARKS.md names with
numbers where numbers belong, and a tmpfs or floor baseline beside mapfs.
Timing is never checked. Exits 1 naming the first problem.
"""
import json
import sys

ROW_FIELDS = {"workload": str, "fs": str, "mode": str, "page": str, "pages": int, "entries": int, "threads": int,
              "ops": int, "seconds": float, "ns_per_op": float, "gb_per_s": float, "min_ns": float,
              "median_ns": float, "max_ns": float, "x_tmpfs": float, "x_floor": float}
FS = {"floor", "tmpfs", "ext4", "mapfs", "mapfs-preload", "mapfs-fuse"}
# `mapfs bench overlay`: the kernel on each directory, the engines in-process
# and through the shim; every row names its directory and its speed against
# the kernel there.
OVERLAY_FS = {"tmpfs", "ext4", "xfs", "split", "virtual", "split-preload", "virtual-preload", "mapfs"}
OVERLAY_DIRS = {"tmpfs", "ext4", "xfs"}
# `mapfs bench mapping`: each mapfs row names its file-mapping design in
# `mode`; the §4.8 application rows ("4.8-...") have tmpfs and contiguous
# files beside the block-mapped designs.
MAPPING_DESIGNS = {"contiguous", "hashfs", "cuckoo", "extent", "radix"}


def check_mapping(rows, where):
    for i, r in enumerate(rows):
        if r["fs"] != "tmpfs" and r["mode"] not in MAPPING_DESIGNS:
            return f"{where}: row {i} design (mode) '{r['mode']}'"
        if r["workload"].startswith("4.8-"):
            if r["fs"] not in ("tmpfs", "mapfs-preload" if "ycsb" in r["workload"] else "mapfs"):
                return f"{where}: row {i} {r['workload']} on fs '{r['fs']}'"
            if r["ops"] <= 0 or r["ns_per_op"] <= 0:
                return f"{where}: row {i} {r['workload']} without operations"
    for w, t in {(r["workload"], r["threads"]) for r in rows if r["workload"].startswith("4.8-")}:
        have = {"tmpfs" if r["fs"] == "tmpfs" else r["mode"] for r in rows
                if r["workload"] == w and r["threads"] == t}
        if not {"tmpfs", "contiguous"} <= have:
            return f"{where}: {w} ({t} threads) has no tmpfs or contiguous row beside {sorted(have)}"
    return None


def check_suite(doc, where):
    for k in ("suite", "machine", "results"):
        if k not in doc:
            return f"{where}: no '{k}'"
    rows = doc["results"]
    if not rows:
        return f"{where}: no results"
    for i, r in enumerate(rows):
        for k, t in ROW_FIELDS.items():
            if k not in r:
                return f"{where}: row {i} has no '{k}'"
            if not isinstance(r[k], (int, float) if t is float else t):
                return f"{where}: row {i} '{k}' is {r[k]!r}"
        if doc["suite"] == "overlay":
            if r["fs"] not in OVERLAY_FS or r.get("dir") not in OVERLAY_DIRS:
                return f"{where}: row {i} fs '{r['fs']}' dir {r.get('dir')!r}"
            if not isinstance(r.get("x_kernel"), (int, float)):
                return f"{where}: row {i} has no numeric 'x_kernel'"
        elif r["fs"] not in FS:
            return f"{where}: row {i} fs '{r['fs']}'"
        if not r["min_ns"] <= r["median_ns"] <= r["max_ns"]:
            return f"{where}: row {i} spread out of order"
    fss = {r["fs"] for r in rows}
    if not fss & {"mapfs", "mapfs-preload"}:
        return f"{where}: no mapfs rows"
    if doc["suite"] not in ("pswap", "mapping") and "tmpfs" not in fss:
        return f"{where}: no tmpfs baseline"
    if doc["suite"] == "overlay":
        # Each directory measured has its kernel rows, and the engines ran.
        for d in {r["dir"] for r in rows}:
            if not any(r["fs"] == d and r["dir"] == d for r in rows):
                return f"{where}: no kernel rows on {d}"
        if not fss & {"split", "split-preload"} or "virtual" not in fss:
            return f"{where}: no engine rows"
    if doc["suite"] == "mapping":
        return check_mapping(rows, where)
    return None


def main():
    for path in sys.argv[1:]:
        with open(path) as f:
            doc = json.load(f)
        suites = doc["suites"] if doc.get("suite") == "all" else [doc]
        for s in suites:
            err = check_suite(s, f"{path} ({s.get('suite')})")
            if err:
                print(f"check_results_json: {err}", file=sys.stderr)
                return 1
        print(f"{path}: {', '.join(s['suite'] + ' ' + str(len(s['results'])) + ' rows' for s in suites)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
