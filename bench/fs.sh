#!/usr/bin/env bash
# File systems between two namespace hosts (root; not a test): omxfs (omxfsd on h0,
# omxfs on h1) against sshfs (sshd on h0 with a throwaway key, sshfs on h1, Debian's
# defaults) and the local file system (the upper bound), side by side in one run, plus
# omx_perf's 1 MiB and 4 MiB ping-pong bandwidth at the same MTU (before the file systems and again
# after them: one run alone swings widely on a shared machine). The exported directories and the
# local one live on the same disk (/tmp). Prints CSV: fs,test,value,unit and writes it
# with a markdown table to OUT (default /tmp/omx-fs-bench.{csv,md}); bench/plot_fs.py OUT.csv
# plots it.
#
#   SIZE_MIB=1024   the sequential file; FIO_MIB=256 the random-read file, FIO_SECS=10
#   MTU=9000        link MTU; OUT=/tmp/omx-fs-bench
#   BIN=target/release  where omxfs, omxfsd and omx_perf are (an older build, to compare)
#   TMPFS=1         the exports and the local directory on tmpfs mounts instead of /tmp's
#                   disk: on this machine's journal-less ext4 every create scans past the
#                   inodes freed in the last minutes (recently_deleted(), 0.5-1.5 ms of
#                   server CPU per create, whoever freed them: the previous test, other
#                   users of /tmp), which swamps the file-system protocols being compared
#   EXT4=1          the exports and the local directory each on a fresh ext4 of its own (a
#                   4 GiB sparse image in /tmp on a loop device, mkfs.ext4's defaults: with a
#                   journal, as distributions make it, whose creates do not scan recently
#                   freed inodes; each file system starts from the same empty state)
#   TESTS="seq tree cd fio"  which parts run: seq the sequential file (and omx_perf's
#                   ping-pong), tree untar and the stat walk, cd the 10,000 creates/deletes,
#                   fio the random reads (TESTS=cd: only the creates/deletes)
#
# Cold reads drop the page cache of the whole machine (echo 3 > drop_caches): this
# benchmark must not run beside anything that needs its cache.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export OMX_NS_PREFIX=${OMX_NS_PREFIX:-omxfsbench}
H=scripts/hosts.sh
SIZE_MIB=${SIZE_MIB:-1024}
FIO_MIB=${FIO_MIB:-256}
FIO_SECS=${FIO_SECS:-10}
MTU=${MTU:-9000}
OUT=${OUT:-/tmp/omx-fs-bench}
BIN=${BIN:-target/release}
TESTS=" ${TESTS:-seq tree cd fio} "
want() { [[ $TESTS == *" $1 "* ]]; }
[ "$(id -u)" = 0 ] || { echo "fs.sh: needs root" >&2; exit 1; }
for c in sshfs fio nsenter ssh-keygen; do command -v $c >/dev/null || { echo "fs.sh: $c missing" >&2; exit 1; }; done
[ -x "$BIN/omxfs" ] && [ -x "$BIN/omx_perf" ] || { echo "fs.sh: build omx-fs and omx-tools --release" >&2; exit 1; }
tmp=$(mktemp -d /tmp/omx-fs-bench.XXXXXX)
export OMX_STATE_DIR=$tmp/state
mkdir -p "$OMX_STATE_DIR" "$tmp/export" "$tmp/sftp" "$tmp/local" "$tmp/m_omx" "$tmp/m_ssh"
mounts=()
if [ "${TMPFS:-0}" = 1 ]; then
  for d in "$tmp/export" "$tmp/sftp" "$tmp/local"; do mount -t tmpfs -o size=4g omxfsbench "$d" && mounts+=("$d"); done
elif [ "${EXT4:-0}" = 1 ]; then
  for d in "$tmp/export" "$tmp/sftp" "$tmp/local"; do
    truncate -s 4G "$d.img" && mkfs.ext4 -q -F "$d.img" && mount -o loop "$d.img" "$d" && mounts+=("$d")
  done
