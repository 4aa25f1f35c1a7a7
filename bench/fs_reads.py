#!/usr/bin/env python3
"""FUSE READs of a mount as the kernel sends them: how many, how large, how many in
flight, how long each takes from send to end. Reads `perf script` output of the
`fuse:fuse_request_send` and `fuse:fuse_request_end` tracepoints on stdin, e.g.

    perf record -e fuse:fuse_request_send -e fuse:fuse_request_end -a -o t.data -- \\
        dd if=MOUNT/FILE of=/dev/null bs=1M
    perf script -i t.data | bench/fs_reads.py

Only READ requests count (the open, flush and release around them are left out)."""
import re
import sys

LINE = re.compile(r"\s(\d+\.\d+):\s+fuse:fuse_request_(send|end): connection \d+ req (\d+)(.*)")


def main():
    sent, lat, sizes, at_send = {}, [], [], {}
    first = last = None
    in_flight = 0
    for line in sys.stdin:
        m = LINE.search(line)
        if not m:
            continue
        t, kind, req, rest = float(m.group(1)), m.group(2), m.group(3), m.group(4)
        if kind == "send":
            if "FUSE_READ" not in rest:
                continue
            first = t if first is None else first
            sent[req] = t
            in_flight += 1
            at_send[in_flight] = at_send.get(in_flight, 0) + 1
        elif req in sent:
            lat.append((t - sent.pop(req)) * 1e3)
            n = re.search(r"len (\d+)", rest)
            # The reply's length: a 16-byte header, then the data.
            sizes.append(int(n.group(1)) - 16 if n else 0)
            in_flight -= 1
            last = t
    if not lat:
        sys.exit("fs_reads.py: no FUSE_READ in the input")
    lat.sort()
    n = len(lat)
    span = last - first
    pct = ", ".join(f"p{int(q * 100)} {lat[min(n - 1, int(n * q))]:.2f}" for q in (0.1, 0.5, 0.9, 0.99))
    print(f"reads: {n}, {sum(sizes) / n / 1024:.0f} KiB on average, {sum(sizes) / 1e6 / span:.0f} MB/s over {span:.3f} s")
    print(f"send to end, ms: {pct}, max {lat[-1]:.2f}")
    print("in flight when one is sent (count of sends): " + ", ".join(f"{k}: {v}" for k, v in sorted(at_send.items())))


main()
