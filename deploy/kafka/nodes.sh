# Apache Kafka KRaft nodes on loopback, for deploy/stack and deploy/bench-cluster: one node
# (broker and controller in one JVM, its own quorum) or three (each a broker and a voter of
# the quorum, every topic three copies with two in sync). Source it after deploy/lib.sh; it
# defines functions and runs nothing.
#
# The caller sets:
#   KAFKA_NODES          1 or 3
#   KAFKA_CLUSTER_DIR    the cluster's folder: with one node the node's own folder, with
#                        three a folder holding node-1, node-2 and node-3
#   KAFKA_PORT           node 1's broker port; node i listens on KAFKA_PORT + 2 (i - 1)
#   KAFKA_CONTROLLER_PORT node 1's controller port, likewise
#   KAFKA_JVM_OPTS       (array) the JVM's options
#
# Each node's folder holds server.properties (written at every start), data/ (formatted
# once, kept), broker.log and broker.pid; the cluster's id is in KAFKA_CLUSTER_DIR/cluster-id.

# Node $1's folder.
kafka_node_dir() {
    if [ "$KAFKA_NODES" -eq 1 ]; then echo "$KAFKA_CLUSTER_DIR"; else echo "$KAFKA_CLUSTER_DIR/node-$1"; fi
}
kafka_node_port() { echo $((KAFKA_PORT + 2 * ($1 - 1))); }
kafka_node_controller_port() { echo $((KAFKA_CONTROLLER_PORT + 2 * ($1 - 1))); }
# What pid_alive looks for in node $1's command line: this cluster's kafka.Kafka, not
# another one (another stack's, a test harness's).
kafka_node_cmdline() { echo "kafka.Kafka $(kafka_node_dir "$1")/server.properties"; }

# The bootstrap servers: every node's broker listener.
kafka_bootstrap() {
    local i list=()
    for i in $(seq 1 "$KAFKA_NODES"); do list+=("127.0.0.1:$(kafka_node_port "$i")"); done
    local IFS=,
    echo "${list[*]}"
}

# Whether any node of the cluster runs.
kafka_running() {
    local i
    for i in $(seq 1 "$KAFKA_NODES"); do
        pid_alive "$(kafka_node_dir "$i")/broker.pid" "$(kafka_node_cmdline "$i")" && return 0
    done
    return 1
}

# Dies with why node $2 is not up and the end of its log.
kafka_failed() {
    local log
    log="$(kafka_node_dir "$2")/broker.log"
    die "$1; the last lines of $log:"$'\n'"$(tail -n 25 "$log" 2>/dev/null)"
}

# Node $1's server.properties, without TLS.
kafka_properties() {
    local i=$1 dir port controller
    dir=$(kafka_node_dir "$i")
    port=$(kafka_node_port "$i")
    controller=$(kafka_node_controller_port "$i")
    cat <<PROPS
# Written by deploy/kafka/nodes.sh at each start (edit it, not this file).
process.roles=broker,controller
node.id=$i
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
# A worker joining the group gets its partitions at once, not after 3 s.
group.initial.rebalance.delay.ms=0
# Topics are made by ledger topics create, with their configs; a typo makes no topic.
auto.create.topics.enable=false
PROPS
    if [ "$KAFKA_NODES" -eq 1 ]; then
        cat <<PROPS
controller.quorum.bootstrap.servers=127.0.0.1:$controller
# One node: the internal topics have one replica, and one in sync is enough.
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
PROPS
    else
        local n voters=()
        for n in $(seq 1 "$KAFKA_NODES"); do voters+=("$n@127.0.0.1:$(kafka_node_controller_port "$n")"); done
        cat <<PROPS
controller.quorum.voters=$(IFS=,; echo "${voters[*]}")
# Three copies of everything, two in sync before an acks=all write is acknowledged: the
# loss of any one node loses no acknowledged record and stops no writes.
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
default.replication.factor=3
min.insync.replicas=2
unclean.leader.election.enable=false
PROPS
    fi
}

# Formats node $1's log folder once (a fresh folder has no meta.properties) with the
# cluster's id: one node is the only voter of its quorum (--standalone); three name their
# voters in their properties.
kafka_format() {
    local i=$1 id output dir standalone=()
    dir=$(kafka_node_dir "$i")
    if [ -s "$KAFKA_CLUSTER_DIR/cluster-id" ]; then
        id=$(cat "$KAFKA_CLUSTER_DIR/cluster-id")
    else
        id=$(kafka_tool kafka.tools.StorageTool random-uuid) || die "kafka-storage random-uuid failed"
        printf '%s\n' "$id" > "$KAFKA_CLUSTER_DIR/cluster-id"
    fi
    [[ "$id" =~ ^[A-Za-z0-9_-]{22}$ ]] || die "$KAFKA_CLUSTER_DIR/cluster-id holds no cluster id: $id"
    [ "$KAFKA_NODES" -eq 1 ] && standalone=(--standalone)
    log "formatting the log folder $dir/data of node $i (cluster $id)"
    output=$(kafka_tool kafka.tools.StorageTool format "${standalone[@]}" "--cluster-id=$id" \
        -c "$dir/server.properties" 2>&1) \
        || die "kafka-storage format of $dir/data failed:"$'\n'"$output"
}

