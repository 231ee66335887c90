# Shared by deploy/stack and deploy/test: where things live and how to install them.
# Source it; it defines functions and variables and runs nothing.

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TANSU_VERSION=0.6.0
RA_CACHE_DIR=${RA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ra-ledger}
# Built with the SQLite storage engine (libsql): the durable one that needs no other server.
TANSU_FEATURES=dynostore,libsql
TANSU_ROOT="$RA_CACHE_DIR/tansu-$TANSU_VERSION-sqlite"
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

# Debian packages, installed with apt only when missing: libssl-dev and pkg-config to build
# librdkafka with TLS and SASL; openssl, stunnel4 and systemd (systemd-analyze) for tests.
ensure_packages() {
    local missing=() package
    for package in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
            missing+=("$package")
        fi
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing ${missing[*]} with apt"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The Kafka-protocol broker, built once into the cache. The default build has only a null
# storage engine that discards messages: build with dynostore (memory://) and libsql
# (sqlite://, durable on local disk).
ensure_tansu() {
    if [ -x "$TANSU_BIN" ] && "$TANSU_BIN" --version 2>/dev/null | grep -q "$TANSU_VERSION"; then
        return 0
    fi
    command -v cargo >/dev/null || die "cargo is needed to build tansu"
    log "building tansu $TANSU_VERSION ($TANSU_FEATURES) into $TANSU_ROOT (about 15 minutes on 2 cores, once per machine)"
    mkdir -p "$RA_CACHE_DIR"
    local target
    target=$(mktemp -d "$RA_CACHE_DIR/tansu-build.XXXXXX")
    if ! CARGO_TARGET_DIR="$target" cargo install "tansu@$TANSU_VERSION" --locked \
            --features "$TANSU_FEATURES" --root "$TANSU_ROOT" --quiet; then
        rm -rf "$target"
        die "cargo install tansu@$TANSU_VERSION failed (see above)"
    fi
    rm -rf "$target"
    [ -x "$TANSU_BIN" ] || die "tansu was built but $TANSU_BIN is missing"
}

# The sqlite3 command line, to add an index tansu's SQLite schema lacks (see
# deploy/tansu-sqlite-index.sql).
ensure_sqlite3() {
    if command -v sqlite3 >/dev/null; then return 0; fi
    log "sqlite3 not found; installing it with apt"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sqlite3 >/dev/null
    command -v sqlite3 >/dev/null || die "apt installed sqlite3 but it is not on the PATH"
}

# Adds the missing index to tansu's SQLite database $1, once tansu has created its schema
# (it does so as it starts; retried for up to 10 s).
tansu_sqlite_index() {
    local db=$1 tries=0 output
    until output=$(sqlite3 -bail -cmd ".timeout 10000" "$db" <"$REPO_ROOT/deploy/tansu-sqlite-index.sql" 2>&1); do
        tries=$((tries + 1))
        [ $tries -lt 100 ] || die "could not index $db: $output"
        sleep 0.1
    done
}

# Runs a command as the postgres system user when we are root (initdb and postgres refuse
# to run as root), else as ourselves.
as_pg() {
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# True when the pid in file $1 is a live process (of binary $2, when given). A process
# killed with SIGKILL stays a zombie until its parent reaps it, and where PID 1 never reaps
# (a container without an init) that is forever: a zombie is dead, whatever `kill -0` says.
pid_alive() {
    [ -f "$1" ] || return 1
    local pid state
    pid=$(head -n1 "$1")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    # /proc/PID/stat is "pid (comm) state ...": comm may hold spaces, so read after ") ".
    state=$(sed -n 's/^.*) \([A-Za-z]\).*$/\1/p' "/proc/$pid/stat" 2>/dev/null)
    case "$state" in "" | Z | X) return 1 ;; esac
    if [ -n "${2:-}" ] && ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$2"; then
        return 1
    fi
    return 0
}
