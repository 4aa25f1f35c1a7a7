#!/usr/bin/env python3
"""Plot and summary of one bench/intranode.sh result folder: intranode.png (latency and
bandwidth vs size, omx vs UCX, memcpy as the ceiling) and summary.md (medians over runs,
omx / peer ratios, the full size table).
Usage: bench/plot_intranode.py RESULT_DIR"""
import csv
import glob
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import HIGHER_IS_BETTER, human_size, load, medians, series, value  # noqa: E402

MIB4 = 4 << 20
MIB64 = 64 << 20

# (test file, label, style)
LAT = [
    ("omx_shm", "omx, shared memory (omx_perf, busy-poll)", "o-"),
    ("omx_net", "omx, same-host network path over lo (OMX_DISABLE_SHARED=1)", "s--"),
    ("ucx_sm_tag_lat", "UCX tag_lat, UCX_TLS=sm", "x-"),
    ("ucx_posix_cma_tag_lat", "UCX tag_lat, UCX_TLS=posix,cma", "+:"),
]
BW = [
    ("omx_shm", "omx ping-pong, shared memory", "o-"),
    ("omx_net", "omx ping-pong, network path over lo", "s--"),
    ("ucx_sm_tag_lat", "UCX ping-pong (tag_lat), sm", "x-"),
    ("ucx_sm_tag_bw", "UCX stream (tag_bw), sm", "d-"),
    ("ucx_posix_cma_tag_bw", "UCX stream (tag_bw), posix,cma", "+:"),
    ("memcpy", "memcpy, one thread (ceiling of one copy)", "k--"),
]


def extra_medians(folder, column):
    """{(test, size): median} of an extra CSV column (latency_p50_us, best_MBps)."""
    vals = {}
    for path in glob.glob(os.path.join(folder, "*.csv")):
        test = os.path.splitext(os.path.basename(path))[0]
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                v = (r.get(column) or "").strip()
                if v:
                    vals.setdefault((test, int(r["size"])), []).append(float(v))
    return {k: statistics.median(v) for k, v in vals.items()}


def size_axis(ax):
    ax.set_xscale("symlog", base=2, linthresh=1)
    ticks = [0, 1, 8, 64, 512, 4096, 32768, 262144, 1 << 21, 1 << 24, 1 << 26]
    ax.set_xticks(ticks)
    ax.set_xticklabels([human_size(t).replace(" ", "") for t in ticks], rotation=30)
    ax.set_xlabel("message size")
    ax.grid(True, which="major", alpha=0.3)


