#!/usr/bin/env python3
"""Seeded random file operations applied to two trees (the mount and a local reference);
after every step both trees must hold the same names, types, sizes, modes and bytes.

    exercise.py MOUNT_DIR REFERENCE_DIR SEED STEPS
"""
import mmap
import os
import random
import sys


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


def main():
    mnt, ref, seed, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    names = ["a", "b", "c", "d/e", "d/f"]
    for root in (mnt, ref):
        os.makedirs(os.path.join(root, "d"), exist_ok=True)
    for step in range(steps):
        op = rng.choice(["write", "write", "truncate", "rename", "unlink", "hole", "mmap", "chmod", "big"])
        name, other = rng.choice(names), rng.choice(names)
        off, ln = rng.randrange(0, 70000), rng.randrange(1, 40000)
        data = rng.randbytes(ln)
        size = rng.randrange(0, 100000)
        mode = rng.choice([0o600, 0o644, 0o640])
        for root in (mnt, ref):
            p, q = os.path.join(root, name), os.path.join(root, other)
            try:
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
            except OSError as e:
                print(f"step {step} {op} {name}: {e}", file=sys.stderr)
                return 1
        a, b = snapshot(mnt), snapshot(ref)
        if a != b:
            diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            print(f"step {step} ({op} {name} {other}): trees differ at {diff}", file=sys.stderr)
            return 1
    print(f"{steps} steps agree (seed {seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
