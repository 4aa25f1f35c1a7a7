#!/usr/bin/env python3
"""Summary (markdown on stdout) and plot of bench/mpi_pingpong.sh results.

    python3 bench/plot_mpi.py RESULT_DIR > RESULT_DIR/summary.md

Reads RESULT_DIR/mpi_pingpong.csv (tool,transport,size,latency_us,
bandwidth_MBps,runs) and machine.txt; writes RESULT_DIR/mpi_pingpong.png when
matplotlib is available.
"""
import csv
import math
import os
import statistics
import sys

ORDER = ["mpi-omx", "mpi-tcp", "mpi-ofitcp", "mpich-omx", "mpich-tcp", "fi-omx", "fi-tcp", "omx_perf", "raw"]
LABEL = {
    "mpi-omx": "Open MPI over omx (cm/ofi/omx)",
    "mpi-tcp": "Open MPI over TCP (ob1/tcp)",
    "mpi-ofitcp": "Open MPI over libfabric tcp (cm/ofi/tcp;ofi_rxm)",
    "mpich-omx": "MPICH over omx (ch4:ofi/omx)",
    "mpich-tcp": "MPICH over libfabric tcp (ch4:ofi/tcp;ofi_rxm)",
    "fi-omx": "fi_pingpong -p omx",
    "fi-tcp": "fi_pingpong -p tcp;ofi_rxm",
    "omx_perf": "omx_perf (MX API)",
    "raw": "raw frames: 8 B ping-pong, full-MTU one-way stream (floor)",
}
LAT_SIZES = [1, 8, 64, 512, 4096, 32768]
BW_SIZES = [65536, 1048576, 4194304, 16777216]


def human(n):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def load(path):
    data = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("tool") == "pair":
                continue  # the `pairs` stack: see load_pairs
            try:
                size = int(row["size"])
                lat = float(row["latency_us"])
                bw = float(row["bandwidth_MBps"])
            except (KeyError, ValueError):
                continue
            data.setdefault(row["transport"], {}).setdefault(size, []).append((lat, bw))
    out = {}
    for t, sizes in data.items():
        out[t] = {
            s: (statistics.median(v[0] for v in vals), statistics.median(v[1] for v in vals))
            for s, vals in sizes.items()
        }
    return out


def load_pairs(path):
    """8 B latencies of the `pairs` stack: {pair index: {tool: latency}}."""
    by = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("tool") != "pair":
                continue
            try:
                by.setdefault(int(row["runs"]), {})[row["transport"]] = float(row["latency_us"])
            except (KeyError, ValueError):
                continue
    return by


def get(data, t, size, col):
    v = data.get(t, {}).get(size)
    return None if v is None else v[col]


def fmt(v, digits=1):
    return "-" if v is None or math.isnan(v) else f"{v:.{digits}f}"


