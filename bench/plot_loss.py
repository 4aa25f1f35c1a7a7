#!/usr/bin/env python3
"""Summary and plot of one bench/loss.sh result folder: summary.md (a table per loss rate:
4 MiB throughput of omx and kernel TCP, 8 B latency mean/median/p99/max of both, the frames
actually dropped; then issue 22's targets against the figures) and loss.png (throughput
against loss rate; median and p99 latency against loss rate). Medians over runs.
Usage: bench/plot_loss.py [--no-plot] RESULT_DIR"""
import csv
import os
import statistics
import sys

BW_TESTS = [("omx_bw", "omx (omx_perf ping-pong)"), ("tcp_bw", "TCP (qperf tcp_bw stream)"),
            ("tcp_ppbw", "TCP (tcp_pingpong ping-pong)")]
LAT_TESTS = [("omx_lat", "omx"), ("tcp_lat", "TCP")]
LAT_COLS = ["latency_us", "p50_us", "p99_us", "max_us"]
# Issue 22's targets.
BW_KEEP_AT_1PCT = 0.5
P99_AT_1PCT_US = 1000.0


def read(d):
    path = os.path.join(d, "loss.csv")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


class Points:
    def __init__(self, rows):
        self.vals = {}
        self.failed = {}
        self.losses = sorted({float(r["loss_pct"]) for r in rows})
        for r in rows:
            key = (float(r["loss_pct"]), r["test"])
            if r["status"] != "ok":
                self.failed[key] = self.failed.get(key, 0) + 1
                continue
            for col in LAT_COLS + ["bandwidth_MBps", "frames_rx", "frames_dropped", "seconds"]:
                v = (r.get(col) or "").strip()
                if v:
                    self.vals.setdefault(key + (col,), []).append(float(v))

    def med(self, loss, test, col):
        v = self.vals.get((loss, test, col))
        return statistics.median(v) if v else None

    def dropped_pct(self, loss, test):
        rx = self.vals.get((loss, test, "frames_rx"))
        dr = self.vals.get((loss, test, "frames_dropped"))
        if not rx or not dr or sum(rx) == 0:
            return None
        return 100.0 * sum(dr) / sum(rx)


def fmt(v, spec=".0f"):
    return "n/a" if v is None else format(v, spec)


def lat(v):
    if v is None:
        return "n/a"
    if v >= 1000:
        return f"{v / 1000:.1f} ms"
    return f"{v:.1f} us"


