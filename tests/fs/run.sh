#!/usr/bin/env bash
# run.sh - omxfs (docs/FILES.md): omxfsd on host h0 exports a directory, omxfs mounts it
# on h1 (and h2 for two-client cases); unmodified programs run on the mount, checked
# against local copies. Programs run in the mount namespace of the omxfs process
# (`ip netns exec` gives each command its own).
#
#   tests/fs/run.sh [TEST...]   (root; /dev/fuse, fusermount3, python3; target/release built)
#
# Environment: OMX_NS_PREFIX (default omxfs), TEST_TIMEOUT (300 s per step),
# OMXFS_DD_MIB (size of the dd test, 1 GiB by default), OMXFS_BLOCK_MIB (size of the
# block-device image, 1 GiB by default; both together take about 25 s here).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxfs}
# The comparison tests import tests/fs/transcript.py: no bytecode left in the tree.
export PYTHONDONTWRITEBYTECODE=1
TEST_TIMEOUT=${TEST_TIMEOUT:-300}
hosts="$root/scripts/hosts.sh"
bin="$root/target/release"
# shellcheck source=tests/runner.sh
. "$root/tests/runner.sh"
runner_start fs
all=(exerciser exerciser-procs one-dir-procs exerciser-faults posix programs two-clients tar xattr listing listed-xattrs attrs dir-attrs release-batch made-dir dir-stamps stale-name keep-cache links-two-filesystems cp-rsync git dd fio block locks-two-hosts locked-reads append-two-hosts escape hostile read-only server-restart reopen-after-restart)
select_tests "$@"

if [ "$(id -u)" -ne 0 ]; then skip_all "needs root (namespaces, FUSE mounts)"; fi
[ -c /dev/fuse ] || skip_all "no /dev/fuse"
for c in fusermount3 python3 nsenter; do command -v $c >/dev/null || skip_all "$c not installed"; done
for f in omxfsd omxfs examples/omxfs_hostile; do
  [ -x "$bin/$f" ] || skip_all "$bin/$f not built (cargo build --release -p omx-fs --bins --examples)"
done
export OMX_STATE_DIR="$tmp/state"
mkdir -p "$OMX_STATE_DIR" "$tmp/export/data" "$tmp/export/ro" "$tmp/m1" "$tmp/m2" "$tmp/ref"
hosts_up 3 9000
log="$tmp/log"
server_pid=
mounts=()

start_server() {
  "$hosts" exec 0 "$bin/omxfsd" --lease 4 "$tmp/export/data" "$@" >>"$log/server" 2>&1 &
  server_pid=$!
  bgpids+=("$server_pid")
}

# mount I MOUNTPOINT EXPORT [OPTIONS]: omxfs in the foreground on host I; sets client_pid
# once mounted. OPTIONS are added to its -o.
mount_on() {
  local i=$1 mnt=$2 ex=$3 opts=${4:+,$4} deadline=$((SECONDS + 60))
  "$hosts" exec "$i" "$bin/omxfs" "h0:$ex" "$mnt" -f -o "timeout=5$opts" >>"$log/client$i" 2>&1 &
  client_pid=$!
  bgpids+=("$client_pid")
  mounts+=("$client_pid:$mnt")
  until nsenter -t "$client_pid" -m findmnt -n "$mnt" >/dev/null 2>&1; do
    kill -0 "$client_pid" 2>/dev/null || return 1
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.1
  done
}

# server_counter NAME: one of the server's counters (requests by operation too: Lookup),
# printed on SIGUSR1 (a new line each time); 0 when not printed.
server_counter() {
  local before after deadline=$((SECONDS + 30))
  before=$(grep -c 'omxfsd: counters' "$log/server")
  kill -USR1 "$server_pid" || return 1
  while after=$(grep -c 'omxfsd: counters' "$log/server"); [ "$after" -le "$before" ]; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.1
  done
  grep 'omxfsd: counters' "$log/server" | tail -n 1 | sed -n "s/.* $1=\\([0-9]*\\).*/\\1/p" | grep . || echo 0
}
malformed_count() { server_counter malformed; }

# on PID CMD...: CMD in the mount namespace of omxfs process PID.
on() {
  local p=$1
  shift
  timeout -k 5 "$TEST_TIMEOUT" nsenter -t "$p" -m "$@"
}

cleanup_mounts() {
  local m
  for m in "${mounts[@]}"; do nsenter -t "${m%%:*}" -m fusermount3 -u -z "${m#*:}" 2>/dev/null; done
}
trap 'cleanup_mounts; runner_cleanup' EXIT

start_server "$tmp/export/ro"
mount_on 1 "$tmp/m1" data || { report mount 1 "$log/server" "$log/client1"; summary; exit 1; }
c1=$client_pid
m="$tmp/m1"

if want exerciser; then
  on "$c1" mkdir "$m/ex" && on "$c1" python3 "$here/exercise.py" "$m/ex" "$tmp/ref/ex" 11 200 >"$log/ex" 2>&1
  report exerciser $? "$log/ex"
fi
if want exerciser-procs; then
  # Four processes at once: own subtrees plus stripes of one shared file.
  on "$c1" python3 "$here/exercise.py" "$m/exp" "$tmp/ref/exp" 21 60 4 >"$log/exp" 2>&1
  report exerciser-procs $? "$log/exp"
fi
if want one-dir-procs; then
  # Four processes creating, renaming, linking and unlinking in one directory through
  # one mount, served at once by the client and the server's threads (tests/fs/onedir.py).
  on "$c1" python3 "$here/onedir.py" "$m/onedir" "$tmp/export/data/onedir" 41 150 4 >"$log/onedir" 2>&1
  report one-dir-procs $? "$log/onedir"
