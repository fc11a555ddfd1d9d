#!/usr/bin/env bash
# Install what the fault-injection suite (jepsen_tests) needs on a fresh Debian machine:
# nftables (partitions), iptables (the alternative to nft rules), faketime (clock jumps),
# e2fsprogs and mount (the disk nemeses' loop-mounted file systems), gcc (the wall-clock shim).
# `ip`, `unshare` and `tc` come with the base system. Idempotent: does nothing when all are
# there. Needs root for apt-get; without root it says what is missing and fails.
set -euo pipefail

missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v nft >/dev/null 2>&1 || missing+=(nftables)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
if ! command -v faketime >/dev/null 2>&1 || ! ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1; then
    missing+=(faketime)
fi
# The disk nemeses: a loop-mounted ext4 image per node (mkfs.ext4, chattr: e2fsprogs; losetup,
# mount: mount). The wall-clock shim of clock-skew/clock-strobe is compiled per run (gcc).
command -v mkfs.ext4 >/dev/null 2>&1 && command -v chattr >/dev/null 2>&1 || missing+=(e2fsprogs)
command -v losetup >/dev/null 2>&1 || missing+=(mount)
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)

source "$(dirname "$0")/_apt.sh"
apt_install setup-jepsen jepsen_tests "${missing[@]}"
