#!/usr/bin/env python3
"""Seeded random file operations applied to two trees (the mount and a local reference);
after every step both trees must hold the same names, types, sizes, modes and bytes.

    exercise.py MOUNT_DIR REFERENCE_DIR SEED STEPS [WORKERS]

With WORKERS > 1, that many processes run at once (seeds SEED, SEED+1, ...): each on
its own subdirectory (w0, w1, ...), compared after each of its steps, and all on one
shared file, each writing only its own stripe of it (compared after each write). At the
end the whole trees are compared.
"""
import mmap
import multiprocessing
import os
import random
import sys

STRIPE = 64 * 1024  # each worker's share of the shared file (page-aligned)
SHARED = "shared"


def snapshot(root):
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            data = None
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    data = f.read()
            out[rel] = (st.st_mode, st.st_size if data is not None else 0, data)
    return out


def differ(a, b):
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def apply(rng, roots, names):
    """One random operation on every root; returns its description."""
    op = rng.choice(["write", "write", "truncate", "rename", "unlink", "hole", "mmap", "chmod", "big"])
    name, other = rng.choice(names), rng.choice(names)
    off, ln = rng.randrange(0, 70000), rng.randrange(1, 40000)
    data = rng.randbytes(ln)
    size = rng.randrange(0, 100000)
    mode = rng.choice([0o600, 0o644, 0o640])
    for root in roots:
        p, q = os.path.join(root, name), os.path.join(root, other)
        if op in ("write", "hole", "big"):
            o = off + (1 << 20 if op == "hole" else 0)
            d = data * (40 if op == "big" else 1)
            fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
            os.pwrite(fd, d, o)
            os.close(fd)
        elif op == "truncate" and os.path.exists(p):
            os.truncate(p, size)
        elif op == "rename" and os.path.exists(p):
            os.rename(p, q)
        elif op == "unlink" and os.path.exists(p):
            os.unlink(p)
        elif op == "chmod" and os.path.exists(p):
            os.chmod(p, mode)
        elif op == "mmap" and os.path.exists(p) and os.path.getsize(p) > 0:
            with open(p, "r+b") as f:
                m = mmap.mmap(f.fileno(), 0)
                at = off % len(m)
                chunk = data[: len(m) - at]
                m[at : at + len(chunk)] = chunk
                m.flush()
                m.close()
    return f"{op} {name} {other}"


def shared_write(rng, tops, worker):
    """A write inside this worker's stripe of the shared file, then the stripe compared."""
    at = rng.randrange(0, STRIPE - 1)
    data = rng.randbytes(rng.randrange(1, STRIPE - at + 1))
    stripes = []
    for top in tops:
        fd = os.open(os.path.join(top, SHARED), os.O_RDWR)
        os.pwrite(fd, data, worker * STRIPE + at)
        stripes.append(os.pread(fd, STRIPE, worker * STRIPE))
        os.close(fd)
    return stripes[0] == stripes[1]


def run(mnt, ref, seed, steps, worker=None):
    rng = random.Random(seed)
    names = ["a", "b", "c", "d/e", "d/f"]
    sub = "" if worker is None else f"w{worker}"
    roots = [os.path.join(top, sub) for top in (mnt, ref)]
    for root in roots:
        os.makedirs(os.path.join(root, "d"), exist_ok=True)
    for step in range(steps):
        try:
            what = apply(rng, roots, names)
            if worker is not None and rng.random() < 0.3 and not shared_write(rng, (mnt, ref), worker):
                print(f"worker {worker} step {step}: shared stripe differs", file=sys.stderr)
                return 1
        except OSError as e:
            print(f"worker {worker} step {step}: {e}", file=sys.stderr)
            return 1
        diff = differ(snapshot(roots[0]), snapshot(roots[1]))
        if diff:
            print(f"worker {worker} step {step} ({what}): trees differ at {diff}", file=sys.stderr)
            return 1
    return 0


def main():
    mnt, ref, seed, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    workers = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    if workers == 1:
        status = run(mnt, ref, seed, steps)
    else:
        for top in (mnt, ref):
            os.makedirs(top, exist_ok=True)
            with open(os.path.join(top, SHARED), "wb") as f:
                f.truncate(workers * STRIPE)
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(workers) as pool:
            codes = pool.starmap(run, [(mnt, ref, seed + i, steps, i) for i in range(workers)])
        status = max(codes)
        diff = differ(snapshot(mnt), snapshot(ref))
        if status == 0 and diff:
            print(f"after all workers: trees differ at {diff}", file=sys.stderr)
            status = 1
    if status == 0:
        print(f"{steps} steps x {workers} workers agree (seed {seed})")
    return status


if __name__ == "__main__":
    sys.exit(main())