fi
if want exerciser-faults; then
  mount_on 2 "$tmp/m2" data || true
  # The second client's frames are lost, duplicated and reordered.
  kill "$client_pid" 2>/dev/null; wait "$client_pid" 2>/dev/null
  on "$c1" fusermount3 -u -z "$tmp/m2" 2>/dev/null
  OMX_FAULTS=loss:0.02,dup:0.02,reorder:0.05 mount_on 2 "$tmp/m2" data &&
    on "$client_pid" python3 "$here/exercise.py" "$tmp/m2/exf" "$tmp/ref/exf" 12 120 >"$log/exf" 2>&1 &&
    on "$client_pid" python3 "$here/exercise.py" "$tmp/m2/exfp" "$tmp/ref/exfp" 31 40 3 >>"$log/exf" 2>&1 &&
    on "$client_pid" python3 "$here/onedir.py" "$tmp/m2/onedirf" "$tmp/export/data/onedirf" 51 60 3 >>"$log/exf" 2>&1
  report exerciser-faults $? "$log/exf" "$log/client2"
fi
if want posix; then
  # Edge cases of POSIX/Linux semantics (tests/fs/posix.py: open files unlinked or
  # renamed over, O_APPEND, holes, fallocate modes, link counts, utimensat, umask,
  # set-group-ID directories, long and odd names, readdir while changing, rename
  # errors and flags, mmap, locks, open flags, xattrs): the transcript on the mount
  # equals the one in a local directory of the export's own file system.
  on "$c1" python3 "$here/posix.py" "$m/posix" >"$log/posix.mnt" 2>&1
  python3 "$here/posix.py" "$tmp/ref/posix" >"$log/posix.ref" 2>&1
  diff "$log/posix.ref" "$log/posix.mnt" >"$log/posix.diff"
  report posix $? "$log/posix.diff"
fi
if want programs; then
  # Real programs (tests/fs/programs.sh: execve of scripts and binaries on the mount,
  # touch/find with times before 1970, make twice, mmap MAP_SHARED between processes,
  # sqlite3 in both journal modes with two writers, python3 -m venv and its pip, sparse
  # copies and punched holes): the transcript on the mount equals the local one.
  on "$c1" bash "$here/programs.sh" "$m/programs" >"$log/programs.mnt" 2>&1
  bash "$here/programs.sh" "$tmp/ref/programs" >"$log/programs.ref" 2>&1
  diff "$log/programs.ref" "$log/programs.mnt" >"$log/programs.diff"
  report programs $? "$log/programs.diff"
fi
if want two-clients; then
  # Two mounts of one export (h1 and h2, default cache timeouts): close-to-open, renames
  # and unlinks on one seen by the other, files deleted or renamed over on one while open
  # on the other (tests/fs/twoclients.py). One process uses both: the second mount through
  # /proc/PID/root of its omxfs's mount namespace. The transcript equals the one of the
  # same local directory used twice.
  mkdir -p "$tmp/m7" "$tmp/ref/tc2"
  if mount_on 2 "$tmp/m7" data; then
    on "$c1" python3 "$here/twoclients.py" "$m" "/proc/$client_pid/root$tmp/m7" >"$log/tc.mnt" 2>&1
    python3 "$here/twoclients.py" "$tmp/ref/tc2" "$tmp/ref/tc2" >"$log/tc.ref" 2>&1
    diff "$log/tc.ref" "$log/tc.mnt" >"$log/tc.diff"
    report two-clients $? "$log/tc.diff" "$log/client2"
  else
    report two-clients 1 "$log/client2"
  fi
