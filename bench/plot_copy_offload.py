#!/usr/bin/env python3
"""Plots and summary.md of a bench/copy_offload.sh result folder.

Usage: bench/plot_copy_offload.py DIR

Reads DIR/stream.csv and DIR/overlap.csv (omx_stream --csv lines with rep and
background_pct in front) and writes:
- cpu_breakdown.png: the Figure 11 shape: stacked bars of the receiving process's CPU
  (% of one CPU) per thread role and message size, offload off and on side by side,
  with the whole machine's busy CPU as a marker;
- throughput.png: stream throughput against message size, offload off and on;
- overlap.png: time per 16 MiB message, transfer alone, compute alone and both;
- overlap_sweep.png: overlap ratio and progress-thread CPU against computation time;
- summary.md: the tables (medians over the runs, min-max in brackets).
"""
import csv
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MODES = (("0", "offload off"), ("1", "offload on"))
ROLES = (  # (label, function of a row, color)
    ("app, in library", lambda r: r["app_lib_pct"], "#4c72b0"),
    ("app, outside library", lambda r: max(0.0, r["app_pct"] - r["app_lib_pct"]), "#a6bddb"),
    ("progress thread", lambda r: r["progress_pct"], "#dd8452"),
    ("copy thread", lambda r: r["copy_pct"], "#55a868"),
    ("other threads", lambda r: r["other_pct"], "#8c8c8c"),
)
NUM = (
    "background_pct elsewhere_pct size count window ncpus elapsed_s MBps app_pct app_lib_pct progress_pct "
    "copy_pct other_pct free_pct app_sys_pct progress_sys_pct copy_sys_pct machine_busy_pct "
    "machine_softirq_pct app_csw progress_csw copy_csw pull_rerequests resends compute_ms compute_wall_ms transfer_alone_ms total_ms overlap_ratio"
).split()


def load(path):
    if not os.path.exists(path):
        return []
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            for k in NUM:
                v = (r.get(k) or "").strip()
                r[k] = float(v) if v else None
            r["cpu_total"] = sum(fn(r) for _, fn, _ in ROLES)
            rows.append(r)
    # CPU of the machine used by neither process of the run: other processes, kernel
    # threads (ksoftirqd), time charged to nobody.
    send = {(r["rep"], r["size"], r["offload"], r["pass"]): r for r in rows if r["side"] == "send"}
    for r in rows:
        s = send.get((r["rep"], r["size"], r["offload"], r["pass"]))
        r["elsewhere"] = (
            r["machine_busy_pct"] - r["cpu_total"] - s["cpu_total"]
            if r["side"] == "recv" and s is not None
            else None
        )
    return rows


def pick(rows, **kw):
    return [r for r in rows if all(str(r[k]) == str(v) for k, v in kw.items())]


def med(rows, key):
    v = [key(r) if callable(key) else r[key] for r in rows]
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def spread(rows, key):
    v = [r[key] for r in rows if r[key] is not None]
    if not v:
        return "-"
    m = statistics.median(v)
    if len(v) == 1:
        return f"{m:.0f}"
    return f"{m:.0f} [{min(v):.0f}-{max(v):.0f}]"


def human_size(n):
    n = int(n)
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def f1(x):
    return "-" if x is None else f"{x:.1f}"


