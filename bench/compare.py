#!/usr/bin/env python3
"""Compare two `make bench` result folders; flag every metric more than 10% worse.
Usage: bench/compare.py OLD_DIR NEW_DIR [--threshold PCT]   exit 1 if any metric regressed."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import HIGHER_IS_BETTER, human_size, medians  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--threshold", type=float, default=10.0, help="percent worse that counts (default 10)")
    a = ap.parse_args()
    old, new = medians(a.old), medians(a.new)
    common = sorted(set(old) & set(new))
    if not common:
        print("compare: no metric in common between the two folders", file=sys.stderr)
        return 2
    bad = 0
    w = max(len(k[0]) for k in common)
    print(f"{'test':<{w}}  {'size':>8}  {'metric':<14} {'old':>12} {'new':>12} {'change':>8}  verdict")
    for k in common:
        test, _tool, _tr, size, metric = k
        o, n = old[k], new[k]
        if o == 0:
            continue
        change = (n - o) / o * 100
        worse = -change if HIGHER_IS_BETTER[metric] else change
        verdict = ""
        if worse > a.threshold:
            verdict = "WORSE"
            bad += 1
        elif worse < -a.threshold:
            verdict = "better"
        print(f"{test:<{w}}  {human_size(size):>8}  {metric:<14} {o:>12.4g} {n:>12.4g} {change:>+7.1f}%  {verdict}")
    only = len(set(old) ^ set(new))
    print(f"\n{len(common)} metrics compared, {bad} more than {a.threshold:g}% worse"
          + (f", {only} present in only one folder" if only else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
