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

# schemathesis, pinned in tests/schemathesis/requirements.txt, which checks /openapi.json
# against the service; exports LEDGER_SCHEMATHESIS, its command.
ensure_schemathesis() {
    ensure_venv schemathesis "$REPO_ROOT/tests/schemathesis/requirements.txt"
    export LEDGER_SCHEMATHESIS="$PYTHON_VENV/bin/schemathesis"
}

# Debian packages, installed with apt only when missing: libssl-dev and pkg-config to build
# librdkafka with TLS and SASL; openssl and systemd (systemd-analyze) for tests.
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

# True when the cache holds the jars of the pom whose sha256 is $1.
kafka_cached() {
    [ -d "$KAFKA_LIBS" ] && [ -f "$KAFKA_HOME/pom.sha256" ] && [ "$(cat "$KAFKA_HOME/pom.sha256")" = "$1" ]
}

# Apache Kafka's jars (broker, controller, tools, log4j), fetched from Maven Central once into
# $KAFKA_LIBS with deploy/kafka/pom.xml; fetched again when the pom changes (the cache's
# stamp, pom.sha256, is the hash of the pom it was fetched with). Maven keeps its downloads
# in its own repository (~/.m2 unless MAVEN_OPTS says otherwise), so a changed pom
# downloads only what changed. The jars land in a temporary folder that is moved into place
# whole: an interrupted fetch leaves no half-filled libs folder behind. Callers that fetch at
# the same time wait for one another (flock) and fetch once.
ensure_kafka() {
    [ -n "$KAFKA_VERSION" ] || die "no <kafka.version> in $KAFKA_POM"
    local want
    want=$(sha256sum "$KAFKA_POM" | cut -d' ' -f1)
    if kafka_cached "$want"; then
        # The jars are here; java must be too, to run them.
        command -v java >/dev/null || ensure_java_maven
        return 0
    fi
    ensure_java_maven
    mkdir -p "$RA_CACHE_DIR"
    local lock
    exec {lock}>"$RA_CACHE_DIR/kafka.lock"
    flock "$lock"
    if kafka_cached "$want"; then exec {lock}>&-; return 0; fi
    log "fetching Apache Kafka $KAFKA_VERSION (jars of deploy/kafka/pom.xml) from Maven Central into $KAFKA_LIBS (about a minute, once per pom)"
    local tmp output started=$SECONDS
    tmp=$(mktemp -d "$RA_CACHE_DIR/kafka-fetch.XXXXXX")
    # A copy of the pom, in the temporary folder: mvn writes nothing into the repository,
    # and the stamp is the hash of what was fetched even if the pom changes meanwhile.
    cp "$KAFKA_POM" "$tmp/pom.xml"
    want=$(sha256sum "$tmp/pom.xml" | cut -d' ' -f1)
    if ! output=$(cd "$tmp" && mvn -q -B -f pom.xml dependency:copy-dependencies \
            -DincludeScope=runtime -DoutputDirectory="$tmp/libs" 2>&1); then
        rm -rf "$tmp"
        die "mvn could not fetch Kafka $KAFKA_VERSION's jars:"$'\n'"$output"
    fi
    local jar
    for jar in "kafka_2.*-$KAFKA_VERSION.jar" "kafka-tools-$KAFKA_VERSION.jar" "log4j-slf4j-impl-*.jar" "log4j-core-*.jar"; do
        # shellcheck disable=SC2086 # the glob is meant
        compgen -G "$tmp/libs/"$jar >/dev/null || { rm -rf "$tmp"; die "mvn fetched no $jar into $tmp/libs"; }
    done
    echo "$want" > "$tmp/pom.sha256"
    if [ -e "$KAFKA_HOME" ]; then
        # Jars of another pom: set aside, then removed once the new ones are in place (a
        # broker running on them keeps its open jars).
        local old
        old=$(mktemp -u "$RA_CACHE_DIR/kafka-old.XXXXXX")
        mv -T "$KAFKA_HOME" "$old"
        mv -T "$tmp" "$KAFKA_HOME"
        rm -rf "$old"
    else
        mv -T "$tmp" "$KAFKA_HOME"
    fi
    exec {lock}>&-
    log "Kafka $KAFKA_VERSION: $(ls "$KAFKA_LIBS" | wc -l) jars, $(du -sh "$KAFKA_LIBS" | cut -f1) in $KAFKA_LIBS, after $((SECONDS - started)) s"
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
