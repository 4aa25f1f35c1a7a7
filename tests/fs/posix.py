#!/usr/bin/env python3
"""posix.py DIR: runs edge-case scenarios of POSIX/Linux file semantics in DIR (which must
not exist) and prints a transcript: each call's result or errno name, contents and the
attributes that do not depend on the file system instance (no inode numbers, devices or
absolute times; times are compared with each other). tests/fs/run.sh runs it on the mount
and in a local directory of the export's own file system and compares the transcripts.

    posix.py DIR [SCENARIO...]

Scenarios whose function starts with l_ show differences documented under "Limits" in
docs/FILES.md; they run only when named.
"""
import errno
import fcntl
import mmap
import os
import stat
import sys

from transcript import call, note, out


def st(label, s):
    note(label, "mode=%o nlink=%d size=%d uid=%d gid=%d" % (s.st_mode, s.st_nlink, s.st_size, s.st_uid, s.st_gid))


def lst(label, path):
    try:
        st(label, os.lstat(path))
    except OSError as e:
        note(label, "->", errno.errorcode.get(e.errno, e.errno))


def fst(label, fd):
    try:
        st(label, os.fstat(fd))
    except OSError as e:
        note(label, "->", errno.errorcode.get(e.errno, e.errno))


def put(path, data):
    with open(path, "wb") as f:
        f.write(data)


def get(path):
    with open(path, "rb") as f:
        return f.read()


def s_unlinked_open(d):
    f = f"{d}/f"
    put(f, b"hello world")
    fd = os.open(f, os.O_RDWR)
    call("unlink", os.unlink, f)
    lst("lstat gone", f)
    fst("fstat", fd)
    call("pread", os.pread, fd, 100, 0)
    call("pwrite", os.pwrite, fd, b"HELLO", 0)
    call("pread again", os.pread, fd, 100, 0)
    call("ftruncate", os.ftruncate, fd, 3)
    fst("fstat after ftruncate", fd)
    call("pread after ftruncate", os.pread, fd, 100, 0)
    call("fchmod", os.fchmod, fd, 0o600)
    fst("fstat after fchmod", fd)
    call("fsync", os.fsync, fd)
    call("fchown", os.fchown, fd, 7, 8)
    fst("fstat after fchown", fd)
    call("fsetxattr", os.setxattr, fd, "user.a", b"1")
    call("fgetxattr", os.getxattr, fd, "user.a")
    call("flistxattr", os.listxattr, fd)
    call("fremovexattr", os.removexattr, fd, "user.a")
    call("fgetxattr removed", os.getxattr, fd, "user.a")
    call("fallocate", os.posix_fallocate, fd, 0, 10000)
    fst("fstat after fallocate", fd)
    call("futimens", os.utime, fd, (3, 4))
    call("times", lambda: (os.fstat(fd).st_atime, os.fstat(fd).st_mtime))
    os.close(fd)
    call("listdir", lambda: sorted(os.listdir(d)))


def s_rename_over_open(d):
    a, b = f"{d}/a", f"{d}/b"
    put(a, b"new contents")
    put(b, b"old")
    fd = os.open(b, os.O_RDWR)
    call("rename a b", os.rename, a, b)
    call("read old fd", os.pread, fd, 100, 0)
    call("write old fd", os.pwrite, fd, b"OLD!", 0)
    fst("fstat old fd", fd)
    os.close(fd)
    call("read b", get, b)


def s_append(d):
    f = f"{d}/log"
    put(f, b"")
    a = os.open(f, os.O_WRONLY | os.O_APPEND)
    b = os.open(f, os.O_WRONLY | os.O_APPEND)
    for i in range(5):
        os.write(a, b"a%d-" % i)
        os.write(b, b"b%d-" % i)
    call("lseek cur a", os.lseek, a, 0, os.SEEK_CUR)
    call("pwrite append", os.pwrite, a, b"P", 0)
    os.close(a)
    os.close(b)
    call("contents", get, f)


def s_holes(d):
    f = f"{d}/h"
    fd = os.open(f, os.O_RDWR | os.O_CREAT, 0o644)
    call("pwrite far", os.pwrite, fd, b"tail", 1 << 20)
    fst("fstat", fd)
    call("read hole", lambda: os.pread(fd, 8, 4096) == b"\0" * 8)
    call("SEEK_DATA 0", os.lseek, fd, 0, os.SEEK_DATA)
    call("SEEK_HOLE 0", os.lseek, fd, 0, os.SEEK_HOLE)
    call("SEEK_HOLE data", os.lseek, fd, (1 << 20) + 1, os.SEEK_HOLE)
    call("SEEK_DATA past end", os.lseek, fd, (1 << 20) + 100, os.SEEK_DATA)
    call("SEEK_END", os.lseek, fd, 0, os.SEEK_END)
    call("SEEK_END+10", os.lseek, fd, 10, os.SEEK_END)
    call("lseek negative", os.lseek, fd, -1, os.SEEK_SET)
    os.close(fd)


def s_fallocate(d):
    f = f"{d}/fa"
    put(f, b"x" * 65536)
    fd = os.open(f, os.O_RDWR)
    call("fallocate grow", os.posix_fallocate, fd, 0, 131072)
    fst("fstat", fd)
    keep, punch = 1, 2
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]

    def fa(mode, off, ln):
        if libc.fallocate(fd, mode, off, ln) != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))

    call("fallocate KEEP_SIZE", fa, keep, 0, 1 << 20)
    fst("fstat keep", fd)
    call("fallocate PUNCH alone", fa, punch, 0, 4096)
    call("fallocate PUNCH|KEEP", fa, punch | keep, 4096, 8192)
    fst("fstat punch", fd)
    call("read punched", lambda: os.pread(fd, 16384, 0).count(b"\0"))
    call("SEEK_HOLE after punch", os.lseek, fd, 0, os.SEEK_HOLE)
    call("SEEK_DATA in punch", os.lseek, fd, 4096, os.SEEK_DATA)
    call("fallocate bad len", fa, 0, 0, 0)
    os.close(fd)


