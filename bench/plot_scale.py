#!/usr/bin/env python3
"""Plot of `make sim-scale` (omx-sim-scale --csv): simulated completion time, memory per
endpoint and wall time of each scenario against the number of hosts.
Usage: bench/plot_scale.py SCALE_CSV OUT_PNG"""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = defaultdict(list)
    with open(sys.argv[1]) as f:
        for r in csv.DictReader(f):
            rows[r["scenario"]].append(r)
    panels = [
        ("sim_ms", "simulated completion (ms)"),
        ("endpoint_kib", "heap per endpoint after traffic (KiB)"),
        ("traffic_peak_kib_per_endpoint", "peak heap growth per endpoint (KiB)"),
        ("wall_s", "wall time of the simulation (s)"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(18, 4.2))
    for ax, (key, title) in zip(axes, panels):
        for name, rs in rows.items():
            # Runs too short to time (0.00 s) have no place on a log scale.
            points = [(int(r["hosts"]), float(r[key])) for r in rs if float(r[key]) > 0]
            ax.plot(*zip(*points), "o-", label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("hosts")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("omx engine, simulated cluster behind one switch (omx-sim-scale)")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