def stream_tables(rows, out):
    sizes = sorted({int(r["size"]) for r in rows})
    recv = [r for r in rows if r["side"] == "recv"]
    send = [r for r in rows if r["side"] == "send"]
    out.append("## Stream throughput (MB/s, 10^6 B/s)\n")
    out.append("| size | offload off | offload on | on/off |")
    out.append("|---|---|---|---|")
    for s in sizes:
        a, b = pick(recv, size=float(s), offload="0"), pick(recv, size=float(s), offload="1")
        ma, mb = med(a, "MBps"), med(b, "MBps")
        ratio = f"{mb / ma:.2f}" if ma and mb else "-"
        out.append(f"| {human_size(s)} | {spread(a, 'MBps')} | {spread(b, 'MBps')} | {ratio} |")
    out.append("")
    out.append("## Receiver CPU per thread role (Figure 11 shape)\n")
    out.append(
        "% of one CPU over the stream (100% = one CPU busy; the machine has "
        f"{int(rows[0]['ncpus'])}). free = 100 - (progress + copy + app in library). "
        "CPU/MB = receiver CPU time per MB received. machine = every CPU of the machine "
        "(sender, kernel packet processing, anything else running); elsewhere = machine "
        "minus receiver minus sender (kernel threads, other processes). On veth the "
        "kernel's receive path (copy into the packet ring) runs in the sender's context. "
        "Medians over the runs.\n"
    )
    out.append(
        "| size | offload | app in lib | app outside | progress | copy | other | total | free "
        "| CPU us/MB | sender total | machine busy | elsewhere | softirq |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in sizes:
        for m, label in MODES:
            rr = pick(recv, size=float(s), offload=m)
            ss = pick(send, size=float(s), offload=m)
            if not rr:
                continue
            cells = [f1(med(rr, fn)) for _, fn, _ in ROLES]
            tot = med(rr, "cpu_total")
            per_mb = med(rr, lambda r: r["cpu_total"] / 100 / r["MBps"] * 1e6 if r["MBps"] else None)
            out.append(
                f"| {human_size(s)} | {label} | " + " | ".join(cells)
                + f" | {f1(tot)} | {f1(med(rr, 'free_pct'))} | {f1(per_mb)} "
                f"| {f1(med(ss, 'cpu_total'))} | {f1(med(rr, 'machine_busy_pct'))} "
                f"| {f1(med(rr, 'elsewhere'))} | {f1(med(rr, 'machine_softirq_pct'))} |"
            )
    out.append("")
    out.append("## Receiver context switches per message (sleeps and wake-ups)\n")
    out.append("| size | offload | app | progress | copy |")
    out.append("|---|---|---|---|---|")
    for s in sizes:
        for m, label in MODES:
            rr = pick(recv, size=float(s), offload=m)
            if not rr:
                continue
            cells = [
                f"{med(rr, lambda r, k=k: r[k] / r['count']):.2f}"
                for k in ("app_csw", "progress_csw", "copy_csw")
            ]
            out.append(f"| {human_size(s)} | {label} | " + " | ".join(cells) + " |")
    out.append("")


def overlap_table(rows, out):
    recv = [r for r in rows if r["side"] == "recv"]
    if not recv:
        return
    out.append("## Overlap (16 MiB, one receive at a time)\n")
    out.append(
        "Per message: transfer alone = post + wait with no computation (pass `base`); "
        "compute = the fixed work alone; total = post, compute, wait. "
        "overlap = (compute + transfer alone - total) / min(compute, transfer alone): "
        "1 = fully hidden, 0 = none. CPU % of one CPU during the overlap pass.\n"
    )
    out.append(
        "| offload | transfer alone ms | compute ms | compute during pass ms | total ms "
        "| overlap | app % | progress % | copy % | free % | runs |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for m, label in MODES:
        o = pick(recv, offload=m, **{"pass": "overlap"})
        if not o:
            continue
        vals = [med(o, k) for k in ("transfer_alone_ms", "compute_ms", "compute_wall_ms", "total_ms")]
        ratios = sorted(r["overlap_ratio"] for r in o if r["overlap_ratio"] is not None)
        rs = f"{statistics.median(ratios):.2f}"
        if len(ratios) > 1:
            rs += f" [{ratios[0]:.2f}-{ratios[-1]:.2f}]"
        out.append(
            f"| {label} | " + " | ".join(f"{v:.2f}" if v is not None else "-" for v in vals)
            + f" | {rs} | {f1(med(o, 'app_pct'))} | {f1(med(o, 'progress_pct'))} "
            f"| {f1(med(o, 'copy_pct'))} | {f1(med(o, 'free_pct'))} | {len(o)} |"
        )
    out.append("")


def sweep_table(rows, out):
    recv = [r for r in rows if r["side"] == "recv" and r["pass"] == "overlap"]
    if not recv:
        return
    out.append("## Overlap against computation time (16 MiB, one run each)\n")
    out.append(
        "| compute ms | offload | transfer alone ms | total ms | overlap | app % | progress % "
        "| copy % |"
    )
    out.append("|---|---|---|---|---|---|---|---|")
    for r in sorted(recv, key=lambda r: (r["compute_ms"], r["offload"])):
        out.append(
            f"| {r['compute_ms']:.2f} | {dict(MODES)[r['offload']]} | {r['transfer_alone_ms']:.2f} "
            f"| {r['total_ms']:.2f} | {r['overlap_ratio']:.2f} | {f1(r['app_pct'])} "
            f"| {f1(r['progress_pct'])} | {f1(r['copy_pct'])} |"
        )
    out.append("")


def plot_sweep(rows, folder):
    recv = [r for r in rows if r["side"] == "recv" and r["pass"] == "overlap"]
    if not recv:
        return
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for m, label in MODES:
        o = sorted(pick(recv, offload=m), key=lambda r: r["compute_ms"])
        if not o:
            continue
        xs = [r["compute_ms"] for r in o]
        a1.plot(xs, [r["overlap_ratio"] for r in o], marker="o", label=label)
        a2.plot(xs, [r["progress_pct"] for r in o], marker="o", label=f"progress thread, {label}")
        if m == "1":
            a2.plot(xs, [r["copy_pct"] for r in o], marker="s", ls="--", label="copy thread, offload on")
    for a in (a1, a2):
        a.set_xscale("log", base=2)
        a.set_xlabel("computation per message, ms (alone)")
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    a1.axhline(0, color="gray", lw=0.8)
    a1.set_ylabel("overlap ratio")
    a1.set_title("Overlap of a 16 MiB receive")
    a2.set_ylabel("% of one CPU during the overlap pass")
    a2.set_title("Background progress")
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "overlap_sweep.png"), dpi=120)
    plt.close(fig)