def s_copy_range(d):
    a, b = f"{d}/src", f"{d}/dst"
    put(a, bytes(range(256)) * 100)
    put(b, b"")
    fa = os.open(a, os.O_RDONLY)
    fb = os.open(b, os.O_WRONLY)
    call("copy_file_range", os.copy_file_range, fa, fb, 10000, 5)
    os.close(fa)
    os.close(fb)
    call("dst", lambda: get(b) == (bytes(range(256)) * 100)[5:10005])


def s_links(d):
    a, b = f"{d}/a", f"{d}/b"
    put(a, b"x")
    call("link", os.link, a, b)
    lst("a after link", a)
    lst("b after link", b)
    call("unlink b", os.unlink, b)
    # the source's attributes cached by the kernel (a setattr's reply, then a stat)
    put(f"{d}/c", b"c")
    os.utime(f"{d}/c", (1, 2))
    os.stat(f"{d}/c")
    call("link cached", os.link, f"{d}/c", f"{d}/h")
    lst("source after link", f"{d}/c")
    call("link to dir", os.link, d, f"{d}/dl")
    call("link existing", os.link, a, a)
    call("link missing", os.link, f"{d}/none", f"{d}/x")


def s_link_identity(d):
    # The names of one file are one inode (du, tar, cp -a and rsync -H find hard links
    # by st_ino): compared with each other, never printed.
    a, b, c = f"{d}/a", f"{d}/sub/b", f"{d}/c"
    os.mkdir(f"{d}/sub")
    put(a, b"one")
    os.stat(a)
    os.link(a, b)
    note("same inode after link", os.stat(a).st_ino == os.stat(b).st_ino)
    note("samefile", os.path.samefile(a, b))
    os.link(b, c)
    lst("a after second link", a)
    note("three names one inode", len({os.stat(p).st_ino for p in (a, b, c)}) == 1)
    other = f"{d}/other"
    put(other, b"two")
    note("other file other inode", os.stat(other).st_ino != os.stat(a).st_ino)
    # Written through one name, read through another, in both orders.
    with open(b, "r+b") as f:
        f.write(b"ONE")
    call("read a", get, a)
    with open(a, "ab") as f:
        f.write(b"+")
    call("read c", get, c)
    # A name removed: the others keep the file and its count.
    call("unlink a", os.unlink, a)
    lst("b after unlink of a", b)
    call("read b", get, b)
    # Renamed (and its directory renamed): still the one inode.
    call("rename c", os.rename, c, f"{d}/c2")
    os.rename(f"{d}/sub", f"{d}/sub2")
    note("same inode after renames", os.stat(f"{d}/c2").st_ino == os.stat(f"{d}/sub2/b").st_ino)
    # A name renamed over by another file: the names left are still the file.
    os.link(f"{d}/c2", f"{d}/c3")
    call("rename over a link", os.rename, other, f"{d}/c3")
    call("read c3", get, f"{d}/c3")
    lst("c2 after its link renamed over", f"{d}/c2")
    note("c2 b same", os.stat(f"{d}/c2").st_ino == os.stat(f"{d}/sub2/b").st_ino)
    note("c3 is another", os.stat(f"{d}/c3").st_ino != os.stat(f"{d}/c2").st_ino)
    # Renaming one link onto another name of the same file does nothing.
    os.link(f"{d}/c2", f"{d}/c4")
    call("rename onto own link", os.rename, f"{d}/c2", f"{d}/c4")
    call("both there", lambda: (os.path.exists(f"{d}/c2"), os.path.exists(f"{d}/c4")))
    lst("c4", f"{d}/c4")


def s_device_nodes(d):
    # Device nodes are names on the server (never opened there): made, looked at,
    # changed, linked, renamed and removed as locally.
    for kind, name, dev in ((stat.S_IFCHR, "c", os.makedev(1, 3)), (stat.S_IFBLK, "b", os.makedev(7, 200))):
        f = f"{d}/{name}"
        call("mknod " + name, os.mknod, f, 0o640 | kind, dev)
        s = os.lstat(f)
        note(name, stat.S_IFMT(s.st_mode) == kind, os.major(s.st_rdev), os.minor(s.st_rdev))
        call("chmod " + name, os.chmod, f, 0o600)
        call("chown " + name, os.chown, f, 65534, 65533)
        call("link " + name, os.link, f, f + "2")
        call("rename " + name, os.rename, f + "2", f + "3")
        lst(name + " after", f)
        s = os.lstat(f + "3")
        note(name + "3", stat.S_IFMT(s.st_mode) == kind, os.major(s.st_rdev), os.minor(s.st_rdev))
        call("mknod over " + name, os.mknod, f, 0o640 | kind, dev)
        call("unlink " + name, os.unlink, f)
        call("unlink " + name + "3", os.unlink, f + "3")


def s_link_count(d):
    a, b = f"{d}/a", f"{d}/b"
    put(a, b"x")
    os.link(a, b)
    os.lstat(a)
    os.unlink(b)
    lst("a after unlink of b", a)


