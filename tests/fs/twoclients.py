#!/usr/bin/env python3
"""twoclients.py A B: the same directory seen through two clients (two mounts of one
export; tests/fs/run.sh passes the second through /proc/PID/root of the other omxfs's
mount namespace) or, for the reference transcript, the same local directory twice.
Creates A/tc (which must not exist) and prints a transcript of what each client sees:
close-to-open, renames and unlinks on one client seen on the other, files deleted on one
while open on the other. A name's staleness within entry_timeout is allowed
(docs/FILES.md, "Consistency"): such checks wait, up to 20 s, for the expected answer
and note whether it came.

    twoclients.py A B
"""
import errno
import os
import sys
import time

from transcript import call, note, out


def put(path, data, flags=os.O_CREAT | os.O_WRONLY | os.O_TRUNC):
    fd = os.open(path, flags, 0o644)
    os.write(fd, data)
    os.close(fd)


def get(path):
    with open(path, "rb") as f:
        return f.read()


def eventually(label, f, want):
    """Waits (up to 20 s) for f() to answer want (an errno name or a value)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            r = f()
        except OSError as e:
            r = errno.errorcode.get(e.errno, e.errno)
        if r == want or time.monotonic() > deadline:
            note(label, "eventually ->", r)
            return
        time.sleep(0.05)


def main():
    a = f"{sys.argv[1]}/tc"
    b = f"{sys.argv[2]}/tc"
    os.mkdir(a)
    # close-to-open: each open on B sees what A closed before it
    put(f"{a}/f", b"version one")
    call("B reads", get, f"{b}/f")
    rb = os.open(f"{b}/f", os.O_RDONLY)
    put(f"{a}/f", b"VERSION ONE")  # same size, other bytes
    call("B reads same size change", get, f"{b}/f")
    put(f"{a}/f", b"two", os.O_WRONLY | os.O_APPEND)
    call("B reads appended", get, f"{b}/f")
    call("B old descriptor pread", os.pread, rb, 100, 0)
    os.close(rb)
    os.truncate(f"{a}/f", 4)
    call("B reads truncated", get, f"{b}/f")
    os.truncate(f"{a}/f", 9000)
    call("B reads grown", lambda: get(f"{b}/f") == b"VERS" + bytes(8996))
    # replaced by a larger file (a rename, as editors and package managers do) and
    # grown in place on A, just after B read it: B's next open reads it whole
    put(f"{a}/s", b"short")
    call("B reads s", get, f"{b}/s")
    call("B stat s", lambda: os.stat(f"{b}/s").st_size)
    put(f"{a}/s.tmp", b"a much longer content")
    os.rename(f"{a}/s.tmp", f"{a}/s")
    call("B reads s replaced", get, f"{b}/s")
    put(f"{a}/s", b"longer still, written in place")
    call("B reads s grown", get, f"{b}/s")
    # B writes at unaligned offsets, A reads after B's close
    fd = os.open(f"{b}/f", os.O_WRONLY)
    os.pwrite(fd, b"x" * 5000, 4000)
    os.close(fd)
    call("A reads B's write", lambda: get(f"{a}/f") == b"VERS" + bytes(3996) + b"x" * 5000)
    # a rename on A, then B
    put(f"{a}/r1", b"renamed")
    call("B stat r1", lambda: os.stat(f"{b}/r1").st_size)
    os.rename(f"{a}/r1", f"{a}/r2")
    call("B reads new name", get, f"{b}/r2")
    eventually("B stat old name", lambda: os.stat(f"{b}/r1").st_size, "ENOENT")
    os.mkdir(f"{a}/d1")
    put(f"{a}/d1/in", b"inside")
    call("B reads in d1", get, f"{b}/d1/in")
    os.rename(f"{a}/d1", f"{a}/d2")
    call("B reads in renamed dir", get, f"{b}/d2/in")
    eventually("B stat under old dir name", lambda: os.stat(f"{b}/d1/in").st_size, "ENOENT")
    # exclusive creates race through the server
    put(f"{a}/x", b"a's")
    call("B O_EXCL on A's name", os.open, f"{b}/x", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    call("B mkdir on A's name", os.mkdir, f"{b}/x")
    # deleted on A while open on B
    put(f"{a}/del", b"still here")
    fd = os.open(f"{b}/del", os.O_RDWR)
    os.unlink(f"{a}/del")
    call("B pread unlinked", os.pread, fd, 100, 0)
    call("B pwrite unlinked", os.pwrite, fd, b"STILL", 0)
    call("B pread after write", os.pread, fd, 100, 0)
    call("B ftruncate unlinked", os.ftruncate, fd, 3)
    call("B fstat size", lambda: os.fstat(fd).st_size)
    call("B pread after ftruncate", os.pread, fd, 100, 0)
    eventually("B stat unlinked name", lambda: os.stat(f"{b}/del").st_size, "ENOENT")
    os.close(fd)
    call("A lstat del", os.lstat, f"{a}/del")
    # renamed over on A while open on B: B's descriptor keeps the old file
    put(f"{a}/old", b"old file")
    put(f"{a}/new", b"new file!")
    fd = os.open(f"{b}/old", os.O_RDONLY)
    os.rename(f"{a}/new", f"{a}/old")
    call("B old descriptor after rename over", os.pread, fd, 100, 0)
    call("B fstat size after rename over", lambda: os.fstat(fd).st_size)
    os.close(fd)
    call("B reopens", get, f"{b}/old")
    # B creates in A's directory; A lists it
    os.mkdir(f"{a}/ls")
    for i in range(5):
        put(f"{a}/ls/a{i}", b"")
    call("B lists", lambda: sorted(os.listdir(f"{b}/ls")))
    for i in range(3):
        put(f"{b}/ls/b{i}", b"")
    os.unlink(f"{b}/ls/a0")
    call("A lists", lambda: sorted(os.listdir(f"{a}/ls")))
    # a directory removed on A while B is in it
    os.mkdir(f"{a}/gone")
    dfd = os.open(f"{b}/gone", os.O_RDONLY | os.O_DIRECTORY)
    os.rmdir(f"{a}/gone")
    call("B create in removed dir", lambda: os.open("z", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=dfd))
    call("B list removed dir", os.listdir, dfd)
    os.close(dfd)
    # hard links made on A to a file B knows: B sees one inode under every name
    put(f"{a}/hl", b"linked")
    call("B stat hl", lambda: os.stat(f"{b}/hl").st_nlink)
    os.mkdir(f"{a}/hld")
    os.link(f"{a}/hl", f"{a}/hl2")
    os.link(f"{a}/hl", f"{a}/hld/hl3")
    call("B same inode", lambda: len({os.stat(f"{b}/{n}").st_ino for n in ("hl", "hl2", "hld/hl3")}))
    eventually("B link count", lambda: os.stat(f"{b}/hl").st_nlink, 3)
    os.unlink(f"{a}/hl")
    call("B reads a link left", get, f"{b}/hl2")
    call("B reads the other", get, f"{b}/hld/hl3")
    eventually("B stat removed link", lambda: os.stat(f"{b}/hl").st_size, "ENOENT")
    eventually("B link count after unlink", lambda: os.stat(f"{b}/hl2").st_nlink, 2)
    # attributes set on A, seen by B after an open
    os.chmod(f"{a}/f", 0o600)
    os.utime(f"{a}/f", (11, 22))
    fd = os.open(f"{b}/f", os.O_RDONLY)
    s = os.fstat(fd)
    note("B fstat after open", oct(s.st_mode), s.st_mtime, s.st_atime)
    os.close(fd)
    sys.stdout.write("\n".join(out).replace(a, "D").replace(b, "D") + "\n")


main()