def loss_name(x):
    return f"{x:g}%"


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    plot = "--no-plot" not in sys.argv
    if len(args) != 1:
        sys.exit(__doc__)
    d = args[0]
    pts = Points(read(d))
    machine = ""
    mpath = os.path.join(d, "machine.txt")
    if os.path.exists(mpath):
        machine = open(mpath).read().strip()

    out = []
    p = out.append
    p(f"# omx and kernel TCP under frame loss: `bench/loss.sh` ({os.path.basename(os.path.normpath(d))})")
    p("")
    p("Two namespace hosts joined by veth, MTU 9000; nftables drops the given share of the")
    p("frames arriving on each host's omx0 (both directions, omx and TCP alike). Throughput:")
    p("4 MiB messages, MB/s = 10^6 B/s (ping-pong: length / half round trip). Latency: 8 B")
    p("ping-pong, half round trip (mean, median, 99th percentile, maximum). `dropped` is the")
    p("share of the frames reaching the hosts during that point that the rules dropped.")
    p("Medians over runs; failed points (timeouts) are marked.")
    p("")
    p("```")
    p(machine)
    p("```")
    p("")
    p("## 4 MiB throughput (MB/s)")
    p("")
    p("| loss | " + " | ".join(name for _, name in BW_TESTS) + " | omx / lossless omx | omx / TCP stream | dropped (omx, TCP stream) |")
    p("|---|" + "---|" * (len(BW_TESTS) + 3))
    base = pts.med(0.0, "omx_bw", "bandwidth_MBps")
    for x in pts.losses:
        cells = []
        for t, _ in BW_TESTS:
            v = pts.med(x, t, "bandwidth_MBps")
            f = pts.failed.get((x, t), 0)
            cells.append(fmt(v) + (f" ({f} failed)" if f else ""))
        o = pts.med(x, "omx_bw", "bandwidth_MBps")
        tcp = pts.med(x, "tcp_bw", "bandwidth_MBps")
        keep = o / base if o is not None and base else None
        vs = o / tcp if o is not None and tcp else None
        drops = f"{fmt(pts.dropped_pct(x, 'omx_bw'), '.2f')}%, {fmt(pts.dropped_pct(x, 'tcp_bw'), '.2f')}%"
        p(f"| {loss_name(x)} | " + " | ".join(cells) + f" | {fmt(keep, '.2f')} | {fmt(vs, '.2f')} | {drops} |")
    p("")
    p("## 8 B ping-pong latency (half round trip)")
    p("")
    p("| loss | " + " | ".join(f"{n} {c}" for _, n in LAT_TESTS for c in ("mean", "median", "p99", "max"))
      + " | dropped (omx, TCP) |")
    p("|---|" + "---|" * (4 * len(LAT_TESTS) + 1))
    for x in pts.losses:
        cells = []
        for t, _ in LAT_TESTS:
            f = pts.failed.get((x, t), 0)
            for c in LAT_COLS:
                cells.append(lat(pts.med(x, t, c)) + (" (failed)" if f and c == "latency_us" else ""))
        drops = f"{fmt(pts.dropped_pct(x, 'omx_lat'), '.2f')}%, {fmt(pts.dropped_pct(x, 'tcp_lat'), '.2f')}%"
        p(f"| {loss_name(x)} | " + " | ".join(cells) + f" | {drops} |")
    p("")
    p("## Issue 22's targets")
    p("")
    p("| target | measured | met |")
    p("|---|---|---|")
    o1 = pts.med(1.0, "omx_bw", "bandwidth_MBps")
    if o1 is not None and base:
        p(f"| 4 MiB at 1% >= {BW_KEEP_AT_1PCT}x lossless | {o1:.0f} / {base:.0f} MB/s = {o1 / base:.2f}x | "
          f"{'yes' if o1 / base >= BW_KEEP_AT_1PCT else 'no'} |")
    else:
        p("| 4 MiB at 1% >= 0.5x lossless | not measured | n/a |")
    for x in pts.losses:
        o = pts.med(x, "omx_bw", "bandwidth_MBps")
        tcp = pts.med(x, "tcp_bw", "bandwidth_MBps")
        if o is None or tcp is None:
            p(f"| 4 MiB >= TCP at {loss_name(x)} | not measured | n/a |")
            continue
        p(f"| 4 MiB >= TCP at {loss_name(x)} | omx {o:.0f}, TCP {tcp:.0f} MB/s ({o / tcp:.2f}x) | {'yes' if o >= tcp else 'no'} |")
    p99 = pts.med(1.0, "omx_lat", "p99_us")
    if p99 is not None:
        p(f"| 8 B p99 <= 1 ms at 1% | {lat(p99)} (TCP {lat(pts.med(1.0, 'tcp_lat', 'p99_us'))}) | "
          f"{'yes' if p99 <= P99_AT_1PCT_US else 'no'} |")
    else:
        p("| 8 B p99 <= 1 ms at 1% | not measured | n/a |")
    p("")
    if plot:
        p("![loss](loss.png)")
        p("")
    text = "\n".join(out)
    with open(os.path.join(d, "summary.md"), "w") as f:
        f.write(text)
    print(text)
    if plot:
        draw(pts, os.path.join(d, "loss.png"))


def draw(pts, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = list(range(len(pts.losses)))
    labels = [loss_name(x) for x in pts.losses]
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 5))
    styles = {"omx_bw": ("#1f77b4", "o-"), "tcp_bw": ("#d62728", "s-"), "tcp_ppbw": ("#d62728", "s--")}
    for t, name in BW_TESTS:
        ys = [pts.med(x, t, "bandwidth_MBps") for x in pts.losses]
        pairs = [(i, y) for i, y in zip(xs, ys) if y is not None]
        if pairs:
            c, s = styles[t]
            a.plot([i for i, _ in pairs], [y for _, y in pairs], s, color=c, label=name)
    a.set_xticks(xs, labels)
    a.set_xlabel("frames dropped on each host's ingress")
    a.set_ylabel("MB/s (log)")
    a.set_yscale("log")
    a.set_title("4 MiB throughput against loss (higher is better)", fontsize=10)
    a.grid(alpha=0.3, which="both")
    a.legend(fontsize=8)
    colors = {"omx_lat": "#1f77b4", "tcp_lat": "#d62728"}
    for t, name in LAT_TESTS:
        for col, style, what in (("p50_us", "o--", "median"), ("p99_us", "o-", "p99")):
            ys = [pts.med(x, t, col) for x in pts.losses]
            pairs = [(i, y) for i, y in zip(xs, ys) if y is not None]
            if pairs:
                b.plot([i for i, _ in pairs], [y for _, y in pairs], style, color=colors[t], label=f"{name} {what}")
    b.axhline(P99_AT_1PCT_US, color="gray", lw=0.8, ls=":", label="1 ms (p99 target at 1%)")
    b.set_xticks(xs, labels)
    b.set_xlabel("frames dropped on each host's ingress")
    b.set_ylabel("us, half round trip (log)")
    b.set_yscale("log")
    b.set_title("8 B ping-pong latency against loss (lower is better)", fontsize=10)
    b.grid(alpha=0.3, which="both")
    b.legend(fontsize=8)
    fig.suptitle("omx and kernel TCP under injected frame loss, veth, MTU 9000 (medians of runs)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
