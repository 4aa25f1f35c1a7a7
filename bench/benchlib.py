"""Shared helpers of the bench scripts: load a result folder's CSVs and take medians."""
import csv
import glob
import os
import statistics

METRICS = ("latency_us", "bandwidth_MBps", "msgs_per_s")
HIGHER_IS_BETTER = {"latency_us": False, "bandwidth_MBps": True, "msgs_per_s": True}


def load(folder):
    """{(test, tool, transport, size, metric): [values over runs]} of every CSV in folder."""
    data = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.csv"))):
        test = os.path.splitext(os.path.basename(path))[0]
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                for m in METRICS:
                    v = (r.get(m) or "").strip()
                    if not v:
                        continue
                    try:
                        x = float(v)
                    except ValueError:
                        continue
                    key = (test, r["tool"], r["transport"], int(r["size"]), m)
                    data.setdefault(key, []).append(x)
    return data


def medians(folder):
    return {k: statistics.median(v) for k, v in load(folder).items()}


def series(med, test, metric):
    """Sorted [(size, median)] of one test and metric."""
    return sorted((k[3], v) for k, v in med.items() if k[0] == test and k[4] == metric)


def value(med, test, size, metric):
    for k, v in med.items():
        if k[0] == test and k[3] == size and k[4] == metric:
            return v
    return None


def human_size(n):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"
