"""reopen.py MOUNT WANT: keeps files open on an omxfs mount across a server restart
(tests/fs/run.sh reopen-after-restart). Prints "open" once its files are open and
written, waits for "go" on its standard input (the server was restarted, and one of its
files deleted, meanwhile), then reads and writes on through the same descriptors,
writes what the kept file must now hold to WANT, and prints "ok"."""
import errno
import os
import sys

mount, want_path = sys.argv[1], sys.argv[2]
kept = os.open(f"{mount}/kept", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
gone = os.open(f"{mount}/gone", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
first = bytes(range(256)) * 400  # large: its own data message
os.pwrite(kept, first, 0)
os.pwrite(gone, b"x", 0)
print("open", flush=True)
if sys.stdin.readline() != "go\n":
    sys.exit("no go")


def read_back(n):
    # Drop the pages cached here so that the read reaches the server.
    os.posix_fadvise(kept, 0, 0, os.POSIX_FADV_DONTNEED)
    return os.pread(kept, n + 10, 0)


if read_back(len(first)) != first:
    sys.exit("read after the restart differs")
second = b"after the restart " * 2500  # large again
os.pwrite(kept, second, 1000)
os.pwrite(kept, b"small", 0)
want = bytearray(first)
want[1000 : 1000 + len(second)] = second
want[0:5] = b"small"
if read_back(len(want)) != want:
    sys.exit("read after the writes differs")
os.fsync(kept)
# A write is answered before the server (a write behind): its error comes with the
# write or the fsync after it, as on NFS.
try:
    os.pwrite(gone, b"y", 0)
    os.fsync(gone)
    sys.exit("a write to a file deleted meanwhile succeeded")
except OSError as e:
    if e.errno != errno.ESTALE:
        sys.exit(f"a file deleted meanwhile: {e} (ESTALE expected)")
os.close(kept)
os.close(gone)
with open(want_path, "wb") as f:
    f.write(want)
print("ok")