def plot(med, path, title):
    fig, (al, ab) = plt.subplots(1, 2, figsize=(14, 5.5), dpi=90)
    for ax, specs, metric, ylabel in ((al, LAT, "latency_us", "one-way latency (us, log)"),
                                      (ab, BW, "bandwidth_MBps", "bandwidth (MB/s = 10^6 B/s, log)")):
        for test, label, style in specs:
            pts = [p for p in series(med, test, metric) if p[1] > 0]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label, markersize=4)
        size_axis(ax)
        ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
    al.set_title("Latency vs size (medians over runs)")
    ab.set_title("Bandwidth vs size (medians over runs)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def fmt(v, metric):
    if v is None:
        return "n/a"
    return f"{v:.2f}" if metric == "latency_us" else f"{v:.0f}"


def ratio(a, b):
    return f"{a / b:.2f}" if a is not None and b else "n/a"


def main():
    folder = sys.argv[1]
    med = medians(folder)
    p50 = extra_medians(folder, "latency_p50_us")
    machine = ""
    mpath = os.path.join(folder, "machine.txt")
    if os.path.exists(mpath):
        machine = open(mpath).read()
    date = machine.splitlines()[0].split(":", 1)[1].strip() if machine else ""
    plot(med, os.path.join(folder, "intranode.png"),
         f"Intra-node: two processes of one host, {date}")

    raw = load(folder)

    def v(test, size, metric):
        return value(med, test, size, metric)

    def best(test, size, metric):
        for k, vals in raw.items():
            if k[0] == test and k[3] == size and k[4] == metric:
                return max(vals) if HIGHER_IS_BETTER[metric] else min(vals)
        return None

    def cell(test, size, metric):  # "median (best of n)"
        m = v(test, size, metric)
        if m is None:
            return "n/a"
        n = max((len(x) for k, x in raw.items()
                 if k[0] == test and k[3] == size and k[4] == metric), default=0)
        if n < 2:
            return fmt(m, metric)
        return f"{fmt(m, metric)} (best {fmt(best(test, size, metric), metric)}, n={n})"

    out = ["# Intra-node benchmark", "", "```", machine.rstrip(), "```", ""]
    out += [
        "Two processes of one host. omx: `omx_perf` ping-pong (client `-d localhost`,",
        "OMX_IFACES=lo, busy-poll), latency = half the round trip averaged over the iterations,",
        "bandwidth = size / that latency. UCX: `ucx_perftest` `tag_lat` (same ping-pong method;",
        "its average is used, its median over iterations is shown too) and `tag_bw`",
        "(one-way stream). memcpy: one thread, median of copies. Values are medians over runs,",
        "with the best run in brackets: on a small or busy machine the other processes' load",
        "shows up as slow runs (see the load average above).",
        "",
        "| metric | omx, shared memory | peer | peer value | omx / peer (medians) | "
        "omx / peer (bests) |",
        "|---|---|---|---|---|---|",
    ]

    def line(metric_label, metric, size, peer_label, ptest, psize):
        om, pm = v("omx_shm", size, metric), v(ptest, psize, metric)
        ob, pb = best("omx_shm", size, metric), best(ptest, psize, metric)
        pcell = cell(ptest, psize, metric)
        if metric == "latency_us" and (ptest, psize) in p50:
            pcell += f" [median of iterations {p50[(ptest, psize)]:.2f}]"
        out.append(f"| {metric_label} | {cell('omx_shm', size, metric)} | {peer_label} | {pcell} | "
                   f"{ratio(om, pm)} | {ratio(ob, pb)} |")

    for label, test in (("UCX `tag_lat`, UCX_TLS=sm", "ucx_sm_tag_lat"),
                        ("UCX `tag_lat`, UCX_TLS=posix,cma", "ucx_posix_cma_tag_lat"),
                        ("omx network path over lo (OMX_DISABLE_SHARED=1)", "omx_net")):
        line("8 B one-way latency (us), lower is better", "latency_us", 8, label, test, 8)
    for size in (MIB4, MIB64):
        peers = [
            ("UCX ping-pong (`tag_lat`), sm", "ucx_sm_tag_lat", size),
            ("UCX stream (`tag_bw`), sm", "ucx_sm_tag_bw", size),
            ("UCX ping-pong (`tag_lat`), posix,cma", "ucx_posix_cma_tag_lat", size),
            ("UCX stream (`tag_bw`), posix,cma", "ucx_posix_cma_tag_bw", size),
            (f"memcpy of {human_size(size)}, one thread", "memcpy", size),
            ("omx network path over lo", "omx_net", size),
        ]
        if size == MIB4:
            peers.insert(5, ("memcpy of 64 MiB, one thread (out of cache)", "memcpy", MIB64))
        for label, test, psize in peers:
            line(f"{human_size(size)} bandwidth (MB/s), higher is better", "bandwidth_MBps", size,
                 label, test, psize)
    out += ["", "## Every size", "",
            "Latency in us (one way), bandwidth in MB/s; UCX ping-pong bandwidth is size / latency.",
            "",
            "| size | omx shm lat | omx shm MB/s | omx net lat | omx net MB/s | UCX sm lat | UCX sm "
            "ping-pong MB/s | UCX sm stream MB/s | UCX posix,cma lat | UCX posix,cma stream MB/s "
            "| memcpy MB/s |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    sizes = sorted({k[3] for k in med})
    for s in sizes:
        cells = [
            v("omx_shm", s, "latency_us"), v("omx_shm", s, "bandwidth_MBps"),
            v("omx_net", s, "latency_us"), v("omx_net", s, "bandwidth_MBps"),
            v("ucx_sm_tag_lat", s, "latency_us"), v("ucx_sm_tag_lat", s, "bandwidth_MBps"),
            v("ucx_sm_tag_bw", s, "bandwidth_MBps"),
            v("ucx_posix_cma_tag_lat", s, "latency_us"), v("ucx_posix_cma_tag_bw", s, "bandwidth_MBps"),
            v("memcpy", s, "bandwidth_MBps"),
        ]
        metrics = ["latency_us", "b", "latency_us", "b", "latency_us", "b", "b", "latency_us", "b", "b"]
        out.append(f"| {human_size(s)} | " + " | ".join(
            "" if c is None else fmt(c, m) for c, m in zip(cells, metrics)) + " |")
    out += ["", "Plot: intranode.png; raw data: *.csv (logs/ holds the tools' output)."]
    with open(os.path.join(folder, "summary.md"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