def loss_note(rows, out, what):
    hit = [r for r in rows if (r.get("pull_rerequests") or 0) + (r.get("resends") or 0) > 0]
    if not hit:
        out.append(f"No {what} run needed loss recovery (pull re-requests or resends).\n")
        return
    out.append(f"{what.capitalize()} runs that recovered lost frames (ring overruns; recovered within the run by fast re-requests and round-trip-based timeouts, see the MB/s):\n")
    for r in hit:
        out.append(
            f"- rep {r['rep']}, {r['side']} {r['pass']}, {human_size(r['size'])}, offload "
            f"{r['offload']}: {int(r['pull_rerequests'])} pull re-requests, "
            f"{int(r['resends'])} resends, {r['MBps']:.0f} MB/s"
        )
    out.append("")


def background_note(rows, out, what):
    recv = [r for r in rows if r["side"] == "recv"]
    bg = [r["background_pct"] for r in recv if r["background_pct"] is not None]
    if bg:
        noisy = sum(1 for b in bg if b > 25)
        out.append(
            f"Background load before the {what} runs (other processes, % of one CPU): "
            f"median {statistics.median(bg):.0f}, max {max(bg):.0f}; {noisy} of {len(bg)} runs "
            "started above 25%."
        )
    ew = [r["elsewhere_pct"] for r in recv if r.get("elsewhere_pct") is not None]
    if ew:
        again = sum(1 for r in recv if (r.get("attempt") or "1") != "1")
        out.append(
            f"CPU used outside both processes during the runs (% of one CPU): median "
            f"{statistics.median(ew):.0f}, max {max(ew):.0f}; {again} run(s) kept from a "
            "second or third attempt (the earlier ones were disturbed)."
        )
    out.append("")


