#!/usr/bin/env python3
"""summary.md of one `make bench` result folder (medians over runs, omx / peer ratios).
Usage: bench/summary.py RESULT_DIR"""
import csv
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import load  # noqa: E402

MIB4 = 4 << 20


def fmt(v, metric):
    if v is None:
        return "n/a"
    if metric == "msgs_per_s":
        return f"{v / 1e6:.2f} M"
    if metric == "latency_us":
        return f"{v:.2f}"
    return f"{v:.0f}"


def paused_section(folder):
    """The paused ping-pong (bench/paused_pingpong.c): median one-way latency by pause."""
    path = os.path.join(folder, "paused.csv")
    if not os.path.exists(path):
        return []
    by_pause = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            by_pause.setdefault(float(r["pause_us"]), []).append(float(r["median_oneway_us"]))
    base = statistics.median(by_pause[0.0]) if 0.0 in by_pause else None
    out = ["", "8 B ping-pong with a pause (usleep) before each round, one way, after the pause:", "",
           "| pause (us) | median one-way (us) | / back to back |", "|---|---|---|"]
    for pause in sorted(by_pause):
        v = statistics.median(by_pause[pause])
        ratio = f"{v / base:.2f}" if base else "n/a"
        out.append(f"| {pause:g} | {v:.2f} (n={len(by_pause[pause])}) | {ratio} |")
    return out


def main():
    folder = sys.argv[1]
    data = load(folder)

    def get(test, size, metric):
        for k, v in data.items():
            if k[0] == test and k[3] == size and k[4] == metric:
                return statistics.median(v), len(v)
        return None, 0

    def any_size(test, metric):  # raw_stream is measured at one (MTU) size
        for k, v in data.items():
            if k[0] == test and k[4] == metric:
                return statistics.median(v), len(v), k[3]
        return None, 0, None

    rs, rsn, rsize = any_size("raw_stream", "bandwidth_MBps")
    rows = [
        ("8 B latency (us), lower is better", "latency_us", ("omx_pingpong", 8), [
            ("raw AF_PACKET ping-pong, busy-poll (floor)", ("raw_pingpong", 8)),
            ("TCP, qperf `tcp_lat` (blocking)", ("qperf_tcp_lat", 8)),
            ("TCP ping-pong, TCP_NODELAY (ours, blocking)", ("tcp_pingpong", 8)),
            ("libfabric `tcp;ofi_rxm` fi_pingpong", ("fi_pingpong_tcp", 8)),
            ("libfabric `udp;ofi_rxd` fi_pingpong", ("fi_pingpong_udp", 8)),
            ("UCX `tag_lat`, UCX_TLS=tcp", ("ucx_tcp_tag_lat", 8)),
        ]),
        ("8 B intra-node latency (us), lower is better", "latency_us", ("omx_local_pingpong", 8), [
            ("UCX `tag_lat`, UCX_TLS=sm", ("ucx_sm_tag_lat", 8)),
        ]),
        ("4 MiB bandwidth (MB/s)", "bandwidth_MBps", ("omx_pingpong", MIB4), [
            (f"raw AF_PACKET {rsize}-byte frame stream (floor)", None),
            ("TCP stream, qperf `tcp_bw`", ("qperf_tcp_bw", MIB4)),
            ("TCP ping-pong, TCP_NODELAY (ours)", ("tcp_pingpong", MIB4)),
            ("libfabric `tcp;ofi_rxm` fi_pingpong", ("fi_pingpong_tcp", MIB4)),
            ("libfabric `udp;ofi_rxd` fi_pingpong", ("fi_pingpong_udp", MIB4)),
            ("UCX `tag_bw`, UCX_TLS=tcp", ("ucx_tcp_tag_bw", MIB4)),
        ]),
        ("4 MiB intra-node bandwidth (MB/s)", "bandwidth_MBps", ("omx_local_pingpong", MIB4), [
            ("UCX `tag_bw`, UCX_TLS=sm", ("ucx_sm_tag_bw", MIB4)),
        ]),
        ("8 B message rate (msg/s, one direction)", "msgs_per_s", ("omx_msgrate", 8), [
            ("TCP, qperf `tcp_bw -m 8` (bytes / 8)", ("qperf_tcp_bw", 8)),
            ("UCX `tag_bw`, UCX_TLS=tcp", ("ucx_tcp_tag_bw", 8)),
            ("UCX `tag_bw`, UCX_TLS=sm (intra-node)", ("ucx_sm_tag_bw", 8)),
        ]),
    ]
    out = ["# `make bench` summary", ""]
    mpath = os.path.join(folder, "machine.txt")
    if os.path.exists(mpath):
        out += ["Machine: " + "; ".join(l.strip() for l in open(mpath) if l.strip()), ""]
    out += [
        "Medians over the runs (n = runs); two network namespaces joined by veth; one-way latency;",
        "MB = 10^6 B; omx ping-pong bandwidth = size / one-way latency.",
        "Intra-node rows: omx_perf with both ends in one namespace (shared memory) against UCX sm;",
        "the 8 B message-rate row compares omx between hosts with UCX sm within one.",
        "",
        "| metric | omx | peer | peer value | omx / peer |",
        "|---|---|---|---|---|",
    ]
    for title, metric, omx_key, peers in rows:
        ov, on = get(*omx_key, metric)
        for label, key in peers:
            if key is None:
                pv, pn = rs, rsn
            else:
                pv, pn = get(*key, metric)
            ratio = f"{ov / pv:.2f}" if ov is not None and pv else "n/a"
            out.append(f"| {title} | {fmt(ov, metric)} (n={on}) | {label} | {fmt(pv, metric)} (n={pn}) | {ratio} |")
    out += paused_section(folder)
    out += ["", "Plots: latency.png, bandwidth.png, msgrate.png; raw data: *.csv in this folder."]
    print("\n".join(out))


if __name__ == "__main__":
    main()
