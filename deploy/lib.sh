# Shared by deploy/stack and deploy/test: where things live and how to install them.
# Source it; it defines functions and variables and runs nothing.

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TANSU_VERSION=0.6.0
RA_CACHE_DIR=${RA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ra-ledger}
TANSU_ROOT="$RA_CACHE_DIR/tansu-$TANSU_VERSION"
TANSU_BIN="$TANSU_ROOT/bin/tansu"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Directory of the newest PostgreSQL server binaries (15 or later), or nothing.
pg_bindir() {
    local dir
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -n -r); do
        local major=${dir#/usr/lib/postgresql/}; major=${major%/bin}
        if [ "$major" -ge 15 ] 2>/dev/null && [ -x "$dir/postgres" ] && [ -x "$dir/initdb" ]; then
            echo "$dir"; return 0
        fi
    done
    return 1
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# PostgreSQL server binaries, from Debian's packages, only when missing. The package's own
# cluster is not used (nor started, where policy allows): the stack and the tests run
# private clusters.
ensure_postgres() {
    if pg_bindir >/dev/null; then return 0; fi
    log "PostgreSQL server not found; installing it with apt"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    pg_bindir >/dev/null || die "apt installed postgresql but no server binaries are in /usr/lib/postgresql/*/bin"
}

# The Kafka-protocol broker, built once into the cache. The default build has only a null
# storage engine that discards messages, so build with dynostore (memory://).
ensure_tansu() {
    if [ -x "$TANSU_BIN" ] && "$TANSU_BIN" --version 2>/dev/null | grep -q "$TANSU_VERSION"; then
        return 0
    fi
    command -v cargo >/dev/null || die "cargo is needed to build tansu"
    log "building tansu $TANSU_VERSION into $TANSU_ROOT (about 9 minutes on 2 cores, once per machine)"
    mkdir -p "$RA_CACHE_DIR"
    local target
    target=$(mktemp -d "$RA_CACHE_DIR/tansu-build.XXXXXX")
    if ! CARGO_TARGET_DIR="$target" cargo install "tansu@$TANSU_VERSION" --locked \
            --features dynostore --root "$TANSU_ROOT" --quiet; then
        rm -rf "$target"
        die "cargo install tansu@$TANSU_VERSION failed (see above)"
    fi
    rm -rf "$target"
    [ -x "$TANSU_BIN" ] || die "tansu was built but $TANSU_BIN is missing"
}

# Runs a command as the postgres system user when we are root (initdb and postgres refuse
# to run as root), else as ourselves.
as_pg() {
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# True when the pid in file $1 is a live process.
pid_alive() {
    [ -f "$1" ] && kill -0 "$(head -n1 "$1")" 2>/dev/null
}