def ratio(a, b):
    if a is None or b is None or b == 0 or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    data = load(os.path.join(d, "mpi_pingpong.csv"))
    stacks = [t for t in ORDER if t in data] + sorted(t for t in data if t not in ORDER)
    p = print
    p("# MPI ping-pong: Open MPI and MPICH over omx against TCP\n")
    mt = os.path.join(d, "machine.txt")
    if os.path.exists(mt):
        p("```")
        p(open(mt).read().rstrip())
        p("```\n")
    p("Two hosts (network namespaces joined by veth), half round trip. The CPU may be")
    p("shared with other work: read the figures as indicative.\n")
    p("## Latency (us, half round trip)\n")
    p("| stack | " + " | ".join(human(s) for s in LAT_SIZES) + " |")
    p("|---|" + "---:|" * len(LAT_SIZES))
    for t in stacks:
        p(f"| {LABEL.get(t, t)} | " + " | ".join(fmt(get(data, t, s, 0), 2) for s in LAT_SIZES) + " |")
    p("\n## Bandwidth (MB/s, 10^6 B/s, ping-pong)\n")
    p("| stack | " + " | ".join(human(s) for s in BW_SIZES) + " |")
    p("|---|" + "---:|" * len(BW_SIZES))
    for t in stacks:
        p(f"| {LABEL.get(t, t)} | " + " | ".join(fmt(get(data, t, s, 1), 0) for s in BW_SIZES) + " |")

    p("\n## Ratios\n")
    p("| comparison | value |")
    p("|---|---:|")
    l8 = {t: get(data, t, 8, 0) for t in stacks}
    b4 = {t: get(data, t, 4194304, 1) for t in stacks}
    rows = [
        ("8 B latency, MPI: omx / TCP (below 1: omx faster)", ratio(l8.get("mpi-omx"), l8.get("mpi-tcp"))),
        ("8 B latency, MPI: omx / libfabric tcp", ratio(l8.get("mpi-omx"), l8.get("mpi-ofitcp"))),
        ("4 MiB bandwidth, MPI: omx / TCP (above 1: omx faster)", ratio(b4.get("mpi-omx"), b4.get("mpi-tcp"))),
        ("4 MiB bandwidth, MPI: omx / libfabric tcp", ratio(b4.get("mpi-omx"), b4.get("mpi-ofitcp"))),
        ("8 B latency, MPICH: omx / libfabric tcp", ratio(l8.get("mpich-omx"), l8.get("mpich-tcp"))),
        ("4 MiB bandwidth, MPICH: omx / libfabric tcp", ratio(b4.get("mpich-omx"), b4.get("mpich-tcp"))),
        ("8 B latency: fi_pingpong omx / fi_pingpong tcp;ofi_rxm", ratio(l8.get("fi-omx"), l8.get("fi-tcp"))),
        ("4 MiB bandwidth: fi_pingpong omx / fi_pingpong tcp;ofi_rxm", ratio(b4.get("fi-omx"), b4.get("fi-tcp"))),
        ("8 B latency, MPI over omx / raw frame ping-pong (the floor)", ratio(l8.get("mpi-omx"), l8.get("raw"))),
        ("4 MiB bandwidth, MPI over omx / raw full-MTU frame stream", ratio(b4.get("mpi-omx"), b4.get("raw"))),
        ("4 MiB bandwidth, omx_perf / raw full-MTU frame stream", ratio(b4.get("omx_perf"), b4.get("raw"))),
        ("4 MiB bandwidth, MPI over TCP / raw full-MTU frame stream", ratio(b4.get("mpi-tcp"), b4.get("raw"))),
    ]
    for name, v in rows:
        p(f"| {name} | {fmt(v, 2)} |")

    p("\n## Layer overhead (omx)\n")
    p("| layer | 8 B latency (us) | 4 MiB bandwidth (MB/s) |")
    p("|---|---:|---:|")
    for t in ("omx_perf", "fi-omx", "mpi-omx", "mpich-omx"):
        if t in data:
            p(f"| {LABEL[t]} | {fmt(l8.get(t), 2)} | {fmt(b4.get(t), 0)} |")
    a, b, c = l8.get("omx_perf"), l8.get("fi-omx"), l8.get("mpi-omx")
    if a is not None and b is not None:
        p(f"\nlibfabric provider over the MX API at 8 B: {b - a:+.2f} us")
    pairs = load_pairs(os.path.join(d, "mpi_pingpong.csv"))
    for tool, what in (
        ("pair-ofi_pingpong", "bench/ofi_pingpong (omx_perf's loop over libfabric)"),
        ("pair-fi-omx", "fi_pingpong (fabtests)"),
    ):
        both = [(v["pair-omx_perf"], v[tool]) for _, v in sorted(pairs.items())
                if "pair-omx_perf" in v and tool in v]
        if not both:
            continue
        diffs = sorted(f - m for m, f in both)
        p(
            f"{what} over omx_perf at 8 B, {len(both)} back-to-back pairs: median "
            f"{statistics.median(diffs):+.2f} us (from {diffs[0]:+.2f} to {diffs[-1]:+.2f}; "
            f"medians {statistics.median(m for m, _ in both):.2f} and "
            f"{statistics.median(f for _, f in both):.2f} us)"
        )
    if b is not None and c is not None:
        p(f"Open MPI (cm/ofi) over the provider at 8 B: {c - b:+.2f} us")
    if b is not None and l8.get("mpich-omx") is not None:
        p(f"MPICH (ch4:ofi) over the provider at 8 B: {l8['mpich-omx'] - b:+.2f} us")
    a, b = l8.get("fi-tcp"), l8.get("mpi-ofitcp")
    if a is not None and b is not None:
        p(f"Open MPI (cm/ofi) over libfabric tcp at 8 B, for comparison: {b - a:+.2f} us")

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        p("\n(no plot: matplotlib is not installed)")
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for t in stacks:
        if t == "raw":  # two single points, in the tables
            continue
        sizes = sorted(s for s in data[t] if s > 0)
        style = "-o" if t.startswith("mpi") else "--."
        ax1.plot(sizes, [data[t][s][0] for s in sizes], style, label=LABEL.get(t, t), ms=3)
        ax2.plot(sizes, [data[t][s][1] for s in sizes], style, label=LABEL.get(t, t), ms=3)
    for ax, title, unit in ((ax1, "latency", "us (half round trip)"), (ax2, "bandwidth", "MB/s")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(unit)
        ax.set_title(f"MPI ping-pong {title}")
        ax.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(d, "mpi_pingpong.png"), dpi=110)
    p("\n![MPI ping-pong](mpi_pingpong.png)")


if __name__ == "__main__":
    main()