fi
mkdir -p "$tmp/export/data"
pids=()
cleanup() {
  [ -n "${cpid:-}" ] && nsenter -t "$cpid" -m sh -c "fusermount3 -u -z $tmp/m_ssh; fusermount3 -u -z $tmp/m_omx" 2>/dev/null
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  "$H" down >/dev/null 2>&1 || true
  for d in "${mounts[@]}"; do umount -l "$d" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$H" up 2 "$MTU" >/dev/null
ip0=$(ip netns exec "$OMX_NS_PREFIX-h0" ip -4 -o addr show scope global | awk '{sub("/.*","",$4); print $4; exit}')

# omx_perf at 1 MiB, the size of one omxfs read or write, and at 4 MiB: once before the
# file systems and once after them (one run alone swings 5-15x on a shared machine: the
# two bracket the sequential reads). Endpoint 5, apart from omxfsd's.
pingpong() {
  "$H" exec 0 "$BIN/omx_perf" -e 5 >/dev/null 2>&1 &
  local pp=$!
  sleep 0.5
  "$H" exec 1 "$BIN/omx_perf" -d h0:0 -r 5 -S 1048576 -E 4194305 -N 100 -W 10 >"$tmp/omx_perf.out"
  wait "$pp" 2>/dev/null || true
  echo "$(awk '$1 == 1048576 {print $3}' "$tmp/omx_perf.out") $(awk '$1 == 4194304 {print $3}' "$tmp/omx_perf.out")"
}
perf=NA perf4=NA
want seq && read -r perf perf4 < <(pingpong)

# omxfs.
"$H" exec 0 "$BIN/omxfsd" "$tmp/export/data" >"$tmp/omxfsd.log" 2>&1 &
spid=$!
pids+=("$spid")
"$H" exec 1 "$BIN/omxfs" h0:data "$tmp/m_omx" -f >"$tmp/omxfs.log" 2>&1 &
cpid=$!
pids+=("$cpid")
until nsenter -t "$cpid" -m findmnt -n "$tmp/m_omx" >/dev/null 2>&1; do sleep 0.1; done

# sshfs: sshd on h0 with a throwaway host and user key, sshfs in omxfs's mount namespace
# (and h1's network namespace) so one shell sees both mounts.
ssh-keygen -q -t ed25519 -N '' -f "$tmp/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$tmp/user_key"
cat >"$tmp/sshd_config" <<CFG
Port 2222
ListenAddress $ip0
HostKey $tmp/host_key
AuthorizedKeysFile $tmp/user_key.pub
PermitRootLogin yes
UsePAM no
StrictModes no
PidFile $tmp/sshd.pid
Subsystem sftp internal-sftp
CFG
mkdir -p /run/sshd
"$H" exec 0 "$(command -v sshd)" -D -e -f "$tmp/sshd_config" 2>"$tmp/sshd.log" &
sshd_pid=$!
pids+=("$sshd_pid")
for _ in $(seq 100); do ip netns exec "$OMX_NS_PREFIX-h0" ss -Hltn 'sport = :2222' | grep . >/dev/null && break; sleep 0.1; done
nsenter -t "$cpid" -m -n sshfs -f "root@$ip0:$tmp/sftp" "$tmp/m_ssh" -p 2222 \
  -o IdentityFile="$tmp/user_key",StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,LogLevel=ERROR \
  2>"$tmp/sshfs.log" &
sshfs_pid=$!
pids+=("$sshfs_pid")
until nsenter -t "$cpid" -m findmnt -n "$tmp/m_ssh" >/dev/null 2>&1; do
  kill -0 "$sshfs_pid" 2>/dev/null || { cat "$tmp/sshfs.log" "$tmp/sshd.log" >&2; exit 1; }
  sleep 0.1
done

on() { nsenter -t "$cpid" -m "$@"; }
now() { date +%s.%N; }
# CPU seconds (user + system) of a process and its descendants, as /proc/PID/stat has them.
cpu() {
  local total=0 p
  [ $# -gt 0 ] || { echo 0; return; }
  for p in "$@" $(for q in "$@"; do pgrep -P "$q"; done; for q in "$@"; do for c in $(pgrep -P "$q"); do pgrep -P "$c"; done; done); do
    [ -r "/proc/$p/stat" ] && total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  echo "$total"
}
hz=$(getconf CLK_TCK)
csv=$tmp/out.csv
echo "fs,test,value,unit" >"$csv"
put() { echo "$1,$2,$3,$4" | tee -a "$csv"; }
rate() { python3 -c "import sys; print(f'{float(sys.argv[1]) / (float(sys.argv[3]) - float(sys.argv[2])):.1f}')" "$@"; }
mb=$(python3 -c "print($SIZE_MIB * 1.048576)")
cpu_per_gib() { python3 -c "import sys; print(f'{(int(sys.argv[2]) - int(sys.argv[1])) / $hz / ($SIZE_MIB / 1024):.2f}')" "$@"; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }

(cd "$root" && git ls-files -z crates docs bench tests | tar --null -T - -cf "$tmp/src.tar")
nfiles=$(tar -tf "$tmp/src.tar" | grep -vc '/$')

for fs in local omxfs sshfs; do
  case $fs in
    local) d=$tmp/local cl=() sv=() ;;
    omxfs) d=$tmp/m_omx cl=("$cpid") sv=("$spid") ;;
    sshfs) d=$tmp/m_ssh cl=("$sshfs_pid") sv=("$sshd_pid") ;;
  esac
  # Sequential write and reads of one file, 1 MiB requests.
  if want seq; then
  c0=$(cpu "${cl[@]}") s0=$(cpu "${sv[@]}") t0=$(now)
  on dd if=/dev/zero of="$d/seq" bs=1M count="$SIZE_MIB" conv=fsync status=none
  t1=$(now) c1=$(cpu "${cl[@]}") s1=$(cpu "${sv[@]}")
  put $fs seq_write "$(rate "$mb" "$t0" "$t1")" MB/s
  if [ $fs != local ]; then
    put $fs seq_write_cpu_client "$(cpu_per_gib "$c0" "$c1")" s/GiB
    put $fs seq_write_cpu_server "$(cpu_per_gib "$s0" "$s1")" s/GiB
  fi
  # cold: nothing cached anywhere; reread: right after, the client's page cache
  # (omxfs keeps it across opens of an unchanged file); warm: the client's pages of
  # the file dropped first (posix_fadvise DONTNEED, untimed), the server's kept: the
  # network path.
  for temp in cold reread warm; do
    [ $temp = cold ] && drop
    [ $temp = warm ] && [ $fs != local ] && on python3 -c '
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
os.close(fd)' "$d/seq"
    c0=$(cpu "${cl[@]}") s0=$(cpu "${sv[@]}") t0=$(now)
    on dd if="$d/seq" of=/dev/null bs=1M status=none
    t1=$(now) c1=$(cpu "${cl[@]}") s1=$(cpu "${sv[@]}")
    put $fs "seq_read_$temp" "$(rate "$mb" "$t0" "$t1")" MB/s
    if [ $fs != local ]; then
      put $fs "seq_read_${temp}_cpu_client" "$(cpu_per_gib "$c0" "$c1")" s/GiB
      put $fs "seq_read_${temp}_cpu_server" "$(cpu_per_gib "$s0" "$s1")" s/GiB
    fi
  done
  on rm -f "$d/seq"
  fi
  # Small files: untar, stat of every file (cold caches), creates and deletes.
  if want tree; then
  c0=$(cpu "${cl[@]}") s0=$(cpu "${sv[@]}") t0=$(now)
  on sh -c "mkdir $d/tree && tar -xf $tmp/src.tar -C $d/tree"
  t1=$(now) c1=$(cpu "${cl[@]}") s1=$(cpu "${sv[@]}")
  put $fs untar "$(rate "$nfiles" "$t0" "$t1")" files/s
  if [ $fs != local ]; then
    put $fs untar_cpu_client "$(python3 -c "print(f'{($c1 - $c0) / $hz / $nfiles * 1e6:.0f}')")" us/file
    put $fs untar_cpu_server "$(python3 -c "print(f'{($s1 - $s0) / $hz / $nfiles * 1e6:.0f}')")" us/file
  fi
  # Timed inside python: the interpreter's start (from a cold page cache after the drop,
  # 0.1-0.3 s) is not the file system's.
  drop
  read -r n secs < <(on python3 -c 'import os, sys, time
t = time.perf_counter()
n = 0
for d, ds, fs in os.walk(sys.argv[1]):
    for f in fs: os.lstat(os.path.join(d, f)); n += 1
print(n, time.perf_counter() - t)' "$d/tree")
  put $fs stat_all "$(python3 -c "print(f'{$n / $secs:.1f}')")" files/s
  fi
  if want cd; then
  c0=$(cpu "${cl[@]}") s0=$(cpu "${sv[@]}")
  secs=$(on python3 -c 'import os, sys, time
t = time.perf_counter()
d = sys.argv[1]; os.mkdir(d)
for i in range(10000): os.close(os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
for i in range(10000): os.unlink(f"{d}/f{i}")
os.rmdir(d)
print(time.perf_counter() - t)' "$d/cd")
  c1=$(cpu "${cl[@]}") s1=$(cpu "${sv[@]}")
  put $fs create_delete "$(python3 -c "print(f'{20000 / $secs:.1f}')")" ops/s
  if [ $fs != local ]; then
    put $fs create_delete_cpu_client "$(python3 -c "print(f'{($c1 - $c0) / $hz / 20000 * 1e6:.0f}')")" us/op
    put $fs create_delete_cpu_server "$(python3 -c "print(f'{($s1 - $s0) / $hz / 20000 * 1e6:.0f}')")" us/op
  fi
  fi
  # 4 KiB random reads, O_DIRECT (the server's cache is warm: the network, not the disk).
  if want fio; then
  on dd if=/dev/urandom of="$d/rand" bs=1M count="$FIO_MIB" status=none
  for qd in 1 16; do
    if on fio --name=r --filename="$d/rand" --size="${FIO_MIB}M" --rw=randread --bs=4k --direct=1 \
      --ioengine=libaio --iodepth=$qd --runtime="$FIO_SECS" --time_based --output-format=json \
      >"$tmp/fio.json" 2>"$tmp/fio.err"; then
      read -r iops lat < <(python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]["read"]
print(round(j["iops"]), round(j["lat_ns"]["mean"] / 1000, 1))' "$tmp/fio.json")
      put $fs "randread_qd${qd}_iops" "$iops" IOPS
      put $fs "randread_qd${qd}_lat" "$lat" us
    else
      put $fs "randread_qd${qd}_iops" NA "$(head -c 60 "$tmp/fio.err" | tr ',\n' '; ')"
    fi
  done
  fi
  on rm -rf "$d/rand" "$d/tree"
done
if want seq; then
  read -r perf_after perf4_after < <(pingpong)
  put omx_perf pingpong_1MiB "$perf" MB/s
  put omx_perf pingpong_4MiB "$perf4" MB/s
  put omx_perf pingpong_1MiB_after "$perf_after" MB/s
  put omx_perf pingpong_4MiB_after "$perf4_after" MB/s
fi

cp "$csv" "$OUT.csv"
python3 - "$csv" "$OUT.md" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
v = {(r["fs"], r["test"]): r for r in rows}
tests = [t for t in dict.fromkeys(r["test"] for r in rows) if not t.startswith("pingpong")]
out = ["| test | unit | local | omxfs | sshfs | omxfs / sshfs |", "|---|---|---|---|---|---|"]
for t in tests:
    cells = [v.get((f, t), {}).get("value", "-") for f in ("local", "omxfs", "sshfs")]
    unit = next(r["unit"] for r in rows if r["test"] == t)
    try:
        ratio = f"{float(cells[1]) / float(cells[2]):.2f}x"
    except (ValueError, ZeroDivisionError):
        ratio = "-"
    out.append(f"| {t} | {unit} | " + " | ".join(cells) + f" | {ratio} |")
warm = v.get(("omxfs", "seq_read_warm"), {}).get("value")
write = v.get(("omxfs", "seq_write"), {}).get("value")
for size in ("1MiB", "4MiB"):
    runs = [v[k]["value"] for k in (("omx_perf", f"pingpong_{size}"), ("omx_perf", f"pingpong_{size}_after")) if k in v]
    if runs:
        line = f"\nomx_perf {size} ping-pong, before and after the file systems: {', '.join(runs)} MB/s"
        try:
            line += "; omxfs warm read / it: " + ", ".join(f"{float(warm) / float(r):.2f}x" for r in runs)
            line += "; omxfs write / it: " + ", ".join(f"{float(write) / float(r):.2f}x" for r in runs)
        except (TypeError, ValueError, ZeroDivisionError):
            pass
        out.append(line)
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
