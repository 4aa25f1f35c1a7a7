#!/usr/bin/env bash
# programs.sh DIR - real programs at work in DIR (a new directory, made here), printing
# a transcript that must be the same on an omxfs mount as in a local directory
# (tests/fs/run.sh `programs`). Programs that are not installed print a line saying so
# (on both sides). Each part is cheap (seconds) and waits for nothing but its own
# commands.
set -u
d=$1
mkdir "$d" && cd "$d" || exit 1
have() { command -v "$1" >/dev/null || { echo "($1 not installed)"; return 1; }; }

echo "== execve of files on the file system"
# A script, a copied binary, and a script whose interpreter is a symlink on the file
# system itself (a venv's bin/pip): every execve once failed with EINVAL (omxfsd's
# openat2 refused the kernel's __FMODE_EXEC flag).
printf '#!/bin/sh\necho "script ran with $1"\n' >s.sh && chmod +x s.sh && ./s.sh arg
cp "$(type -P true)" tr && ./tr && echo "binary ran"
ln -s "$(python3 -c 'import sys; print(sys.executable)')" py && printf '#!%s/py\nimport sys\nprint("interpreter on the fs:", sys.argv[1])\n' "$PWD" >tool &&
  chmod +x tool && ./tool ok
printf '#!/bin/sh\necho no\n' >noexec && ./noexec 2>&1 | sed 's/.*: //'

echo "== times before 1970 and with nanoseconds (touch, find -newer)"
touch -d @-1000000 neg && touch -d '2020-02-29 12:34:56.123456789' leap && touch -d @0 epoch
stat -c '%n %Y %y' neg leap epoch | sed 's/ [+-]0000$//'
find . -maxdepth 1 -newer epoch \( -name neg -o -name leap \) -print

echo "== a C program built by make twice (nothing rebuilt), then after a change"
if have cc && have make; then
  mkdir mk && cd mk || exit 1
  for i in 1 2 3; do printf '#include "h.h"\nint f%d(void) { return %d * K; }\n' $i $i >f$i.c; done
  printf '#define K 3\nint f1(void); int f2(void); int f3(void);\n' >h.h
  printf '#include <stdio.h>\n#include "h.h"\nint main(void) { printf("%%d\\n", f1() + f2() + f3()); return 0; }\n' >main.c
  printf 'p: main.o f1.o f2.o f3.o\n\tcc -o $@ $^\n%%.o: %%.c h.h\n\tcc -Wall -Werror -c $<\n' >Makefile
  touch -d '2020-01-01' ./*.c h.h Makefile
  make -s -j2 && ./p && make -q && echo "up to date"
  printf '#define K 4\nint f1(void); int f2(void); int f3(void);\n' >h.h
  make -s -j2 && ./p && make -q && echo "up to date"
  cd ..
fi

echo "== mmap MAP_SHARED written by one process, read and written by another"
python3 - <<'PY'
import mmap, os, subprocess, sys
with open("shm", "wb") as f:
    f.truncate(1 << 20)
fd = os.open("shm", os.O_RDWR)
m = mmap.mmap(fd, 1 << 20, mmap.MAP_SHARED)
m[4096:4107] = b"hello world"
m[-5:] = b"tail!"
m.flush()
other = """
import mmap, os
fd = os.open("shm", os.O_RDWR)
print(os.pread(fd, 11, 4096), os.pread(fd, 5, (1 << 20) - 5))
m = mmap.mmap(fd, 1 << 20, mmap.MAP_SHARED)
m[0:3] = b"abc"
m.flush()
"""
print(subprocess.run([sys.executable, "-c", other], capture_output=True, text=True).stdout.strip())
print(m[0:3], os.pread(fd, 3, 0))
PY

echo "== sqlite3: rollback journal and WAL, two writers in turn, backup, vacuum"
if have sqlite3; then
  rows() { echo "BEGIN;"; for i in $(seq 1 "$1"); do echo "INSERT INTO t(s) VALUES('row $i');"; done; echo "COMMIT;"; }
  for mode in delete wal; do
    sqlite3 "$mode.db" "PRAGMA journal_mode=$mode; CREATE TABLE t(id INTEGER PRIMARY KEY, s TEXT);"
    rows 2000 | sqlite3 "$mode.db"
    for p in 1 2; do
      (for i in $(seq 1 100); do echo "INSERT INTO t(s) VALUES('p$p $i');"; done | sqlite3 -cmd ".timeout 30000" "$mode.db") &
    done
    wait
    sqlite3 "$mode.db" "PRAGMA integrity_check; SELECT count(*) FROM t; VACUUM; PRAGMA integrity_check;"
    sqlite3 "$mode.db" ".backup $mode.bak"
    sqlite3 "$mode.bak" "PRAGMA integrity_check; SELECT count(*), count(DISTINCT s) FROM t;"
  done
fi

echo "== python3 -m venv, pip from the venv"
if python3 -c 'import venv, ensurepip' 2>/dev/null; then
  python3 -m venv venv && ./venv/bin/pip --version | cut -d' ' -f1 && ./venv/bin/python -c 'import sys; print(sys.prefix == sys.base_prefix)'
else
  echo "(python3 venv/ensurepip not installed)"
fi

echo "== sparse copy, punched hole, truncate"
head -c 65536 /dev/urandom >src && truncate -s 8M src && printf end >>src
cp --sparse=always src sp && cmp src sp && echo "sparse copy same"
du -k sp | awk '{ print ($1 < 1024) ? "sparse" : "not sparse" }'
dd if=/dev/urandom of=full bs=1M count=3 status=none && fallocate -p -o 1048576 -l 1048576 full &&
  cmp -i 1048576:0 -n 1048576 full /dev/zero && du -k full | awk '{ print ($1 < 2560) ? "punched" : "not punched" }'
truncate -s 5000 t && truncate -s +3000 t && truncate -s -1000 t && stat -c '%n %s' t

echo "== hard links: du, tar, cp -a, rsync -H, find -samefile"
# Programs find a file's other names by st_ino: each must see one file, as locally.
mkdir hl hl/sub && head -c 300000 /dev/urandom >hl/f && ln hl/f hl/sub/g && ln hl/f hl/h
du -sk hl | awk '{ print ($1 < 600) ? "du counts the file once" : "du counts it per name" }'
tar -cf hl.tar hl && tar -tvf hl.tar | grep -c ' link to ' | sed 's/$/ names stored as links/'
cp -a hl hlcopy && stat -c '%h' hlcopy/f && [ "$(stat -c %i hlcopy/f)" = "$(stat -c %i hlcopy/sub/g)" ] && echo "cp -a kept the links"
if have rsync; then
  rsync -aH hl/ hlsync/ && stat -c '%h' hlsync/h && [ "$(stat -c %i hlsync/f)" = "$(stat -c %i hlsync/h)" ] && echo "rsync -H kept the links"
fi
find hl -samefile hl/h | LC_ALL=C sort
rm hl/f && cmp hl/sub/g hl/h && stat -c '%h' hl/h

echo "== the tree"
find . -path ./venv -prune -o -print | LC_ALL=C sort