def s_times(d):
    f = f"{d}/t"
    put(f, b"x")
    os.utime(f, ns=(1_000_000_000, 2_000_000_000))
    s = os.stat(f)
    note("times set", s.st_atime_ns, s.st_mtime_ns)
    fd = os.open(f, os.O_RDWR)
    # UTIME_OMIT for atime, UTIME_NOW for mtime, through the descriptor
    import ctypes

    class Ts(ctypes.Structure):
        _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]

    libc = ctypes.CDLL(None, use_errno=True)
    UTIME_NOW, UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2
    ts = (Ts * 2)(Ts(0, UTIME_OMIT), Ts(0, UTIME_NOW))
    r = libc.futimens(fd, ts)
    note("futimens omit/now", r)
    s = os.fstat(fd)
    note("atime kept", s.st_atime_ns == 1_000_000_000, "mtime now", s.st_mtime_ns > 2_000_000_000)
    ts = (Ts * 2)(Ts(5, 0), Ts(0, UTIME_OMIT))
    r = libc.utimensat(-100, f.encode(), ts, 0)
    s = os.stat(f)
    note("utimensat set/omit", r, s.st_atime_ns, s.st_mtime_ns > 2_000_000_000)
    ts = (Ts * 2)(Ts(0, UTIME_OMIT), Ts(0, UTIME_OMIT))
    r = libc.utimensat(-100, f.encode(), ts, 0)
    s = os.stat(f)
    note("utimensat omit/omit", r, s.st_atime_ns)
    os.symlink("t", f"{d}/l")
    os.utime(f"{d}/l", ns=(7_000_000_000, 8_000_000_000), follow_symlinks=False)
    s = os.lstat(f"{d}/l")
    note("symlink times", s.st_atime_ns, s.st_mtime_ns)
    os.close(fd)


def s_modes(d):
    f = f"{d}/m"
    old = os.umask(0o027)
    fd = os.open(f, os.O_RDWR | os.O_CREAT, 0o777)
    os.mkdir(f"{d}/dir", 0o777)
    os.mknod(f"{d}/fifo", 0o666 | stat.S_IFIFO)
    os.umask(old)
    fst("created with umask 027", fd)
    lst("mkdir with umask 027", f"{d}/dir")
    lst("fifo with umask 027", f"{d}/fifo")
    call("fchmod", os.fchmod, fd, 0o4755)
    fst("after fchmod", fd)
    call("fchown", os.fchown, fd, 1234, 5678)
    fst("after fchown", fd)
    os.close(fd)
    g = f"{d}/sg"
    os.mkdir(g)
    os.chown(g, 0, 4321)
    os.chmod(g, 0o2775)
    put(f"{g}/child", b"")
    os.mkdir(f"{g}/sub")
    lst("file in setgid dir", f"{g}/child")
    lst("dir in setgid dir", f"{g}/sub")
    call("symlink in setgid dir", os.symlink, "child", f"{g}/sl")
    call("sl gid", lambda: os.lstat(f"{g}/sl").st_gid)
    os.mknod(f"{g}/fifo", 0o644 | stat.S_IFIFO)
    lst("fifo in setgid dir", f"{g}/fifo")
    os.chmod(f"{d}/dir", 0o1777)
    lst("sticky", f"{d}/dir")
    for mode, name in ((os.R_OK, "R"), (os.W_OK, "W"), (os.X_OK, "X"), (os.F_OK, "F")):
        call("access " + name, os.access, f, mode)


def s_names(d):
    n255 = "n" * 255
    call("create 255", put, f"{d}/{n255}", b"x")
    call("stat 255", lambda: os.stat(f"{d}/{n255}").st_size)
    call("create 256", put, f"{d}/{'n' * 256}", b"x")
    call("mkdir 256", os.mkdir, f"{d}/{'m' * 256}")
    call("stat 256", os.stat, f"{d}/{'n' * 256}")
    raw = os.fsencode(d) + b"/bad\xff\xfe name"
    call("create non-utf8", put, raw, b"y")
    call("read non-utf8", get, raw)
    call("create newline", put, f"{d}/a\nb", b"z")
    call("create tab", put, f"{d}/a\tb", b"z")
    call("listdir", lambda: sorted(os.listdir(os.fsencode(d))))
    call("rename newline", os.rename, f"{d}/a\nb", f"{d}/c\nd")
    call("symlink non-utf8", os.symlink, b"\xff\xfe target", os.fsencode(d) + b"/\xffl")
    call("readlink non-utf8", os.readlink, os.fsencode(d) + b"/\xffl")
    # a relative path near PATH_MAX (relative: the same length whatever DIR is)
    cwd = os.getcwd()
    os.chdir(d)
    try:
        p = "d" * 200
        os.mkdir(p)
        for _ in range(19):
            p = p + "/" + "d" * 200
            os.mkdir(p)
        call("deep path length", len, p + "/" + "f" * 60)
        call("deep create", put, p + "/" + "f" * 60, b"deep")
        call("deep read", get, p + "/" + "f" * 60)
        call("too long path", os.stat, p + "/" + "x" * 250)
    finally:
        os.chdir(cwd)
    call("dot names", os.mkdir, f"{d}/.")
    call("empty name", os.stat, "")


def s_readdir(d):
    for i in range(300):
        put(f"{d}/e{i:03}", b"")
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    # readdir while entries are removed and added: every name present all along is seen
    # exactly once
    seen = []
    with os.scandir(d) as it:
        for k, e in enumerate(it):
            seen.append(e.name)
            if k == 10:
                for i in range(250, 300):
                    os.unlink(f"{d}/e{i:03}")
                for i in range(50):
                    put(f"{d}/n{i:03}", b"")
    stable = [f"e{i:03}" for i in range(250)]
    note("stable seen once", all(seen.count(n) == 1 for n in stable), "dups", len(seen) - len(set(seen)))
    note("removed seen", sum(1 for n in seen if n.startswith("e") and int(n[1:]) >= 250) <= 50)
    os.close(fd)
    # telldir/seekdir through libc
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.opendir.restype = ctypes.c_void_p
    libc.readdir.restype = ctypes.c_void_p
    libc.readdir.argtypes = [ctypes.c_void_p]
    libc.telldir.restype = ctypes.c_long
    libc.telldir.argtypes = [ctypes.c_void_p]
    libc.seekdir.argtypes = [ctypes.c_void_p, ctypes.c_long]
    libc.closedir.argtypes = [ctypes.c_void_p]

    def name(ent):
        return ctypes.string_at(ent + 19).decode()

    dp = libc.opendir(d.encode())
    names = []
    pos = None
    while True:
        if len(names) == 120:
            pos = libc.telldir(dp)
        ent = libc.readdir(dp)
        if not ent:
            break
        names.append(name(ent))
    libc.seekdir(dp, pos)
    again = []
    while True:
        ent = libc.readdir(dp)
        if not ent:
            break
        again.append(name(ent))
    libc.closedir(dp)
    note("seekdir resumes", again == names[120:], len(names))