def plot_cpu(rows, folder):
    recv = [r for r in rows if r["side"] == "recv"]
    sizes = sorted({int(r["size"]) for r in recv})
    if not sizes:
        return
    fig, ax = plt.subplots(figsize=(10, 6))
    width = 0.38
    for i, s in enumerate(sizes):
        for j, (m, label) in enumerate(MODES):
            rr = pick(recv, size=float(s), offload=m)
            if not rr:
                continue
            x = i + (j - 0.5) * (width + 0.02)
            bottom = 0.0
            for k, (name, fn, color) in enumerate(ROLES):
                v = med(rr, fn) or 0.0
                ax.bar(x, v, width, bottom=bottom, color=color,
                       hatch="//" if m == "1" else None, edgecolor="white",
                       label=name if i == 0 and j == 0 else None)
                bottom += v
            ax.text(x, bottom + 2, f"{med(rr, 'MBps'):.0f}\nMB/s", ha="center", va="bottom",
                    fontsize=7)
            busy = med(rr, "machine_busy_pct")
            ax.plot([x], [busy], marker="_", markersize=22, color="black", mew=2,
                    label="machine busy (all CPUs)" if i == 0 and j == 0 else None)
            ax.text(x, -4, "off" if m == "0" else "on", ha="center", va="top", fontsize=8)
    ax.set_xticks(range(len(sizes)))
    ax.set_xticklabels([human_size(s) for s in sizes])
    ax.tick_params(axis="x", pad=14)
    ax.axhline(100, color="gray", lw=0.8, ls=":")
    ncpus = int(recv[0]["ncpus"])
    ax.axhline(100 * ncpus, color="gray", lw=0.8, ls="--")
    ax.set_ylabel("CPU, % of one CPU (receiver process by role)")
    ax.set_xlabel("message size (left bar: offload off, right, hatched: offload on)")
    ax.set_title(f"CPU usage while receiving a stream of messages ({ncpus} CPUs, veth)")
    ax.set_ylim(-12, max(100 * ncpus + 10, ax.get_ylim()[1]))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "cpu_breakdown.png"), dpi=120)
    plt.close(fig)


def plot_throughput(rows, folder):
    recv = [r for r in rows if r["side"] == "recv"]
    if not recv:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for m, label in MODES:
        sizes = sorted({int(r["size"]) for r in pick(recv, offload=m)})
        ys, lo, hi = [], [], []
        for s in sizes:
            v = [r["MBps"] for r in pick(recv, size=float(s), offload=m)]
            md = statistics.median(v)
            ys.append(md)
            lo.append(md - min(v))
            hi.append(max(v) - md)
        ax.errorbar(sizes, ys, yerr=[lo, hi], marker="o", capsize=3, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({int(r["size"]) for r in recv}))
    ax.set_xticklabels([human_size(s) for s in sorted({int(r["size"]) for r in recv})])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("message size")
    ax.set_ylabel("throughput, MB/s (median, min-max)")
    ax.set_title("One-way stream throughput")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "throughput.png"), dpi=120)
    plt.close(fig)


def plot_overlap(rows, folder):
    recv = [r for r in rows if r["side"] == "recv" and r["pass"] == "overlap"]
    if not recv:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels = ("transfer alone", "compute alone", "compute + transfer", "measured total")
    for j, (m, label) in enumerate(MODES):
        o = pick(recv, offload=m)
        if not o:
            continue
        t, c, tot = med(o, "transfer_alone_ms"), med(o, "compute_ms"), med(o, "total_ms")
        vals = (t, c, t + c, tot)
        xs = [k + (j - 0.5) * 0.4 for k in range(4)]
        ax.bar(xs, vals, 0.38, label=f"{label} (overlap {med(o, 'overlap_ratio'):.2f})",
               hatch="//" if m == "1" else None)
    ax.set_xticks(range(4))
    ax.set_xticklabels(labels)
    ax.set_ylabel("ms per 16 MiB message")
    ax.set_title("Computation/communication overlap")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "overlap.png"), dpi=120)
    plt.close(fig)


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "."
    stream = load(os.path.join(folder, "stream.csv"))
    overlap = load(os.path.join(folder, "overlap.csv"))
    out = ["# Receive-copy offload benchmark\n"]
    mt = os.path.join(folder, "machine.txt")
    if os.path.exists(mt):
        out.append("```")
        out.append(open(mt).read().rstrip())
        out.append("```\n")
    if stream:
        stream_tables(stream, out)
        background_note(stream, out, "stream")
        loss_note(stream, out, "stream")
        plot_cpu(stream, folder)
        plot_throughput(stream, folder)
    if overlap:
        overlap_table(overlap, out)
        background_note(overlap, out, "overlap")
        loss_note(overlap, out, "overlap")
        plot_overlap(overlap, folder)
    sweep = load(os.path.join(folder, "overlap_sweep.csv"))
    if sweep:
        sweep_table(sweep, out)
        background_note(sweep, out, "sweep")
        loss_note(sweep, out, "sweep")
        plot_sweep(sweep, folder)
    out.append("Plots: cpu_breakdown.png, throughput.png, overlap.png, overlap_sweep.png.")
    with open(os.path.join(folder, "summary.md"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
