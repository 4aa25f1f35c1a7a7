#!/usr/bin/env python3
"""Several processes creating, renaming and unlinking in one directory at once, through
one mount (so the client and the server serve their changes concurrently).

    onedir.py DIR EXPORT_DIR SEED STEPS WORKERS

DIR, on the mount, is made here (the client then knows it complete and answers
lookups of absent names itself, renewing that knowledge by the stamps each change
brings back). Worker i owns the names p{i}-*: it creates (with contents), renames
(over one of its own names or to a new one), links and unlinks them, and after every
step checks a few of its names through the mount against what it expects. At the end
the directory, listed and looked up through the mount and read on the server
(EXPORT_DIR), must hold exactly the union of what the workers expect.
"""
import multiprocessing
import os
import random
import sys

NAMES = 12  # names per worker


def worker(d, seed, steps, i, out):
    rng = random.Random(seed)
    names = [f"p{i}-{j}" for j in range(NAMES)]
    have = {}  # name -> contents
    linked = set()  # names made by or linked to by a link (never rewritten)
    for step in range(steps):
        op = rng.choice(["create", "create", "rename", "unlink", "link", "overwrite"])
        a, b = rng.choice(names), rng.choice(names)
        pa, pb = os.path.join(d, a), os.path.join(d, b)
        if op == "create" and a not in have:
            data = rng.randbytes(rng.randrange(0, 3000))
            with open(pa, "xb") as f:
                f.write(data)
            have[a] = data
        elif op == "overwrite" and a in have and a not in linked:
            # Not a file with several links: the client's node of each name keeps its
            # own attributes (docs/FILES.md: node ids are per path), as sshfs's do.
            data = rng.randbytes(rng.randrange(0, 3000))
            with open(pa, "wb") as f:
                f.write(data)
            have[a] = data
        elif op == "rename" and a in have and a != b:
            if a in linked and b in linked:
                continue  # perhaps links of one file: rename(2) would leave both
            os.rename(pa, pb)
            have[b] = have.pop(a)
            linked.discard(b)
            if a in linked:
                linked.discard(a)
                linked.add(b)
        elif op == "unlink" and a in have:
            os.unlink(pa)
            del have[a]
            linked.discard(a)
        elif op == "link" and a in have and b not in have:
            os.link(pa, pb)
            have[b] = have[a]
            linked.update((a, b))
        for n in rng.sample(names, 3) + [a, b]:
            p = os.path.join(d, n)
            if n in have:
                with open(p, "rb") as f:
                    got = f.read()
                if got != have[n]:
                    raise SystemExit(f"worker {i} step {step} ({op} {a} {b}): {n} has {len(got)} bytes, expected {len(have[n])}")
            elif os.path.lexists(p):
                raise SystemExit(f"worker {i} step {step} ({op} {a} {b}): {n} exists, expected absent")
    out.put((i, {n: v for n, v in have.items()}))


def main():
    d, export, seed, steps, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    os.mkdir(d)
    out = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=worker, args=(d, seed + i, steps, i, out)) for i in range(workers)]
    for p in procs:
        p.start()
    expected = {}
    for _ in procs:
        expected.update(out.get()[1])
    for p in procs:
        p.join()
        if p.exitcode != 0:
            sys.exit(f"a worker failed ({p.exitcode})")
    listed = set(os.listdir(d))
    on_server = set(os.listdir(export))
    if listed != set(expected) or on_server != set(expected):
        sys.exit(f"names differ: mount-only {sorted(listed - set(expected))}, missing on mount "
                 f"{sorted(set(expected) - listed)}, server {sorted(on_server ^ set(expected))}")
    for n, data in expected.items():
        for root in (d, export):
            with open(os.path.join(root, n), "rb") as f:
                if f.read() != data:
                    sys.exit(f"{root}/{n}: contents differ")
    # Absent names of every worker, looked up through the mount (the client may
    # answer these itself: it must not have missed another worker's change).
    for i in range(workers):
        for j in range(NAMES):
            n = f"p{i}-{j}"
            if os.path.lexists(os.path.join(d, n)) != (n in expected):
                sys.exit(f"{n}: lookup through the mount disagrees with the end state")
    print(f"onedir: {workers} workers, {steps} steps each, {len(expected)} names at the end: same on the mount and the server")


if __name__ == "__main__":
    main()
