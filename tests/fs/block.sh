#!/usr/bin/env bash
# block.sh IMAGE MOUNTPOINT - a block device backed by a file on omxfs: losetup IMAGE,
# mkfs.ext4, mount, fill with files, unmount, remount, compare, unmount, `fsck -f -n`
# clean, detach. The loop device and the ext4 mount are undone on every exit path.
# Size: OMXFS_BLOCK_MIB (1024). Run in the omxfs client's mount namespace (tests/fs/run.sh).
set -euo pipefail
img=$1 mnt=$2 mib=${OMXFS_BLOCK_MIB:-1024}
loop=
cleanup() {
  mountpoint -q "$mnt" && umount "$mnt"
  [ -n "$loop" ] && losetup -d "$loop"
  rm -f "$img"
}
trap cleanup EXIT
mkdir -p "$mnt"
truncate -s "${mib}M" "$img"
# Direct I/O: the loop device's writes go to the server, not only to the client's cache.
loop=$(losetup --find --show --direct-io=on "$img" 2>/dev/null || losetup --find --show "$img")
echo "image ${mib} MiB on $loop"
mkfs.ext4 -q -F -E nodiscard "$loop"
mount "$loop" "$mnt"
# Files of assorted sizes, about half the image, with their checksums kept off the device.
sums=$(mktemp)
fill=$((mib / 2))
python3 - "$mnt" "$fill" <<'PY'
import os, random, sys
root, mib = sys.argv[1], int(sys.argv[2])
rng = random.Random(26)
left, i = mib << 20, 0
while left > 0:
    d = os.path.join(root, f"d{i % 7}")
    os.makedirs(d, exist_ok=True)
    n = min(left, rng.choice([1, 100, 4096, 65536, 1 << 20, 5 << 20]))
    with open(os.path.join(d, f"f{i}"), "wb") as f:
        f.write(rng.randbytes(n))
    left, i = left - n, i + 1
print(f"{i} files")
PY
(cd "$mnt" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$sums"
umount "$mnt"
# Drop the loop device's page cache so the second mount reads through omxfs.
blockdev --flushbufs "$loop"
mount "$loop" "$mnt"
(cd "$mnt" && sha256sum --quiet -c "$sums")
umount "$mnt"
fsck.ext4 -f -n "$loop"
rm -f "$sums"
echo "ok"
