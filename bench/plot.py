#!/usr/bin/env python3
"""Plots of one `make bench` result folder: latency.png, bandwidth.png, msgrate.png.
Usage: bench/plot.py RESULT_DIR"""
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import human_size, medians, series  # noqa: E402

# (test file, metric, label, style); one line per stack
LAT = [
    ("omx_pingpong", "omx (omx_perf, busy-poll)", "o-"),
    ("raw_pingpong", "raw AF_PACKET ping-pong (floor)", "k--"),
    ("qperf_tcp_lat", "TCP (qperf tcp_lat)", "s-"),
    ("tcp_pingpong", "TCP ping-pong, TCP_NODELAY (ours)", "P-"),
    ("fi_pingpong_tcp", "libfabric tcp;ofi_rxm", "^-"),
    ("fi_pingpong_udp", "libfabric udp;ofi_rxd", "v-"),
    ("ucx_tcp_tag_lat", "UCX tcp (tag_lat)", "d-"),
    ("ucx_sm_tag_lat", "UCX sm, intra-node (tag_lat)", "x:"),
    ("omx_local_pingpong", "omx, intra-node (omx_perf, shared memory)", "o:"),
]
BW = [
    ("omx_pingpong", "omx (omx_perf ping-pong)", "o-"),
    ("raw_stream", "raw AF_PACKET full-MTU stream (floor)", "k*"),
    ("qperf_tcp_bw", "TCP stream (qperf tcp_bw)", "s-"),
    ("tcp_pingpong", "TCP ping-pong, TCP_NODELAY (ours)", "P-"),
    ("fi_pingpong_tcp", "libfabric tcp;ofi_rxm ping-pong", "^-"),
    ("fi_pingpong_udp", "libfabric udp;ofi_rxd ping-pong", "v-"),
    ("ucx_tcp_tag_bw", "UCX tcp (tag_bw stream)", "d-"),
    ("ucx_sm_tag_bw", "UCX sm, intra-node (tag_bw)", "x:"),
    ("omx_local_pingpong", "omx, intra-node (omx_perf ping-pong, shared memory)", "o:"),
]
RATE = [
    ("omx_msgrate", "omx"),
    ("qperf_tcp_bw", "TCP (qperf tcp_bw)"),
    ("ucx_tcp_tag_bw", "UCX tcp"),
    ("ucx_sm_tag_bw", "UCX sm (intra-node)"),
]


def size_axis(ax):
    ax.set_xscale("symlog", base=2, linthresh=1)
    ticks = [0, 1, 8, 64, 512, 4096, 32768, 262144, 1 << 21, 1 << 24]
    ax.set_xticks(ticks)
    ax.set_xticklabels([human_size(t).replace(" ", "") for t in ticks], rotation=30)
    ax.set_xlabel("message size")
    ax.grid(True, which="major", alpha=0.3)


def lines(med, specs, metric, ylabel, title, path):
    fig, ax = plt.subplots(figsize=(8, 5), dpi=90)
    for test, label, style in specs:
        pts = [p for p in series(med, test, metric) if p[1] > 0]  # log axis: drop zeros
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label,
                    markersize=10 if len(pts) == 1 else 4)
    size_axis(ax)
    ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def bars(med, path, mtu):
    # the sizes omx_msgrate measured (the peers' sweeps also cover bigger ones)
    sizes = sorted({s for s, _ in series(med, RATE[0][0], "msgs_per_s")}) or \
        sorted({s for t, _ in RATE for s, _ in series(med, t, "msgs_per_s")})
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=90)
    width = 0.8 / len(RATE)
    for i, (test, label) in enumerate(RATE):
        d = dict(series(med, test, "msgs_per_s"))
        xs = [j + i * width for j, s in enumerate(sizes) if s in d]
        ys = [d[s] / 1e6 for s in sizes if s in d]
        if xs:
            b = ax.bar(xs, ys, width, label=label)
            ax.bar_label(b, fmt="%.2f", fontsize=7, rotation=90, padding=2)
    ax.set_xticks([j + width * (len(RATE) - 1) / 2 for j in range(len(sizes))])
    ax.set_xticklabels([human_size(s) for s in sizes])
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 4)
    ax.set_ylabel("million messages / s, one direction (log)")
    ax.set_title(f"Message rate, MTU {mtu} (medians)")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main():
    folder = sys.argv[1]
    med = medians(folder)
    mtu = "?"
    mpath = os.path.join(folder, "machine.txt")
    if os.path.exists(mpath):
        for line in open(mpath):
            if line.startswith("mtu:"):
                mtu = line.split(":", 1)[1].strip()
    lines(med, LAT, "latency_us", "one-way latency (us)", f"Latency vs size, MTU {mtu} (medians)",
          os.path.join(folder, "latency.png"))
    lines(med, BW, "bandwidth_MBps", "bandwidth (MB/s, 10^6 B)", f"Bandwidth vs size, MTU {mtu} (medians)",
          os.path.join(folder, "bandwidth.png"))
    bars(med, os.path.join(folder, "msgrate.png"), mtu)


if __name__ == "__main__":
    main()
