"""copies.py - an unmodified program whose large copies go through memcpy: bytes,
bytearray and memoryview copies and slices, and NumPy array copies when NumPy is
installed. Prints one digest per step; tests/memcpy/run.sh compares them with and
without libomx_memcpy.so."""
import hashlib
import random
import sys

rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
src = rng.randbytes(24 << 20)


def show(name, data):
    print(name, hashlib.sha256(data).hexdigest())


for step in range(6):
    ba = bytearray(src)
    ba[rng.randrange(len(ba))] ^= 0xFF  # a write while the copy may be in flight
    cut = rng.randrange(1 << 20, 8 << 20)
    b = bytes(ba[cut:])
    joined = b"".join([b[: 3 << 20], src[: 2 << 20], bytes(ba[: 5 << 20])])
    mv = memoryview(ba)[cut // 2 :]
    show(f"{step} slice", b)
    show(f"{step} join", joined)
    show(f"{step} view", bytes(mv))
    del ba, mv  # freed while copies from it may be in flight

try:
    import numpy as np
except ImportError:
    np = None
if np is not None:
    a = np.frombuffer(src, dtype=np.uint8).reshape(-1, 4096)
    c = a.copy()
    c[::7] += 1
    d = np.concatenate([c, a[:1000]])
    show("numpy copy", c.tobytes())
    show("numpy concatenate", d.tobytes())