def s_dirs(d):
    os.makedirs(f"{d}/a/b/c")
    put(f"{d}/a/f", b"")
    put(f"{d}/file", b"")
    os.mkdir(f"{d}/empty")
    os.mkdir(f"{d}/full")
    put(f"{d}/full/x", b"")
    call("rmdir non-empty", os.rmdir, f"{d}/a")
    call("rename dir into itself", os.rename, f"{d}/a", f"{d}/a/b/c/a")
    call("rename dir onto own child", os.rename, f"{d}/a", f"{d}/a/b")
    call("rename file over dir", os.rename, f"{d}/file", f"{d}/empty")
    call("rename dir over file", os.rename, f"{d}/empty", f"{d}/file")
    call("rename dir over non-empty", os.rename, f"{d}/empty", f"{d}/full")
    call("rename dir over empty", os.rename, f"{d}/a/b/c", f"{d}/empty")
    call("rename to same", os.rename, f"{d}/file", f"{d}/file")
    call("rename missing", os.rename, f"{d}/none", f"{d}/x")
    call("rename . ", os.rename, f"{d}/a/.", f"{d}/x")
    call("unlink dir", os.unlink, f"{d}/a")
    call("rmdir file", os.rmdir, f"{d}/file")
    call("rmdir .", os.rmdir, f"{d}/a/.")
    call("mkdir existing", os.mkdir, f"{d}/file")
    call("mkdir under file", os.mkdir, f"{d}/file/x")
    call("open under file", os.open, f"{d}/file/x", os.O_RDONLY)
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)

    def r2(a, b, flags):
        if libc.renameat2(-100, a.encode(), -100, b.encode(), flags) != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))

    put(f"{d}/p", b"P")
    put(f"{d}/q", b"Q")
    call("noreplace existing", r2, f"{d}/p", f"{d}/q", 1)
    call("exchange", r2, f"{d}/p", f"{d}/q", 2)
    call("after exchange", lambda: (get(f"{d}/p"), get(f"{d}/q")))
    call("exchange missing", r2, f"{d}/p", f"{d}/zz", 2)
    call("exchange file/dir", r2, f"{d}/p", f"{d}/full", 2)
    call("p is dir", lambda: stat.S_ISDIR(os.lstat(f"{d}/p").st_mode))
    call("noreplace|exchange", r2, f"{d}/p", f"{d}/q", 3)
    call("listing", lambda: sorted(os.listdir(d)))
    lst("dir nlink", f"{d}/a")


def s_mmap(d):
    f = f"{d}/mm"
    put(f, b"\0" * 8192)
    fd = os.open(f, os.O_RDWR)
    m = mmap.mmap(fd, 8192, mmap.MAP_SHARED)
    m[100:105] = b"mmap!"
    m[5000:5003] = b"xyz"
    m.flush()
    call("read via fd", lambda: os.pread(fd, 5, 100))
    m.close()
    os.close(fd)
    call("read new open", lambda: get(f)[5000:5003])
    # private mapping changes stay private
    fd = os.open(f, os.O_RDWR)
    m = mmap.mmap(fd, 8192, mmap.MAP_PRIVATE)
    m[0:3] = b"PRV"
    m.close()
    os.close(fd)
    call("private not written", lambda: get(f)[0:3])