# Starts every node not running and returns at once; kafka_wait_listening waits for them.
# Sets KAFKA_STARTED when it started one. Needs port_in_use and stop_pidfile (deploy/lib.sh).
kafka_start() {
    ensure_kafka
    mkdir -p "$KAFKA_CLUSTER_DIR"
    local i dir port controller to_format=()
    for i in $(seq 1 "$KAFKA_NODES"); do
        dir=$(kafka_node_dir "$i")
        if pid_alive "$dir/broker.pid" "$(kafka_node_cmdline "$i")"; then
            log "Kafka node $i already running on 127.0.0.1:$(kafka_node_port "$i") (pid $(cat "$dir/broker.pid"))"
            continue
        fi
        port=$(kafka_node_port "$i")
        controller=$(kafka_node_controller_port "$i")
        port_in_use "$port" \
            && die "127.0.0.1:$port is in use by a process this stack did not start; stop it or set RA_KAFKA_PORT"
        port_in_use "$controller" \
            && die "127.0.0.1:$controller is in use by a process this stack did not start; stop it or set RA_KAFKA_CONTROLLER_PORT"
        mkdir -p "$dir"
        kafka_properties "$i" > "$dir/server.properties"
        [ -f "$dir/data/meta.properties" ] || to_format+=("$i")
    done
    # The cluster id first (one), then the folders side by side: a format is a JVM run.
    if [ ${#to_format[@]} -gt 0 ]; then
        [ -s "$KAFKA_CLUSTER_DIR/cluster-id" ] || kafka_format "${to_format[0]}"
        # Waits for these formats only: `up` builds the ledger in the background meanwhile.
        local formats=()
        for i in "${to_format[@]}"; do
            [ -f "$(kafka_node_dir "$i")/data/meta.properties" ] || kafka_format "$i" &
            formats+=($!)
        done
        wait "${formats[@]}"
        for i in "${to_format[@]}"; do
            [ -f "$(kafka_node_dir "$i")/data/meta.properties" ] || die "node $i's log folder was not formatted"
        done
    fi
    for i in $(seq 1 "$KAFKA_NODES"); do
        dir=$(kafka_node_dir "$i")
        pid_alive "$dir/broker.pid" "$(kafka_node_cmdline "$i")" && continue
        log "starting Kafka node $i (kafka $KAFKA_VERSION, data in $dir/data) on 127.0.0.1:$(kafka_node_port "$i"), controller on 127.0.0.1:$(kafka_node_controller_port "$i")"
        (cd "$dir" && exec nohup "${KAFKA_JAVA[@]}" "${KAFKA_JVM_OPTS[@]}" kafka.Kafka "$dir/server.properties" \
            >"$dir/broker.log" 2>&1) &
        echo $! > "$dir/broker.pid"
        KAFKA_STARTED=$SECONDS
    done
}

# Waits ($1 s at most from the start, default 90) until every node listens on its broker
# port: Kafka opens it only once the node is unfenced (RECOVERY to RUNNING), and a node of
# three is unfenced only once the quorum has a majority.
kafka_wait_listening() {
    local deadline=$((${KAFKA_STARTED:-$SECONDS} + ${1:-90})) i port
    for i in $(seq 1 "$KAFKA_NODES"); do
        port=$(kafka_node_port "$i")
        until port_in_use "$port"; do
            # First give the child time to exec: until then its command line is the shell's.
            sleep 0.1
            pid_alive "$(kafka_node_dir "$i")/broker.pid" "$(kafka_node_cmdline "$i")" \
                || kafka_failed "Kafka node $i exited" "$i"
            [ $SECONDS -lt $deadline ] \
                || kafka_failed "Kafka node $i did not listen on 127.0.0.1:$port in time" "$i"
        done
    done
}

# Stops every node (TERM, then KILL after $1 s, default 30). All at once: stopped one by
# one, the last of three would wait for a quorum that left before it.
kafka_stop() {
    local grace=${1:-30} i
    local stops=()
    for i in $(seq 1 "$KAFKA_NODES"); do
        stop_pidfile "Kafka node $i" "$(kafka_node_dir "$i")/broker.pid" "$(kafka_node_cmdline "$i")" "$grace" &
        stops+=($!)
    done
    wait "${stops[@]}"
}

# One status line per node.
kafka_status() {
    local i dir state name=broker
    for i in $(seq 1 "$KAFKA_NODES"); do
        [ "$KAFKA_NODES" -gt 1 ] && name="broker $i"
        dir=$(kafka_node_dir "$i")
        if pid_alive "$dir/broker.pid" "$(kafka_node_cmdline "$i")"; then
            state="running  pid $(cat "$dir/broker.pid")"
        else
            state=stopped
        fi
        printf '%-11s %-20s %s\n' "$name" "$state" "127.0.0.1:$(kafka_node_port "$i") (kafka $KAFKA_VERSION, data in $dir/data, log: $dir/broker.log)"
    done
}
