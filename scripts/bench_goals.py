#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks a `kvmesh bench --markdown` table against issue #12's goals.

Usage: build/bin/kvmesh bench --markdown > run.md; scripts/bench_goals.py run.md

Reads the main table (transport | size | op | kvmesh GB/s | ... | kvmesh/redis |
kvmesh/memcached | kvmesh/memcpy) and prints, per goal and row, the measured ratio, the goal,
and "met" or "missed by F" (goal / measured). Exit status 0 always: this is a report, not a
test (timings are never asserted).

The memcpy goals are also shown against the bench's second memcpy line, a copy from (get) or
into (put) a working set as large as the kvmesh rows' ("memcpy against the working set"), since
the first line copies the same two buffers over and over (in cache up to their size). The goal
verdict stays the one against the first line.
"""
import re
import sys

GOALS = [
    # (description, transports, sizes, ops, column, goal)
    ("4 KiB batches >= 1x Redis pipelined", None, ["4KiB"], ["batch_put", "batch_get"], "redis", 1.0),
    ("4 KiB batches >= 1x memcached", None, ["4KiB"], ["batch_put", "batch_get"], "memcached", 1.0),
    ("4 KiB get >= 1x Redis", None, ["4KiB"], ["get"], "redis", 1.0),
    ("4 KiB put >= 0.7x Redis", None, ["4KiB"], ["put"], "redis", 0.7),
    (">= 256 KiB tcp get/put >= 2x Redis", ["tcp"], ["256KiB", "1MiB", "16MiB"], ["get", "put"], "redis", 2.0),
    (">= 256 KiB tcp get/put >= 1x memcached", ["tcp"], ["256KiB", "1MiB", "16MiB"], ["get", "put"], "memcached", 1.0),
    (">= 1 MiB shm get >= 0.6x memcpy", ["shm"], ["1MiB", "16MiB"], ["get"], "memcpy", 0.6),
    (">= 1 MiB shm put >= 0.4x memcpy", ["shm"], ["1MiB", "16MiB"], ["put"], "memcpy", 0.4),
]


def parse(path):
    rows = []
    header = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("|"):
                header = None if not line.strip() else header
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells and cells[0] == "transport":
                header = cells if "kvmesh/redis" in cells else None
                continue
            if header is None or cells[0].startswith("---") or len(cells) != len(header):
                continue
            rows.append(dict(zip(header, cells)))
    return rows


def parse_ws(path):
    """{size: (get GB/s, put GB/s)} from the "memcpy against the working set" line."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("memcpy against the working set"):
                for m in re.finditer(r"(\w+) ([0-9.]+) / ([0-9.]+) GB/s", line.split(":", 1)[1]):
                    out[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    return out


def gbs(row):
    try:
        return float(row.get("kvmesh GB/s", ""))
    except ValueError:
        return None


def ratio(row, col):
    v = row.get("kvmesh/" + col, "").rstrip("x")
    try:
        return float(v)
    except ValueError:
        return None


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    rows = parse(sys.argv[1])
    ws = parse_ws(sys.argv[1])
    if not rows:
        print("no kvmesh bench table (run with --markdown) in " + sys.argv[1], file=sys.stderr)
        return 2
    print("| goal | transport | size | op | measured | verdict |")
    print("| --- | --- | --- | --- | ---: | --- |")
    for desc, xprts, sizes, ops, col, goal in GOALS:
        for r in rows:
            if xprts and r["transport"] not in xprts:
                continue
            if r["size"] not in sizes or r["op"] not in ops:
                continue
            m = ratio(r, col)
            if m is None:
                verdict = "no peer measured"
            elif m >= goal:
                verdict = "met"
            else:
                verdict = "missed by %.1fx" % (goal / m if m > 0 else float("inf"))
            shown = "-" if m is None else "%.2fx" % m
            if col == "memcpy" and r["size"] in ws and gbs(r):
                base = ws[r["size"]][0 if r["op"] == "get" else 1]
                if base > 0:
                    shown += " (%.2fx of the working-set memcpy)" % (gbs(r) / base)
            print("| %s | %s | %s | %s | %s | %s |" % (desc, r["transport"], r["size"], r["op"], shown, verdict))
    return 0


if __name__ == "__main__":
    sys.exit(main())