def s_locks(d):
    f = f"{d}/lk"
    put(f, b"x" * 100)
    fd = os.open(f, os.O_RDWR)
    call("flock", fcntl.flock, fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fd2 = os.open(f, os.O_RDWR)
    call("flock other open file", fcntl.flock, fd2, fcntl.LOCK_EX | fcntl.LOCK_NB)
    call("flock unlock", fcntl.flock, fd, fcntl.LOCK_UN)
    call("flock other again", fcntl.flock, fd2, fcntl.LOCK_SH | fcntl.LOCK_NB)
    os.close(fd2)
    os.close(fd)


def l_flock_and_fcntl(d):
    f = f"{d}/lk"
    put(f, b"x" * 100)
    fd = os.open(f, os.O_RDWR)
    call("lockf", fcntl.lockf, fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
    call("flock", fcntl.flock, fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fd)


def l_tmpfile(d):
    fd = call("O_TMPFILE", os.open, d, os.O_TMPFILE | os.O_RDWR, 0o600)
    if fd is not None:
        os.close(fd)


def s_opens(d):
    put(f"{d}/file", b"data")
    os.mkdir(f"{d}/dir")
    os.symlink("loop2", f"{d}/loop1")
    os.symlink("loop1", f"{d}/loop2")
    os.symlink("file", f"{d}/lnk")
    long_target = "t" * 4000
    call("symlink long", os.symlink, long_target, f"{d}/long")
    call("readlink long", lambda: len(os.readlink(f"{d}/long")))
    call("symlink too long", os.symlink, "t" * 4096, f"{d}/long2")
    call("open loop", os.open, f"{d}/loop1", os.O_RDONLY)
    call("stat loop", os.stat, f"{d}/loop1")
    call("open nofollow", os.open, f"{d}/lnk", os.O_RDONLY | os.O_NOFOLLOW)
    call("open directory on file", os.open, f"{d}/file", os.O_RDONLY | os.O_DIRECTORY)
    call("open excl existing", os.open, f"{d}/file", os.O_RDWR | os.O_CREAT | os.O_EXCL)
    call("open excl symlink", os.open, f"{d}/lnk", os.O_RDWR | os.O_CREAT | os.O_EXCL)
    call("open dir for write", os.open, f"{d}/dir", os.O_WRONLY)
    call("open dir creat", os.open, f"{d}/dir", os.O_RDONLY | os.O_CREAT)
    call("open missing", os.open, f"{d}/none", os.O_RDONLY)
    call("readlink file", os.readlink, f"{d}/file")
    fd = call("open path", os.open, f"{d}/lnk", os.O_PATH | os.O_NOFOLLOW)
    if fd is not None:
        call("read O_PATH", os.read, fd, 4)
        os.close(fd)
    fd = os.open(f"{d}/file", os.O_RDONLY)
    call("write rdonly", os.write, fd, b"x")
    call("ftruncate rdonly", os.ftruncate, fd, 0)
    os.close(fd)
    fd = os.open(f"{d}/file", os.O_WRONLY)
    call("read wronly", os.read, fd, 1)
    os.close(fd)
    import tempfile
    fd, p = tempfile.mkstemp(dir=d)
    fst("mkstemp", fd)
    os.close(fd)
    fd = os.open(f"{d}/file", os.O_RDWR | os.O_TRUNC)
    fst("O_TRUNC", fd)
    os.close(fd)
    put(f"{d}/file", b"data")
    fd = os.open(f"{d}/file", os.O_RDONLY | os.O_TRUNC)
    fst("O_RDONLY|O_TRUNC", fd)
    os.close(fd)
    call("truncate negative", os.truncate, f"{d}/file", -1)
    call("truncate dir", os.truncate, f"{d}/dir", 0)
    call("statvfs namemax", lambda: os.statvfs(d).f_namemax)


def s_xattrs(d):
    f = f"{d}/x"
    put(f, b"")
    call("get absent", os.getxattr, f, "user.none")
    call("set", os.setxattr, f, "user.a", b"value")
    call("set create existing", os.setxattr, f, "user.a", b"v", os.XATTR_CREATE)
    call("set replace absent", os.setxattr, f, "user.b", b"v", os.XATTR_REPLACE)
    call("get", os.getxattr, f, "user.a")
    call("list", lambda: sorted(os.listxattr(f)))
    call("remove absent", os.removexattr, f, "user.none")
    call("set empty", os.setxattr, f, "user.e", b"")
    call("get empty", os.getxattr, f, "user.e")
    call("bad namespace", os.setxattr, f, "bogus.a", b"v")
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(2)
    r = libc.getxattr(f.encode(), b"user.a", buf, 2)
    note("getxattr small buffer", r, errno.errorcode.get(ctypes.get_errno()) if r < 0 else "")


def as_user(f, uid=1000):
    """Runs f in a child process as uid/gid `uid` (no other groups); its notes are added."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            out.clear()
            os.setgid(uid)
            os.setgroups([])
            os.setuid(uid)
            f()
            os.write(w, "\n".join(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    got = b""
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        got += b
    os.close(r)
    os.waitpid(pid, 0)
    out.extend(got.decode().split("\n"))


def s_users(d):
    """Another user (uid/gid 1000) in a sticky directory of root's files: permission
    checks, and the set-user-ID/set-group-ID bits of the files it creates."""
    os.chmod(d, 0o1777)
    put(f"{d}/rootfile", b"r")
    os.chmod(f"{d}/rootfile", 0o644)
    put(f"{d}/shared", b"s")
    os.chmod(f"{d}/shared", 0o666)
    os.mkdir(f"{d}/rodir", 0o555)

    def child():
        for mode, name in ((os.R_OK, "R"), (os.W_OK, "W"), (os.X_OK, "X")):
            call("access " + name, os.access, f"{d}/rootfile", mode)
        call("open W rootfile", os.open, f"{d}/rootfile", os.O_WRONLY)
        call("unlink rootfile (sticky)", os.unlink, f"{d}/rootfile")
        call("rename rootfile (sticky)", os.rename, f"{d}/rootfile", f"{d}/x")
        call("unlink shared (sticky)", os.unlink, f"{d}/shared")
        call("chmod rootfile", os.chmod, f"{d}/rootfile", 0o777)
        put(f"{d}/mine", b"")
        call("chown own to root", os.chown, f"{d}/mine", 0, -1)
        call("chgrp own to a group not in", os.chown, f"{d}/mine", -1, 0)
        lst("mine", f"{d}/mine")
        call("create in rodir", os.open, f"{d}/rodir/x", os.O_CREAT | os.O_WRONLY, 0o644)
        call("utime rootfile now", os.utime, f"{d}/rootfile")
        call("utime rootfile set", os.utime, f"{d}/rootfile", (1, 1))
        call("utime shared now", os.utime, f"{d}/shared")
        call("utime shared set", os.utime, f"{d}/shared", (1, 1))
        call("chmod own 2755", os.chmod, f"{d}/mine", 0o2755)
        lst("mine 2755", f"{d}/mine")
        fd = os.open(f"{d}/suid", os.O_CREAT | os.O_WRONLY, 0o6755)
        fst("created 6755", fd)
        os.write(fd, b"x")
        os.close(fd)
        lst("6755 after write", f"{d}/suid")
        os.mknod(f"{d}/suid2", 0o4755 | stat.S_IFREG)
        lst("mknod 4755", f"{d}/suid2")
        call("truncate rootfile", os.truncate, f"{d}/rootfile", 0)
        call("setxattr rootfile", os.setxattr, f"{d}/rootfile", "user.a", b"1")
        call("mkdir in sticky", os.mkdir, f"{d}/udir")
        call("rmdir rodir", os.rmdir, f"{d}/rodir")

    as_user(child)


def s_open_dirs(d):
    """Directories renamed or removed while open (and as the working directory), files
    truncated or unlinked while open, a file open under one of its two names."""
    os.mkdir(f"{d}/dir")
    dfd = os.open(f"{d}/dir", os.O_RDONLY | os.O_DIRECTORY)
    call("rename open dir", os.rename, f"{d}/dir", f"{d}/dir2")
    call("openat create after rename", lambda: os.close(os.open("x", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=dfd)))
    call("listing new name", lambda: sorted(os.listdir(f"{d}/dir2")))
    call("fstat dirfd nlink", lambda: os.fstat(dfd).st_nlink)
    os.close(dfd)
    os.mkdir(f"{d}/gone")
    gfd = os.open(f"{d}/gone", os.O_RDONLY | os.O_DIRECTORY)
    call("rmdir open dir", os.rmdir, f"{d}/gone")
    call("openat in removed dir", lambda: os.open("y", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=gfd))
    call("fstat removed dir nlink", lambda: os.fstat(gfd).st_nlink)
    call("listdir removed dir fd", lambda: os.listdir(gfd))
    call("fsetxattr removed dir", os.setxattr, gfd, "user.d", b"1")
    call("fgetxattr removed dir", os.getxattr, gfd, "user.d")
    os.close(gfd)
    cwd = os.getcwd()
    os.chdir(f"{d}/dir2")
    try:
        call("cwd relative create", lambda: put("rel", b"r"))
        call("rename cwd", os.rename, f"{d}/dir2", f"{d}/dir3")
        call("cwd relative create after rename", lambda: put("rel2", b"r"))
    finally:
        os.chdir(cwd)
    call("listing dir3", lambda: sorted(os.listdir(f"{d}/dir3")))
    put(f"{d}/t", b"0123456789")
    fd = os.open(f"{d}/t", os.O_RDONLY)
    os.read(fd, 3)
    call("truncate while open", os.truncate, f"{d}/t", 2)
    call("read after truncate", os.read, fd, 10)
    fst("fstat after truncate", fd)
    os.close(fd)
    put(f"{d}/u", b"abc")
    fd = os.open(f"{d}/u", os.O_RDWR | os.O_APPEND)
    os.unlink(f"{d}/u")
    call("append after unlink", os.write, fd, b"def")
    call("pread", os.pread, fd, 10, 0)
    fst("fstat after append", fd)
    os.close(fd)
    put(f"{d}/h1", b"hl")
    os.link(f"{d}/h1", f"{d}/h2")
    fd = os.open(f"{d}/h1", os.O_RDONLY)
    os.unlink(f"{d}/h1")
    call("fstat nlink after unlink of its name", lambda: os.fstat(fd).st_nlink)
    os.close(fd)
    call("h2 content", get, f"{d}/h2")


def s_misc(d):
    """A rename onto a hard link of itself, a directory read and fsynced, chmod and
    lchown through symlinks, FIFOs and sockets, huge sizes (the file system's EFBIG at
    the write itself), directory times."""
    import socket
    put(f"{d}/a", b"A")
    os.link(f"{d}/a", f"{d}/b")
    call("rename onto own hard link", os.rename, f"{d}/a", f"{d}/b")
    call("listing", lambda: sorted(os.listdir(d)))
    call("nlink a, b", lambda: (os.stat(f"{d}/a").st_nlink, os.stat(f"{d}/b").st_nlink))
    dfd = os.open(d, os.O_RDONLY)
    call("read dir", os.read, dfd, 10)
    call("fsync dir", os.fsync, dfd)
    os.close(dfd)
    os.symlink("a", f"{d}/sl")
    call("chmod via symlink", os.chmod, f"{d}/sl", 0o600)
    lst("a after chmod via symlink", f"{d}/a")
    call("lchown symlink", os.lchown, f"{d}/sl", 123, 456)
    lst("symlink after lchown", f"{d}/sl")
    lst("a after lchown of symlink", f"{d}/a")
    os.mkfifo(f"{d}/fifo")
    call("fifo nonblock write no reader", os.open, f"{d}/fifo", os.O_WRONLY | os.O_NONBLOCK)
    r = os.open(f"{d}/fifo", os.O_RDONLY | os.O_NONBLOCK)
    w = os.open(f"{d}/fifo", os.O_WRONLY)
    os.write(w, b"pipe")
    call("fifo read", os.read, r, 10)
    os.close(r)
    os.close(w)
    s = socket.socket(socket.AF_UNIX)
    call("bind unix socket", s.bind, f"{d}/sock")
    call("socket type", lambda: stat.S_ISSOCK(os.lstat(f"{d}/sock").st_mode))
    s.close()
    call("truncate 1 TiB", os.truncate, f"{d}/a", 1 << 40)
    call("size", lambda: os.stat(f"{d}/a").st_size)
    call("truncate 4 EiB", os.truncate, f"{d}/a", 1 << 62)
    fd = os.open(f"{d}/a", os.O_RDWR)
    call("pwrite at 16 TiB", os.pwrite, fd, b"x", 1 << 44)
    call("pread far", os.pread, fd, 4, (1 << 40) - 2)
    call("close", os.close, fd)
    call("utime dir", os.utime, d, (5, 6))
    call("dir times", lambda: (os.stat(d).st_atime, os.stat(d).st_mtime))
    put(f"{d}/n", b"")
    call("dir mtime after create", lambda: os.stat(d).st_mtime != 6)


def s_user_open_modes(d):
    """d_type in listings; another user's descriptors outliving the file's mode: a file
    created 0444 written and truncated through its descriptor, one made 000 while open."""
    os.chmod(d, 0o777)
    os.mkdir(f"{d}/sub")
    os.symlink("sub", f"{d}/sl")
    put(f"{d}/f", b"")
    os.mkfifo(f"{d}/p")
    with os.scandir(d) as it:
        call("d_types", lambda: sorted((e.name, e.is_dir(follow_symlinks=False), e.is_symlink(),
                                        e.is_file(follow_symlinks=False)) for e in it))

    def child():
        fd = os.open(f"{d}/ro", os.O_CREAT | os.O_RDWR, 0o444)
        call("write to 0444 created fd", os.write, fd, b"abc")
        call("ftruncate 0444 fd", os.ftruncate, fd, 1)
        call("fchmod own", os.fchmod, fd, 0o400)
        call("futimes own", os.utime, fd, (1, 2))
        fst("fstat", fd)
        os.close(fd)
        call("reopen 0400 for write", os.open, f"{d}/ro", os.O_WRONLY)
        call("open O_TRUNC 0400", os.open, f"{d}/ro", os.O_RDONLY | os.O_TRUNC)
        fd = os.open(f"{d}/w", os.O_CREAT | os.O_WRONLY, 0o600)
        os.write(fd, b"hello")
        os.fchmod(fd, 0o000)
        call("write after fchmod 000", os.write, fd, b"!")
        os.close(fd)
        call("open 000", os.open, f"{d}/w", os.O_RDONLY)
        call("stat 000", lambda: os.stat(f"{d}/w").st_size)

    as_user(child)


def s_grow_unaligned(d):
    """Truncate to a larger size (zeros read back); writes at unaligned offsets across
    4 KiB and 1 MiB boundaries mixed with reads through another descriptor; O_TRUNC of a
    file another descriptor is reading."""
    f = f"{d}/g"
    put(f, b"abc")
    call("truncate grow", os.truncate, f, 10000)
    call("grown zeros", lambda: get(f) == b"abc" + bytes(9997))
    call("size", lambda: os.stat(f).st_size)
    w = os.open(f, os.O_WRONLY)
    r = os.open(f, os.O_RDONLY)
    ref = bytearray(get(f))
    for k, off in enumerate([4093, 8190, (1 << 20) - 5, (2 << 20) - 4097, 3 * 4096 + 1, (1 << 20) + 4095]):
        data = bytes((k * 37 + i) % 251 for i in range(9000))
        os.pwrite(w, data, off)
        if len(ref) < off + len(data):
            ref.extend(bytes(off + len(data) - len(ref)))
        ref[off:off + len(data)] = data
        call(f"read other fd {k}", lambda: os.pread(r, 12000, off - 1000) == bytes(ref[off - 1000:off + 11000]))
    call("fstat other fd size", lambda: os.fstat(r).st_size)
    call("whole", lambda: get(f) == bytes(ref))
    os.close(w)
    os.lseek(r, 0, os.SEEK_SET)
    call("read 5", os.read, r, 5)
    t = os.open(f, os.O_WRONLY | os.O_TRUNC)
    call("reader after O_TRUNC", os.read, r, 10)
    fst("reader fstat after O_TRUNC", r)
    os.write(t, b"new")
    call("reader pread after write", os.pread, r, 10, 0)
    os.close(t)
    os.close(r)
    call("ftruncate grow unaligned", lambda: (os.truncate(f, (1 << 20) + 3), get(f) == b"new" + bytes((1 << 20)))[1])


def s_big_dir(d):
    """A directory of 5,000 entries: all listed once, d_ino stable across listings and
    equal to lstat's."""
    for i in range(5000):
        os.close(os.open(f"{d}/f{i:04}", os.O_CREAT | os.O_WRONLY, 0o644))
    with os.scandir(d) as it:
        a = {e.name: e.inode() for e in it}
    with os.scandir(d) as it:
        b = [(e.name, e.inode()) for e in it]
    call("count", lambda: (len(a), len(b), len(set(n for n, _ in b))))
    call("all listed", lambda: sorted(a) == [f"f{i:04}" for i in range(5000)])
    call("d_ino stable", lambda: all(a[n] == i for n, i in b))
    call("d_ino == st_ino", lambda: sum(1 for n in list(a)[:300] if os.lstat(f"{d}/{n}").st_ino != a[n]))
    for i in range(0, 5000, 2):
        os.unlink(f"{d}/f{i:04}")
    call("after removing half", lambda: sorted(os.listdir(d)) == [f"f{i:04}" for i in range(1, 5000, 2)])


def s_statvfs(d):
    """statvfs fields that name the file system (not its free space)."""
    v = os.statvfs(d)
    note("statvfs bsize frsize namemax", v.f_bsize, v.f_frsize, v.f_namemax)
    note("statvfs blocks", v.f_blocks)
    note("statvfs free <= blocks", v.f_bfree <= v.f_blocks, v.f_bavail <= v.f_bfree, v.f_ffree <= v.f_files)
    call("fstatvfs same", lambda: os.fstatvfs(os.open(d, os.O_RDONLY)).f_blocks == v.f_blocks)


def s_rename_open_across(d):
    """An open file renamed into another directory then fstat'ed, written and read; the
    rename of a directory holding an open file."""
    os.mkdir(f"{d}/a")
    os.mkdir(f"{d}/b")
    put(f"{d}/a/f", b"one")
    fd = os.open(f"{d}/a/f", os.O_RDWR)
    call("rename across", os.rename, f"{d}/a/f", f"{d}/b/g")
    fst("fstat", fd)
    call("pwrite", os.pwrite, fd, b"TWO", 3)
    call("read new name", get, f"{d}/b/g")
    lst("lstat old", f"{d}/a/f")
    call("rename dir", os.rename, f"{d}/b", f"{d}/c")
    call("pwrite after dir rename", os.pwrite, fd, b"3", 6)
    fst("fstat after dir rename", fd)
    call("read under renamed dir", get, f"{d}/c/g")
    call("fchmod", os.fchmod, fd, 0o640)
    lst("lstat new", f"{d}/c/g")
    os.close(fd)


def s_deep_tree(d):
    """mkdir -p of deep trees then rm -rf; a directory made 000 then looked up by another
    user (EACCES) and by root."""
    import shutil
    for t in range(3):
        p = f"{d}/t{t}/" + "/".join(f"level{i}" for i in range(60))
        call(f"makedirs {t}", os.makedirs, p)
        put(f"{p}/leaf", b"x")
    call("walk count", lambda: sum(len(fs) + len(ds) for _, ds, fs in os.walk(d)))
    call("rmtree", shutil.rmtree, f"{d}/t0")
    call("rmtree rest", lambda: [shutil.rmtree(f"{d}/t{t}") for t in (1, 2)] and None)
    call("left", os.listdir, d)
    os.chmod(d, 0o755)
    os.mkdir(f"{d}/closed")
    put(f"{d}/closed/f", b"c")
    os.chmod(f"{d}/closed", 0o000)

    def child():
        call("user stat in 000 dir", lambda: os.stat(f"{d}/closed/f"))
        call("user listdir 000 dir", os.listdir, f"{d}/closed")
        call("user open in 000 dir", os.open, f"{d}/closed/f", os.O_RDONLY)
        call("user create in 000 dir", os.open, f"{d}/closed/n", os.O_CREAT | os.O_WRONLY, 0o644)
        call("user access X", os.access, f"{d}/closed", os.X_OK)
        call("user stat 000 dir itself", lambda: stat.S_IMODE(os.stat(f"{d}/closed").st_mode))

    as_user(child)
    call("root stat in 000 dir", lambda: os.stat(f"{d}/closed/f").st_size)
    call("root listdir 000 dir", os.listdir, f"{d}/closed")
    os.chmod(f"{d}/closed", 0o711)

    def child2():
        call("user stat in --x dir", lambda: os.stat(f"{d}/closed/f").st_size)
        call("user listdir --x dir", os.listdir, f"{d}/closed")

    as_user(child2)


def s_symlink_times_sync(d):
    """utime of a symlink itself (AT_SYMLINK_NOFOLLOW); fsync/fdatasync on read-only
    and O_PATH descriptors, of a pipe; posix_fadvise and readahead."""
    put(f"{d}/t", b"target")
    os.utime(f"{d}/t", (1000, 2000))
    os.symlink("t", f"{d}/l")
    call("utime nofollow", lambda: os.utime(f"{d}/l", (3000, 4000), follow_symlinks=False))
    call("link times", lambda: (os.lstat(f"{d}/l").st_atime, os.lstat(f"{d}/l").st_mtime))
    call("target times", lambda: (os.stat(f"{d}/t").st_atime, os.stat(f"{d}/t").st_mtime))
    call("utime ns nofollow", lambda: os.utime(f"{d}/l", ns=(5, 6_000_000_007), follow_symlinks=False))
    call("link mtime ns", lambda: os.lstat(f"{d}/l").st_mtime_ns)
    os.symlink("missing", f"{d}/dangling")
    call("utime dangling nofollow", lambda: os.utime(f"{d}/dangling", (7, 8), follow_symlinks=False))
    call("utime dangling follow", os.utime, f"{d}/dangling", (7, 8))
    fd = os.open(f"{d}/t", os.O_RDONLY)
    call("fsync ro", os.fsync, fd)
    call("fdatasync ro", os.fdatasync, fd)
    call("fadvise willneed", os.posix_fadvise, fd, 0, 0, os.POSIX_FADV_WILLNEED)
    call("fadvise dontneed", os.posix_fadvise, fd, 0, 0, os.POSIX_FADV_DONTNEED)
    call("fadvise sequential", os.posix_fadvise, fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    call("fadvise bad", os.posix_fadvise, fd, 0, 0, 99)
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.readahead.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_size_t]
    rc = libc.readahead(fd, 0, 4096)
    note("readahead", rc, errno.errorcode.get(ctypes.get_errno(), 0) if rc else "")
    call("read after", os.read, fd, 100)
    os.close(fd)
    fd = os.open(f"{d}/t", os.O_PATH)
    call("fsync O_PATH", os.fsync, fd)
    os.close(fd)
    fd = os.open(f"{d}/t", os.O_WRONLY)
    os.write(fd, b"T")
    call("fdatasync wr", os.fdatasync, fd)
    call("fsync wr", os.fsync, fd)
    os.close(fd)
    call("content", get, f"{d}/t")


SCENARIOS = {n[2:]: f for n, f in dict(globals()).items() if n.startswith("s_")}
# Differences documented under "Limits" in docs/FILES.md: run only when named.
LIMITS = {n[2:]: f for n, f in dict(globals()).items() if n.startswith("l_")}


def main():
    d = sys.argv[1]
    names = sys.argv[2:] or list(SCENARIOS)
    os.mkdir(d)
    for n in names:
        sd = f"{d}/{n}"
        os.mkdir(sd)
        note("==", n)
        try:
            {**SCENARIOS, **LIMITS}[n](sd)
        except Exception as e:  # the scenario stopped: noted, the others run
            note("!! exception", type(e).__name__, e.args[:1] if isinstance(e, OSError) else e)
    sys.stdout.write("\n".join(out).replace(d, "DIR") + "\n")


main()
