#!/usr/bin/env bash
# Install what the fault-injection suite (jepsen_tests) needs on a fresh Debian machine:
# nftables (partitions), iptables (the alternative to nft rules), faketime (clock jumps).
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

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "setup-jepsen: missing ${missing[*]}; install them as root:" >&2
    echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup-jepsen: missing ${missing[*]} and no apt-get to install them" >&2
    exit 1
fi

echo "==> installing ${missing[*]} for jepsen_tests" >&2
export DEBIAN_FRONTEND=noninteractive
LOG="${TMPDIR:-/tmp}/setup-jepsen.log"
if ! { apt-get update && apt-get install -y --no-install-recommends "${missing[@]}"; } >"$LOG" 2>&1; then
    tail -30 "$LOG" >&2
    echo "setup-jepsen: apt-get failed; full log in $LOG" >&2
    exit 1
fi
