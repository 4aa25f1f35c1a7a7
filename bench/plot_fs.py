#!/usr/bin/env python3
"""Plot of one bench/fs.sh result (its CSV: fs,test,value,unit): omxfs, sshfs and the
local file system side by side, one panel per kind of figure (sequential MB/s, small-file
operations per second, 4 KiB random-read IOPS, CPU seconds per GiB), each bar labelled
with its value and omxfs's ratio to sshfs above the omxfs bar.
Usage: bench/plot_fs.py CSV [PNG]   (PNG defaults to the CSV's name with .png)"""
import csv
import os
import sys

FSES = [("local", "local", "#999999"), ("omxfs", "omxfs", "#1f77b4"), ("sshfs", "sshfs", "#ff7f0e")]
PANELS = [
    ("Sequential, 1 MiB requests (MB/s)", ["seq_write", "seq_read_cold", "seq_read_reread", "seq_read_warm"]),
    ("Small files (operations/s)", ["untar", "stat_all", "create_delete"]),
    ("4 KiB random reads, O_DIRECT (IOPS)", ["randread_qd1_iops", "randread_qd16_iops"]),
    ("CPU per GiB moved (s, lower is better)", [
        "seq_write_cpu_client", "seq_write_cpu_server", "seq_read_cold_cpu_client",
        "seq_read_cold_cpu_server", "seq_read_warm_cpu_client", "seq_read_warm_cpu_server"]),
]


def read(path):
    vals = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            try:
                vals[(r["fs"], r["test"])] = float(r["value"])
            except ValueError:
                pass
    return vals


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    src = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.splitext(src)[0] + ".png"
    vals = read(src)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(14, 9))
    for ax, (title, tests) in zip(axes.flat, PANELS):
        width = 0.8 / len(FSES)
        for i, (fs, label, color) in enumerate(FSES):
            xs = [t + (i - 1) * width for t in range(len(tests))]
            ys = [vals.get((fs, t), 0.0) for t in tests]
            if not any(ys):
                continue
            bars = ax.bar(xs, ys, width, label=label, color=color)
            for b, y in zip(bars, ys):
                if y:
                    ax.annotate(f"{y:.0f}" if y >= 100 else f"{y:.2g}", (b.get_x() + b.get_width() / 2, y), ha="center",
                                va="bottom", fontsize=7)
        for t, test in enumerate(tests):
            o, s = vals.get(("omxfs", test)), vals.get(("sshfs", test))
            if o and s:
                top = max(vals.get((f, test), 0.0) for f, _, _ in FSES)
                ax.annotate(f"{o / s:.2f}x sshfs", (t, top * 1.08), ha="center", fontsize=8,
                            color="#1f77b4")
        ax.set_xticks(range(len(tests)))
        ax.set_xticklabels([t.replace("_cpu", "\ncpu").replace("randread_", "") for t in tests],
                           fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.15)
        ax.legend(fontsize=8)
    # bench/fs.sh runs omx_perf before the file systems and again after them.
    perf = [vals[k] for k in (("omx_perf", "pingpong_1MiB"), ("omx_perf", "pingpong_1MiB_after")) if vals.get(k)]
    note = f" (omx_perf 1 MiB ping-pong: {' / '.join(f'{p:.0f}' for p in perf)} MB/s)" if perf else ""
    fig.suptitle(f"Files over omx: omxfs against sshfs and the local file system{note}")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
