# Sourced by scripts/setup-*.sh: install Debian packages a test setup needs, or say why not.
# apt_install WHO PURPOSE PACKAGE...: nothing to do without packages; needs root and apt-get
# (else it prints the command to run and fails); apt-get's output goes to a log, shown on
# failure.
apt_install() {
    local who="$1" purpose="$2"
    shift 2
    [ $# -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "$who: missing $*; install as root:" >&2
        echo "  apt-get update && apt-get install -y $*" >&2
        return 1
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "$who: missing $* and no apt-get to install them" >&2
        return 1
    fi
    echo "==> installing $* for $purpose" >&2
    export DEBIAN_FRONTEND=noninteractive
    local log="${TMPDIR:-/tmp}/$who.log"
    if ! { apt-get update && apt-get install -y --no-install-recommends "$@"; } >"$log" 2>&1; then
        tail -30 "$log" >&2
        echo "$who: apt-get failed; full log in $log" >&2
        return 1
    fi
}
