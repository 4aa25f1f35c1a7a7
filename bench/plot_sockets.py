#!/usr/bin/env python3
"""Summary and plot of one bench/sockets.sh result folder: summary.md (medians over runs
per MTU: ping-pong latency by size with omx/TCP and omx/omx_perf ratios against the goals
of issue 25, iperf3 bandwidth, connection rate, CPU per message and per byte) and
sockets.png (latency vs size per MTU; bandwidth and connection-rate bars).
Usage: bench/plot_sockets.py [--no-plot] RESULT_DIR"""
import csv
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import human_size  # noqa: E402

# Goals of issue 25 at 16 B: omx <= 0.75x kernel TCP and <= 1.2x omx_perf.
GOAL_VS_TCP = 0.75
GOAL_VS_PERF = 1.2
COLUMNS = ("latency_us", "bandwidth_MBps", "msgs_per_s", "cpu_us_per_msg", "cpu_ns_per_byte")


def load(folder):
    """{(part, mtu, transport, size, column): median over runs}."""
    vals = {}
    with open(os.path.join(folder, "sockets.csv"), newline="") as f:
        for r in csv.DictReader(f):
            for c in COLUMNS:
                v = (r.get(c) or "").strip()
                if v:
                    key = (r["part"], int(r["mtu"]), r["transport"], int(r["size"]), c)
                    vals.setdefault(key, []).append(float(v))
    return {k: statistics.median(v) for k, v in vals.items()}


def get(med, part, mtu, transport, size, col):
    return med.get((part, mtu, transport, size, col))


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def ratio(a, b):
    return None if a is None or not b else a / b