fi
if want tar; then
  (cd "$root" && git ls-files -z crates docs | tar --null -T - -cf "$tmp/src.tar") &&
    on "$c1" sh -c "mkdir $m/tar && tar -xf $tmp/src.tar -C $m/tar && cd $m/tar && find . -type f -print0 | sort -z | xargs -0 sha256sum" >"$log/tar.mnt" &&
    (mkdir "$tmp/tarref" && tar -xf "$tmp/src.tar" -C "$tmp/tarref" && cd "$tmp/tarref" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$log/tar.ref" &&
    cmp "$log/tar.mnt" "$log/tar.ref" &&
    on "$c1" tar -C "$m/tar" -cf "$m/again.tar" . && on "$c1" tar -tf "$m/again.tar" >/dev/null &&
    cmp <(tar -tf "$tmp/export/data/again.tar" | sort) <(tar -C "$tmp/tarref" -cf - . | tar -tf - | sort)
  report tar $? "$log/tar.mnt"
fi
if want xattr; then
  # Extended attributes through the client's cache of absent ones: a name found absent,
  # then set, is seen at once; a removed one is gone; a file capability set on the
  # server is dropped by a write through the mount (as a local write drops it).
  printf 'x' >"$tmp/export/data/capf"
  python3 -c 'import os, struct, sys
os.setxattr(sys.argv[1], "security.capability", struct.pack("<IIIII", 0x02000001, 1 << 12, 0, 0, 0))' "$tmp/export/data/capf" &&
    on "$c1" python3 - "$m" >"$log/xattr" 2>&1 <<'PY'
import errno, os, sys
m = sys.argv[1]
f = f"{m}/xa"
open(f, "w").close()
def absent(path, name):
    try:
        os.getxattr(path, name)
    except OSError as e:
        return e.errno == errno.ENODATA
    return False
assert absent(f, "user.k"), "a new file has no user.k"
os.setxattr(f, "user.k", b"v1")
assert os.getxattr(f, "user.k") == b"v1", "set after a cached absence not seen"
assert "user.k" in os.listxattr(f)
os.removexattr(f, "user.k")
assert absent(f, "user.k"), "removed attribute still seen"
os.setxattr(f, "user.k", b"v2")
assert os.getxattr(f, "user.k") == b"v2"
with open(f"{m}/capf", "r+") as c:
    c.write("y")
print("ok")
PY
  rc=$?
  [ $rc = 0 ] && ! python3 -c 'import os, sys; os.getxattr(sys.argv[1], "security.capability")' "$tmp/export/data/capf" 2>/dev/null &&
    [ "$(python3 -c 'import os, sys; print(os.getxattr(sys.argv[1], "user.k").decode())' "$tmp/export/data/xa")" = v2 ]
  report xattr $? "$log/xattr"
fi
if want listing; then
  # Listings of one page (it comes with the open), of many pages, and empty: every
  # name once, as the server has them, also when read again through one descriptor.
  mkdir -p "$tmp/export/data/big" "$tmp/export/data/empty" "$tmp/export/data/one"
  for i in $(seq 1 1500); do : >"$tmp/export/data/big/entry-with-a-longish-name-$i"; done
  : >"$tmp/export/data/one/only"
  on "$c1" python3 - "$m" "$tmp/export/data" >"$log/listing" 2>&1 <<'PY'
import os, sys
m, ref = sys.argv[1:]
for d in ("big", "empty", "one"):
    want = sorted(os.listdir(f"{ref}/{d}"))
    assert sorted(os.listdir(f"{m}/{d}")) == want, f"{d}: listing differs"
    fd = os.open(f"{m}/{d}", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(2):  # read to the end, rewind, read again
            os.lseek(fd, 0, os.SEEK_SET)
            got = sorted(e.name for e in os.scandir(fd))
            assert got == want, f"{d}: listing through one descriptor differs"
    finally:
        os.close(fd)
    assert all(os.lstat(f"{m}/{d}/{n}").st_size == 0 for n in want)
# getdents64 with buffers of 4 KiB and 1 KiB (the client's pages shrink to what the
# kernel's buffer takes, then 32 KiB ones again): every name once.
import ctypes
getdents = {"x86_64": 217, "aarch64": 61}[os.uname().machine]
libc = ctypes.CDLL(None, use_errno=True)
for size in (4096, 1024, 32768):
    fd, buf, got = os.open(f"{m}/big", os.O_RDONLY | os.O_DIRECTORY), ctypes.create_string_buffer(size), []
    while (r := libc.syscall(getdents, fd, buf, size)) > 0:
        pos = 0
        while pos < r:
            reclen = int.from_bytes(buf.raw[pos + 16:pos + 18], "little")
            got.append(buf.raw[pos + 19:pos + reclen].split(b"\0")[0].decode())
            pos += reclen
    os.close(fd)
    assert r == 0, f"getdents64: {ctypes.get_errno()}"
    got = sorted(n for n in got if n not in (".", ".."))
    assert got == sorted(os.listdir(f"{ref}/big")), f"getdents64 of {size} bytes: listing differs"
print("ok")
PY
  report listing $? "$log/listing"
fi
if want listed-xattrs; then
  # A listing says which entries have no extended attributes at all: `ls -l` of 300
  # files asks the server no GETXATTR for them (it asked two per file, ACL and
  # security label), while a file given an attribute on the server shows it, and one
  # set and removed through the mount is seen at once.
  mkdir -p "$tmp/export/data/lx" && for i in $(seq 1 300); do : >"$tmp/export/data/lx/f$i"; done &&
    python3 -c 'import os, sys; os.setxattr(sys.argv[1], "user.k", b"server")' "$tmp/export/data/lx/f7" &&
    g0=$(server_counter Getxattr) && on "$c1" ls -l "$m/lx" >/dev/null && g1=$(server_counter Getxattr) &&
    echo "GETXATTR requests for ls -l of 300 files: $((g1 - g0))" >"$log/listed-xattrs" &&
    [ $((g1 - g0)) -le 10 ] &&
    on "$c1" python3 - "$m/lx" >>"$log/listed-xattrs" 2>&1 <<'PY'
import errno, os, sys
d = sys.argv[1]
assert os.getxattr(f"{d}/f7", "user.k") == b"server", "an attribute set on the server not seen"
def absent(p):
    try:
        os.getxattr(p, "user.k")
    except OSError as e:
        return e.errno == errno.ENODATA
    return False
assert absent(f"{d}/f8")
os.setxattr(f"{d}/f8", "user.k", b"mine")
assert os.getxattr(f"{d}/f8", "user.k") == b"mine", "set through the mount not seen"
os.removexattr(f"{d}/f8", "user.k")
assert absent(f"{d}/f8"), "removed attribute still seen"
print("ok")
PY
  report listed-xattrs $? "$log/listed-xattrs"
fi
if want attrs; then
  # What tar does to each file (write, utimens, chown, chmod, close), stat'ed between
  # steps on the mount and on the server: the client's kept attributes (a chown's
  # GETATTR is answered from the setattr before) never show an older state.
  on "$c1" python3 - "$m" "$tmp/export/data" >"$log/attrs" 2>&1 <<'PY'
import os, sys
m, ref = sys.argv[1:]
def same(name, step):
    a, b = os.stat(f"{m}/{name}"), os.stat(f"{ref}/{name}")
    for f in ("st_size", "st_mode", "st_uid", "st_gid", "st_mtime_ns", "st_nlink"):
        assert getattr(a, f) == getattr(b, f), f"{name} after {step}: {f} {getattr(a, f)} != {getattr(b, f)}"
for i in range(20):
    name = f"at{i}"
    fd = os.open(f"{m}/{name}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.write(fd, b"x" * (100 + i)); same(name, "write")
    os.utime(fd, ns=(10**18, 10**18 + i)); same(name, "utime")
    os.fchown(fd, 1000 + i, 1000); same(name, "chown")
    os.fchmod(fd, 0o644); same(name, "chmod")
    os.write(fd, b"y"); same(name, "second write")
    os.ftruncate(fd, 7); same(name, "truncate")
    os.close(fd); same(name, "close")
print("ok")
PY
  report attrs $? "$log/attrs"
fi
if want dir-attrs; then
  # Entry changes bring the directory's attributes after them, which the client keeps
  # for the kernel's GETATTR that follows (no round trip): a stat of the directory
  # between creates, unlinks, renames and mkdirs, done one after another and several at
  # once, always shows the server's (mtime, ctime, nlink, size).
  on "$c1" python3 - "$m/da" "$tmp/export/data/da" >"$log/dir-attrs" 2>&1 <<'PY'
import os, sys, threading
m, ref = sys.argv[1:]
os.mkdir(m)
def same(step):
    a, b = os.stat(m), os.stat(ref)
    for f in ("st_mtime_ns", "st_ctime_ns", "st_nlink", "st_size", "st_mode"):
        assert getattr(a, f) == getattr(b, f), f"after {step}: {f} {getattr(a, f)} != {getattr(b, f)}"
for i in range(30):
    os.close(os.open(f"{m}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644)); same(f"create f{i}")
    if i % 3 == 0:
        os.mkdir(f"{m}/d{i}"); same(f"mkdir d{i}")
    if i % 2 == 0:
        os.rename(f"{m}/f{i}", f"{m}/r{i}"); same(f"rename f{i}")
        os.unlink(f"{m}/r{i}"); same(f"unlink r{i}")
def churn(t):
    for i in range(40):
        os.close(os.open(f"{m}/t{t}-{i}", os.O_CREAT | os.O_WRONLY, 0o644))
        os.unlink(f"{m}/t{t}-{i}")
ts = [threading.Thread(target=churn, args=(t,)) for t in range(4)]
for t in ts: t.start()
for t in ts: t.join()
same("concurrent creates and unlinks")
print("ok")
PY
  report dir-attrs $? "$log/dir-attrs"
fi
if want release-batch; then
  # Closes of files never locked are answered at once and released on the server in
  # batches: 200 creates and closes cost far fewer RELEASE requests, and every handle
  # is closed on the server soon after (its descriptors back to what they were).
  fds() { find "/proc/$server_pid/fd" -mindepth 1 -maxdepth 1 | wc -l; }
  fd0=$(fds) && r0=$(server_counter Release) &&
    on "$c1" python3 -c '
import os, sys
os.mkdir(sys.argv[1])
for i in range(200):
    os.close(os.open(f"{sys.argv[1]}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644))' "$m/rb" >"$log/release-batch" 2>&1 &&
    deadline=$((SECONDS + 30)) &&
    until [ "$(fds)" -le "$fd0" ]; do [ "$SECONDS" -lt "$deadline" ] || break; sleep 0.05; done &&
    r1=$(server_counter Release) &&
    echo "server descriptors $fd0 -> $(fds); RELEASE requests for 200 closes: $((r1 - r0))" >>"$log/release-batch" &&
    [ "$(fds)" -le "$fd0" ] && [ $((r1 - r0)) -ge 1 ] && [ $((r1 - r0)) -le 50 ]
  report release-batch $? "$log/release-batch"
fi
if want made-dir; then
  # In a directory the client made itself, names it did not make are answered absent
  # without asking, for entry_timeout (1 s) at most: a file another writer puts there
  # is opened by O_CREAT as it is (not truncated, no EEXIST), refused by O_EXCL, and
  # seen by lookups once the timeout is past.
  on "$c1" mkdir "$m/made" && echo theirs >"$tmp/export/data/made/x" &&
    on "$c1" python3 - "$m/made" "$tmp/export/data/made" >"$log/made-dir" 2>&1 <<'PY'
import errno, os, sys, time
m, ref = sys.argv[1:]
fd = os.open(f"{m}/x", os.O_CREAT | os.O_RDWR, 0o644)
assert os.read(fd, 100) == b"theirs\n", "O_CREAT of an existing file lost its contents"
os.close(fd)
open(f"{ref}/y", "w").close()
try:
    os.close(os.open(f"{m}/y", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    raise AssertionError("O_EXCL of an existing file succeeded")
except FileExistsError:
    pass
open(f"{ref}/z", "w").close()
deadline = time.monotonic() + 30
while not os.path.exists(f"{m}/z"):
    assert time.monotonic() < deadline, "a name made by another writer never seen"
    time.sleep(0.1)
print("ok")
PY
  report made-dir $? "$log/made-dir"
fi
if want dir-stamps; then
  # A directory the client made stays known complete past entry_timeout while each of
  # its own changes there finds it as it left it (the server's stamps): no lookups
  # asked during 2.5 s of creates, nor by the unlinks of those files after (the
  # kernel's entries of the first ones expired: it looks each name up before its
  # unlink, answered by the client). A name another client adds is seen by the first
  # client as soon as its next change there (the stamps differ), without waiting.
  mkdir -p "$tmp/m4" && mount_on 2 "$tmp/m4" data && c4=$client_pid &&
    on "$c1" mkdir "$m/stamped" && l0=$(server_counter Lookup) &&
    on "$c1" python3 -c '
import os, sys, time
os.chdir(sys.argv[1])  # relative names: no lookup of the directory itself
end, i = time.monotonic() + 2.5, 0
while time.monotonic() < end:
    os.close(os.open(f"f{i}", os.O_CREAT | os.O_WRONLY, 0o644)); i += 1
for j in range(i): os.unlink(f"f{j}")
print(i, "creates, then as many unlinks")' "$m/stamped" >"$log/dir-stamps" 2>&1 &&
    l1=$(server_counter Lookup) && echo "lookups asked: $((l1 - l0))" >>"$log/dir-stamps" &&
    [ "$l1" -eq "$l0" ] &&
    on "$c4" sh -c "echo theirs > $tmp/m4/stamped/x" &&
    on "$c1" sh -c "touch $m/stamped/mine && cat $m/stamped/x" >>"$log/dir-stamps" 2>&1 &&
    [ "$(tail -n 1 "$log/dir-stamps")" = theirs ]
  report dir-stamps $? "$log/dir-stamps"
fi
if want stale-name; then
  # A name deleted on the server while this client's kernel still holds it (a mount with
  # a 600 s entry timeout: the kernel keeps the name whatever the machine's speed): an
  # operation on the gone node gets ESTALE from the client, so the kernel looks the name
  # up again. open(O_CREAT) then creates a new file the server sees; open(), stat(),
  # truncate() and chmod() fail with ENOENT; a file another writer put in its place is
  # the one opened; a directory put in its place is seen as one by stat() and chmod().
  mkdir -p "$tmp/m6" && mount_on 2 "$tmp/m6" data entry_timeout=600,attr_timeout=0 &&
    on "$client_pid" python3 - "$tmp/m6/stale" "$tmp/export/data/stale" >"$log/stale-name" 2>&1 <<'PY'
import errno, os, sys
m, srv = sys.argv[1:]
os.mkdir(m)
def made(name):  # created through the mount, its name cached, deleted on the server
    with open(f"{m}/{name}", "w") as f:
        f.write("old contents\n")
    os.stat(f"{m}/{name}")
    os.unlink(f"{srv}/{name}")
def enoent(what, call):
    try:
        call()
    except FileNotFoundError:
        return
    except OSError as e:
        raise AssertionError(f"{what}: {e}, not ENOENT")
    raise AssertionError(f"{what} of a name deleted on the server succeeded")
made("c")
fd = os.open(f"{m}/c", os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"new\n")
os.close(fd)
with open(f"{srv}/c", "rb") as f:
    got = f.read()
assert got == b"new\n", f"the server has {got!r}"
assert os.stat(f"{m}/c").st_size == 4
made("o")
enoent("open", lambda: os.close(os.open(f"{m}/o", os.O_RDONLY)))
assert not os.path.exists(f"{srv}/o"), "a plain open created the file"
made("s")
enoent("stat", lambda: os.stat(f"{m}/s"))
made("t")
enoent("truncate", lambda: os.truncate(f"{m}/t", 0))
made("h")
enoent("chmod", lambda: os.chmod(f"{m}/h", 0o600))
made("r")
with open(f"{srv}/r", "w") as f:
    f.write("theirs\n")
with open(f"{m}/r") as f:
    got = f.read()
assert got == "theirs\n", f"read {got!r}"
made("k")  # a directory in its place: seen as one (the kernel's GETATTR gave EIO)
os.mkdir(f"{srv}/k")
assert os.path.isdir(f"{m}/k"), "a file replaced by a directory not seen as one"
made("j")
os.mkdir(f"{srv}/j")
os.chmod(f"{m}/j", 0o700)
assert os.stat(f"{m}/j").st_mode == 0o40700, oct(os.stat(f"{m}/j").st_mode)
print("ok")
PY
  report stale-name $? "$log/stale-name" "$log/client2"
fi
if want keep-cache; then
  # Close-to-open with kept pages: a re-read of a file unchanged since its pages were
  # cached is served by the client's kernel (no READ reaches the server); a file
  # changed on the server (same size: only the mtime says so) or by another client
  # (appended to) is read anew at the next open.
  f=$tmp/export/data/kc
  head -c 300000 /dev/urandom >"$f" && touch -d 2001-01-01 "$f" &&
    sum() { on "$1" sha256sum "$2" | cut -d' ' -f1; } &&
    [ "$(sum "$c1" "$m/kc")" = "$(sha256sum <"$f" | cut -d' ' -f1)" ] &&
    r0=$(server_counter Read) && s1=$(sum "$c1" "$m/kc") && r1=$(server_counter Read) &&
    echo "reads asked by the re-read: $((r1 - r0))" >"$log/keep-cache" &&
    [ "$r1" -eq "$r0" ] && [ "$s1" = "$(sha256sum <"$f" | cut -d' ' -f1)" ] &&
    python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(1000); f.write(b"changed on the server")' "$f" &&
    [ "$(sum "$c1" "$m/kc")" = "$(sha256sum <"$f" | cut -d' ' -f1)" ] &&
    r2=$(server_counter Read) && [ "$r2" -gt "$r1" ] &&
    mkdir -p "$tmp/m5" && mount_on 2 "$tmp/m5" data && c5=$client_pid &&
    on "$c5" sh -c "echo appended by another client >> $tmp/m5/kc" &&
    want_sum=$(sha256sum <"$f" | cut -d' ' -f1) && deadline=$((SECONDS + 30)) &&
    # The kernel learns the new size when its attributes expire (attr_timeout).
    until [ "$(sum "$c1" "$m/kc")" = "$want_sum" ]; do [ $SECONDS -lt $deadline ] || break; sleep 0.1; done &&
    [ "$(on "$c1" tail -c 27 "$m/kc")" = 'appended by another client' ] &&
    on "$c5" python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(5); f.write(b"XYZ")' "$tmp/m5/kc" &&
    [ "$(on "$c1" head -c 8 "$m/kc" | tail -c 3)" = XYZ ]
  report keep-cache $? "$log/keep-cache"
fi
if want links-two-filesystems; then
  # Two file systems mounted inside the export, each with a file of two links at the
  # same inode number: the client must never take them for one file (hard links share
  # a node by the server's file identity, which mixes in the device). Mounted in the
  # server's mount namespace (gone with it).
  spid=$(pgrep -f "omxfsd --lease 4 $tmp/export/data" | tail -n 1)
  ino() { on "$c1" stat -c %i "$@"; }
  (
    for x in fa fb; do
      d="$tmp/export/data/$x"
      nsenter -t "$spid" -m sh -c "mkdir $d && mount -t tmpfs -o size=1m omxfstest $d && echo 'file of $x' >$d/f && ln $d/f $d/g" || exit 1
    done
    same=$(nsenter -t "$spid" -m stat -c %i "$tmp/export/data/fa/f" "$tmp/export/data/fb/f" | uniq | wc -l)
    echo "server inode numbers alike: $same" && [ "$same" = 1 ] &&
      on "$c1" cat "$m/fa/f" "$m/fb/g" "$m/fa/g" "$m/fb/f" &&
      [ "$(ino "$m/fa/f")" = "$(ino "$m/fa/g")" ] && [ "$(ino "$m/fb/f")" = "$(ino "$m/fb/g")" ] &&
      [ "$(ino "$m/fa/f")" != "$(ino "$m/fb/f")" ] && echo "inode numbers as expected"
  ) >"$log/twofs" 2>&1 && printf 'file of fa\nfile of fb\nfile of fa\nfile of fb\n' | cmp - <(grep '^file of' "$log/twofs")
  report links-two-filesystems $? "$log/twofs"
fi
if want cp-rsync; then
  on "$c1" cp -a "$root/crates/omx-fs" "$m/cpa" &&
    diff -r "$root/crates/omx-fs" "$tmp/export/data/cpa" &&
    on "$c1" rsync -a --checksum "$root/crates/omx-proto/" "$m/rs/" &&
    diff -r "$root/crates/omx-proto" "$tmp/export/data/rs" >"$log/rsync" 2>&1 &&
    on "$c1" rsync -a --delete "$root/crates/omx-wire/" "$m/rs/" &&
    diff -r "$root/crates/omx-wire" "$tmp/export/data/rs" >>"$log/rsync" 2>&1
  report cp-rsync $? "$log/rsync"
fi
if want git; then
  on "$c1" sh -c "mkdir $m/repo && cd $m/repo && git init -q && git config user.email t@t && git config user.name t &&
    cp -a $root/crates/omx-fs/src . && git add -A && git commit -qm one && echo x >> src/lib.rs && git commit -qam two &&
    git log --oneline | wc -l | grep -qx 2 && git fsck --full --strict" >"$log/git" 2>&1
  report git $? "$log/git"
fi
if want dd; then
  mib=${OMXFS_DD_MIB:-1024}
  on "$c1" dd if=/dev/urandom of="$m/dd" bs=1M count="$mib" status=none &&
    [ "$(on "$c1" sha256sum <"$tmp/export/data/dd")" = "$(on "$c1" sha256sum "$m/dd" | cut -d' ' -f1)  -" ] &&
    on "$c1" dd if="$m/dd" of=/dev/null bs=1M status=none
  report dd $? "$log/client1"
fi
if want fio; then
  if command -v fio >/dev/null; then
    on "$c1" fio --name=v --directory="$m" --size=32M --bs=4k --rw=randwrite --ioengine=psync \
      --verify=crc32c --do_verify=1 --iodepth=1 --numjobs=2 >"$log/fio" 2>&1
    report fio $? "$log/fio"
  else
    skip fio "fio not installed"
  fi
fi
if want block; then
  # A disk image on the mount as a loop device (the network block device case): ext4 on
  # it, filled with files checked after a remount, then a clean fsck. Everything runs in
  # the client's mount namespace; the loop device is detached on every path.
  if command -v losetup >/dev/null && command -v mkfs.ext4 >/dev/null && command -v fsck.ext4 >/dev/null; then
    OMXFS_BLOCK_MIB=${OMXFS_BLOCK_MIB:-1024} on "$c1" bash "$here/block.sh" "$m/disk.img" "$tmp/blk" >"$log/block" 2>&1
    report block $? "$log/block"
  else
    skip block "losetup, mkfs.ext4 or fsck.ext4 not installed"
  fi
fi
if want locks-two-hosts; then
  # h1 takes a write lock; h2's F_SETLK is refused, its F_SETLKW waits until h1 unlocks;
  # a killed lock holder's locks go with its session.
  mount_on 2 "$tmp/m2" data 2>/dev/null || [ -n "$(nsenter -t "$client_pid" -m findmnt -n "$tmp/m2")" ]
  c2=$client_pid
  on "$c1" sh -c "echo data > $m/lockf"
  python3 - "$c1" "$c2" "$m/lockf" "$tmp/m2/lockf" >"$log/locks" 2>&1 <<'PY'
import fcntl, os, subprocess, sys
c1, c2, f1, f2 = sys.argv[1:]
def run(pid, code):
    return subprocess.Popen(["nsenter", "-t", pid, "-m", "python3", "-c", code],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
holder = run(c1, f"""
import fcntl, sys
f = open({f1!r}, 'r+'); fcntl.lockf(f, fcntl.LOCK_EX); print('held', flush=True)
sys.stdin.readline(); fcntl.lockf(f, fcntl.LOCK_UN); print('released', flush=True); sys.stdin.readline()
""")
assert holder.stdout.readline().strip() == 'held'
probe = run(c2, f"""
import fcntl
f = open({f2!r}, 'r+')
try:
    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB); print('got')
except OSError: print('refused')
""")
assert probe.stdout.readline().strip() == 'refused', 'non-blocking lock not refused'
waiter = run(c2, f"""
import fcntl
f = open({f2!r}, 'r+'); print('waiting', flush=True); fcntl.lockf(f, fcntl.LOCK_EX); print('granted', flush=True)
""")
assert waiter.stdout.readline().strip() == 'waiting'
holder.stdin.write('\n'); holder.stdin.flush()
assert holder.stdout.readline().strip() == 'released'
assert waiter.stdout.readline().strip() == 'granted', 'blocked lock not granted'
waiter.wait(); holder.stdin.write('\n'); holder.stdin.flush(); holder.wait()
# flock(2) between the two clients: refused while held, granted once the holder closes.
holder = run(c1, f"""
import fcntl, sys
f = open({f1!r}); fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True)
sys.stdin.readline(); f.close(); print('closed', flush=True)
""")
assert holder.stdout.readline().strip() == 'held'
probe = f"""
import fcntl
f = open({f2!r})
try:
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB); print('got')
except OSError: print('refused')
"""
assert run(c2, probe).stdout.readline().strip() == 'refused', 'flock not refused'
holder.stdin.write('\n'); holder.stdin.flush()
assert holder.stdout.readline().strip() == 'closed'
holder.wait()
assert run(c2, probe).stdout.readline().strip() == 'got', 'flock not released by close'
# An F_SETLKW interrupted by a signal returns EINTR and its wait is withdrawn on the
# server: once the holder unlocks, nobody holds the lock (a third process gets it).
holder = run(c1, f"""
import fcntl, sys
f = open({f1!r}, 'r+'); fcntl.lockf(f, fcntl.LOCK_EX); print('held', flush=True)
sys.stdin.readline(); fcntl.lockf(f, fcntl.LOCK_UN); print('released', flush=True); sys.stdin.readline()
""")
assert holder.stdout.readline().strip() == 'held'
waiter = run(c2, f"""
import fcntl, signal, sys
class Interrupted(Exception): pass
def stop(*_): raise Interrupted()
signal.signal(signal.SIGUSR1, stop)
f = open({f2!r}, 'r+'); print('waiting', flush=True)
try:
    fcntl.lockf(f, fcntl.LOCK_EX); print('granted', flush=True)
except Interrupted: print('interrupted', flush=True)
sys.stdin.readline()
""")
assert waiter.stdout.readline().strip() == 'waiting'
import os, signal, time
# Signalled once blocked in fcntl (its request then sits on the server as a waiter).
fcntl_nr = {'x86_64': 72, 'aarch64': 25}[os.uname().machine]
while open(f'/proc/{waiter.pid}/syscall').read().split()[0] != str(fcntl_nr):
    time.sleep(0.05)
waiter.send_signal(signal.SIGUSR1)
assert waiter.stdout.readline().strip() == 'interrupted', 'F_SETLKW not interrupted'
holder.stdin.write('\n'); holder.stdin.flush()
assert holder.stdout.readline().strip() == 'released'
probe = f"""
import fcntl
f = open({f2!r}, 'r+')
try:
    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB); print('got')
except OSError: print('refused')
"""
assert run(c2, probe).stdout.readline().strip() == 'got', 'interrupted wait still granted'
waiter.stdin.write('\n'); waiter.stdin.flush(); waiter.wait()
holder.stdin.write('\n'); holder.stdin.flush(); holder.wait()
print('ok')
PY
  report locks-two-hosts $? "$log/locks" "$log/client2"
fi
if want locked-reads; then
  # What another client wrote under its lock is read under the next lock, though this
  # client cached the old pages (a lock taken drops them): a file read on h1, changed
  # by h2 under a lock, read again on h1 under a lock; then SQLite (rollback journal)
  # with writers on both hosts at once: every row of both is there. Both once read the
  # old pages (h2's transactions silently undone).
  mount_on 2 "$tmp/m2" data 2>/dev/null || [ -n "$(nsenter -t "$client_pid" -m findmnt -n "$tmp/m2")" ]
  c2=$client_pid
  on "$c1" python3 - "$m/lr" "$c2" "$tmp/m2/lr" >"$log/locked-reads" 2>&1 <<'PY'
import fcntl, os, subprocess, sys
mine, c2, theirs = sys.argv[1:]
with open(mine, "wb") as f:
    f.write(b"0" * 8192)
fd = os.open(mine, os.O_RDWR)
assert os.pread(fd, 4, 4096) == b"0000"  # cached here
subprocess.run(["nsenter", "-t", c2, "-m", "python3", "-c", f"""
import fcntl, os
fd = os.open({theirs!r}, os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX); os.pwrite(fd, b"BBBB", 4096); fcntl.lockf(fd, fcntl.LOCK_UN)
"""], check=True)
fcntl.lockf(fd, fcntl.LOCK_SH)
got = os.pread(fd, 4, 4096)
assert got == b"BBBB", f"read under a lock after the other client's write: {got!r}"
print("ok")
PY
  rc=$?
  if [ $rc = 0 ] && command -v sqlite3 >/dev/null; then
    inserts() { for i in $(seq 1 150); do echo "INSERT INTO t(s) VALUES('$1');"; done; }
    on "$c1" sqlite3 "$m/lr.db" "CREATE TABLE t(id INTEGER PRIMARY KEY, s TEXT)" &&
      { inserts a | on "$c1" sqlite3 -cmd ".timeout 60000" "$m/lr.db" & p1=$!
        inserts b | on "$c2" sqlite3 -cmd ".timeout 60000" "$tmp/m2/lr.db" & p2=$!
        wait $p1 && wait $p2; } >>"$log/locked-reads" 2>&1 &&
      got=$(on "$c1" sqlite3 "$m/lr.db" "PRAGMA integrity_check; SELECT s, count(*) FROM t GROUP BY s" | tr '\n' ' ') &&
      echo "sqlite: $got" >>"$log/locked-reads" && [ "$got" = "ok a|150 b|150 " ]
    rc=$?
  fi
  report locked-reads $rc "$log/locked-reads" "$log/client2"
fi
if want append-two-hosts; then
  # O_APPEND writers on two hosts at once into one file (a shared log): every byte of
  # both is there (records of 100 B and 60 KiB, each writer's of its own letter; a
  # large one may be split by its client's kernel into several writes, which then
  # interleave with the other host's), and both mounts read what the server has. Each
  # client's kernel chose the offset from its cached size: the other client's records
  # since were overwritten (301 lines of 600 were left).
  mount_on 2 "$tmp/m2" data 2>/dev/null || [ -n "$(nsenter -t "$client_pid" -m findmnt -n "$tmp/m2")" ]
  c2=$client_pid
  appender='import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
for size, n in ((100, 150), (61440, 20)):
    for i in range(n):
        rec = sys.argv[2].encode() * (size - 1) + b"\n"
        assert os.write(fd, rec) == len(rec)
os.close(fd)'
  { on "$c1" python3 -c "$appender" "$m/shared.log" a & p1=$!
    on "$c2" python3 -c "$appender" "$tmp/m2/shared.log" b & p2=$!
    wait $p1 && wait $p2; } >"$log/append" 2>&1 &&
    python3 - "$tmp/export/data/shared.log" >>"$log/append" 2>&1 <<'PY' &&
import sys
data = open(sys.argv[1], "rb").read()
each = 150 * 99 + 20 * 61439
print(len(data), "bytes:", data.count(b"a"), "of a,", data.count(b"b"), "of b; each wrote", each)
assert len(data) == 2 * (each + 170) and data.count(b"a") == each and data.count(b"b") == each
PY
    sum=$(sha256sum <"$tmp/export/data/shared.log" | cut -d' ' -f1) &&
    [ "$(on "$c1" sha256sum "$m/shared.log" | cut -d' ' -f1)" = "$sum" ] &&
    [ "$(on "$c2" sha256sum "$tmp/m2/shared.log" | cut -d' ' -f1)" = "$sum" ]
  report append-two-hosts $? "$log/append" "$log/client2"
fi
if want escape; then
  ln -s /etc "$tmp/export/data/abs"
  ln -s ../../.. "$tmp/export/data/up"
  echo secret >"$tmp/export/outside"
  # The server never resolves through a symlink (the client's kernel follows links on
  # the client) and refuses `..` and symlinked parents: crates/omx-fs export tests.
  [ "$(on "$c1" readlink "$m/abs")" = /etc ] &&
    [ "$(on "$c1" stat -c %F "$m/up")" = "symbolic link" ] &&
    [ ! -e "$tmp/export/outside-moved" ]
  report escape $? "$log/server"
fi
if want hostile; then
  # Garbage, truncated and out-of-range requests from a peer that is not omxfs: each
  # decodable one answered with an error, all counted, and the server keeps serving
  # (the tool ends with a write and read back, the mount is checked after).
  m0=$(malformed_count) &&
    in_host 2 "$bin/examples/omxfs_hostile" h0 data >"$log/hostile" 2>&1 &&
    sent=$(sed -n 's/^malformed sent: //p' "$log/hostile") && [ -n "$sent" ] &&
    for _ in $(seq 1 100); do
      m1=$(malformed_count) && [ "$((m1 - m0))" -ge "$sent" ] && break
      sleep 0.2
    done &&
    echo "malformed counter $m0 -> $m1 (sent $sent)" >>"$log/hostile" &&
    [ "$((m1 - m0))" -eq "$sent" ] &&
    on "$c1" sh -c "echo still > $m/after-hostile" && [ "$(cat "$tmp/export/data/after-hostile")" = still ]
  report hostile $? "$log/hostile" "$log/server"
fi
if want read-only; then
  echo ro >"$tmp/export/ro/r"
  kill "$server_pid"; wait "$server_pid" 2>/dev/null
  "$hosts" exec 0 "$bin/omxfsd" --read-only "$tmp/export/ro" >>"$log/server-ro" 2>&1 &
  rop=$!; bgpids+=("$rop")
  mkdir -p "$tmp/m3"
  mount_on 2 "$tmp/m3" ro && [ "$(on "$client_pid" cat "$tmp/m3/r")" = ro ] &&
    ! on "$client_pid" sh -c "echo x > $tmp/m3/w" 2>/dev/null
  report read-only $? "$log/server-ro" "$log/client2"
  kill "$rop"; wait "$rop" 2>/dev/null
  start_server
fi
if want server-restart; then
  # A dead server gives EIO/ENOTCONN within the timeout, never a hang; after a restart
  # the client reconnects by itself.
  kill -9 "$server_pid"; wait "$server_pid" 2>/dev/null
  on "$c1" stat "$m/nonexistent-$$" >"$log/restart" 2>&1
  grep -Eq 'Input/output error|not connected|No such file' "$log/restart" &&
    start_server &&
    for _ in $(seq 1 100); do on "$c1" sh -c "echo back > $m/after" 2>/dev/null && break; sleep 0.2; done &&
    [ "$(cat "$tmp/export/data/after")" = back ]
  report server-restart $? "$log/restart" "$log/client1" "$log/server"
fi
if want reopen-after-restart; then
  # Files kept open across a server restart: the client reopens them by path in its
  # new session (reads and writes go on); one deleted meanwhile gives ESTALE. The
  # process goes on as soon as the new server serves: its first request finds the old
  # session gone and is made again in a new one.
  mkfifo "$tmp/reopen.in"
  on "$c1" python3 "$here/reopen.py" "$m" "$tmp/reopen.want" <"$tmp/reopen.in" >"$log/reopen" 2>&1 &
  rp=$!
  exec {go}>"$tmp/reopen.in"
  wait_for() { # wait_for CMD...: until CMD succeeds (60 s at most, while the process lives)
    local deadline=$((SECONDS + 60))
    until "$@"; do
      kill -0 "$rp" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ] || return 1
      sleep 0.1
    done
  }
  servings() { grep -c 'omxfsd: serving' "$log/server" || true; }
  serving() { [ "$(servings)" -gt "$before" ]; }
  wait_for grep -qx open "$log/reopen" &&
    before=$(servings) &&
    kill -9 "$server_pid" && { wait "$server_pid" 2>/dev/null; rm "$tmp/export/data/gone"; } &&
    start_server && wait_for serving &&
    echo go >&"$go" && exec {go}>&- &&
    wait "$rp" && grep -qx ok "$log/reopen" &&
    cmp "$tmp/export/data/kept" "$tmp/reopen.want"
  report reopen-after-restart $? "$log/reopen" "$log/client1" "$log/server"
  exec {go}>&- 2>/dev/null
fi
summary