def summary(folder, med):
    mtus = sorted({k[1] for k in med})
    lines = ["# Sockets over omx against kernel TCP (bench/sockets.sh)", ""]
    machine = os.path.join(folder, "machine.txt")
    if os.path.exists(machine):
        lines += ["```", open(machine).read().strip(), "```", ""]
    for mtu in mtus:
        sizes = sorted({k[3] for k in med if k[0] == "latency" and k[1] == mtu})
        if sizes:
            lines += [
                f"## MTU {mtu}: ping-pong, median one-way latency (us)",
                "",
                "| size | omx sockets | kernel TCP | omx_perf -w | omx/TCP | omx/omx_perf "
                "| CPU us/msg omx | CPU us/msg TCP |",
                "|---|---|---|---|---|---|---|---|",
            ]
            for s in sizes:
                o = get(med, "latency", mtu, "omx", s, "latency_us")
                t = get(med, "latency", mtu, "tcp", s, "latency_us")
                p = get(med, "latency", mtu, "omx_raw", s, "latency_us")
                lines.append(
                    f"| {human_size(s)} | {fmt(o)} | {fmt(t)} | {fmt(p)} | "
                    f"{fmt(ratio(o, t), 2)} | {fmt(ratio(o, p), 2)} | "
                    f"{fmt(get(med, 'latency', mtu, 'omx', s, 'cpu_us_per_msg'), 2)} | "
                    f"{fmt(get(med, 'latency', mtu, 'tcp', s, 'cpu_us_per_msg'), 2)} |"
                )
            small = sizes[0]
            vs_tcp = ratio(
                get(med, "latency", mtu, "omx", small, "latency_us"),
                get(med, "latency", mtu, "tcp", small, "latency_us"),
            )
            vs_perf = ratio(
                get(med, "latency", mtu, "omx", small, "latency_us"),
                get(med, "latency", mtu, "omx_raw", small, "latency_us"),
            )
            met = lambda r, goal: "-" if r is None else ("met" if r <= goal else "not met")  # noqa: E731
            lines += [
                "",
                f"Goal at {human_size(small)}: omx <= {GOAL_VS_TCP}x TCP: {fmt(vs_tcp, 2)} "
                f"({met(vs_tcp, GOAL_VS_TCP)}); omx <= {GOAL_VS_PERF}x omx_perf: "
                f"{fmt(vs_perf, 2)} ({met(vs_perf, GOAL_VS_PERF)}).",
                "",
            ]
        bw = [(t, get(med, "bandwidth", mtu, t, s, "bandwidth_MBps"), s)
              for t, s in (("omx", 131072), ("tcp", 131072), ("omx_raw", 4194304),
                           ("raw", mtu + 14))]
        if any(v is not None for _, v, _ in bw):
            lines += [f"## MTU {mtu}: single stream (MB/s)", "",
                      "| omx sockets (iperf3) | kernel TCP (iperf3) | omx_perf 4 MiB "
                      "| raw frames | omx/TCP | CPU ns/B omx | CPU ns/B TCP |",
                      "|---|---|---|---|---|---|---|"]
            o, t, p, r = (v for _, v, _ in bw)
            lines += [f"| {fmt(o, 0)} | {fmt(t, 0)} | {fmt(p, 0)} | {fmt(r, 0)} | "
                      f"{fmt(ratio(o, t), 2)} | "
                      f"{fmt(get(med, 'bandwidth', mtu, 'omx', 131072, 'cpu_ns_per_byte'), 3)} | "
                      f"{fmt(get(med, 'bandwidth', mtu, 'tcp', 131072, 'cpu_ns_per_byte'), 3)} |", ""]
        o = get(med, "connrate", mtu, "omx", 1, "msgs_per_s")
        t = get(med, "connrate", mtu, "tcp", 1, "msgs_per_s")
        if o is not None or t is not None:
            lines += [f"## MTU {mtu}: connections per second (connect, 1 B each way, close)", "",
                      "| omx sockets | kernel TCP | omx/TCP | CPU us/conn omx | CPU us/conn TCP |",
                      "|---|---|---|---|---|",
                      f"| {fmt(o, 0)} | {fmt(t, 0)} | {fmt(ratio(o, t), 2)} | "
                      f"{fmt(get(med, 'connrate', mtu, 'omx', 1, 'cpu_us_per_msg'), 1)} | "
                      f"{fmt(get(med, 'connrate', mtu, 'tcp', 1, 'cpu_us_per_msg'), 1)} |", ""]
        lines += before_after(med, mtu)
    with open(os.path.join(folder, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def before_after(med, mtu):
    """Rows for BEFORE_LIB's build (transport omx_before) beside this one, if measured."""
    rows = []
    for part, size, col, unit, digits in (
        ("bandwidth", 131072, "bandwidth_MBps", "iperf3 MB/s", 0),
        ("bandwidth", 131072, "cpu_ns_per_byte", "iperf3 CPU ns/B", 3),
        ("connrate", 1, "msgs_per_s", "connections/s", 0),
        ("connrate", 1, "cpu_us_per_msg", "CPU us/connection", 1),
    ) + tuple(("latency", s, "latency_us", f"ping-pong {human_size(s)} us", 1)
              for s in sorted({k[3] for k in med if k[0] == "latency" and k[1] == mtu})):
        b = get(med, part, mtu, "omx_before", size, col)
        a = get(med, part, mtu, "omx", size, col)
        if b is not None:
            rows.append(f"| {unit} | {fmt(b, digits)} | {fmt(a, digits)} | {fmt(ratio(a, b), 2)} |")
    if not rows:
        return []
    return [f"## MTU {mtu}: omx sockets before (BEFORE_LIB) and after", "",
            "| metric | before | after | after/before |", "|---|---|---|---|"] + rows + [""]


def plot(folder, med):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mtus = sorted({k[1] for k in med})
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    ax = axes[0]
    styles = {"omx": "o-", "tcp": "s--", "omx_raw": "x:"}
    labels = {"omx": "omx sockets (sockperf)", "tcp": "kernel TCP (sockperf)",
              "omx_raw": "omx_perf -w"}
    for mtu in mtus:
        for t in ("omx", "tcp", "omx_raw"):
            pts = sorted((k[3], v) for k, v in med.items()
                         if k[0] == "latency" and k[1] == mtu and k[2] == t and k[4] == "latency_us")
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], styles[t],
                        label=f"{labels[t]}, MTU {mtu}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (B)")
    ax.set_ylabel("median one-way latency (us)")
    ax.set_title("ping-pong")
    ax.legend(fontsize=7)
    for ax, part, col, size_of, title, unit in (
        (axes[1], "bandwidth", "bandwidth_MBps", {"omx": 131072, "tcp": 131072, "omx_raw": 4194304},
         "single stream", "MB/s"),
        (axes[2], "connrate", "msgs_per_s", {"omx": 1, "tcp": 1}, "connection set-up", "connections/s"),
    ):
        names = list(size_of)
        width = 0.8 / max(1, len(mtus))
        for i, mtu in enumerate(mtus):
            vals = [get(med, part, mtu, t, size_of[t], col) or 0 for t in names]
            ax.bar([x + i * width for x in range(len(names))], vals, width, label=f"MTU {mtu}")
        ax.set_xticks([x + width * (len(mtus) - 1) / 2 for x in range(len(names))])
        ax.set_xticklabels([labels.get(n, n).split(" (")[0] for n in names], fontsize=8)
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "sockets.png"), dpi=110)


def main():
    args = [a for a in sys.argv[1:] if a != "--no-plot"]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    med = load(args[0])
    summary(args[0], med)
    if "--no-plot" not in sys.argv:
        plot(args[0], med)


if __name__ == "__main__":
    main()
