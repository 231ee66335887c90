# The stack's two witnesses of the transparency log (litewitness, each key in its own
# ssh-agent) in $STACK_DIR/witness-<a|b>, and the policy that asks both to cosign every
# checkpoint. Sourced by deploy/stack after deploy/lib.sh; the integration test
# `stack_witnesses` sources it too and runs `witnesses_up` three times against real
# litewitness processes (a whole `stack up` builds and starts far more than this part).
#
# Reads STACK_DIR, SECRETS_DIR (digest-key.pem, made by `up`'s secrets) and LEDGER_BIN.
#
# Idempotent (issue 56, item 5): `witnessctl add-key` inserts a row every time it runs, and
# litewitness answers every checkpoint of a log holding one key twice with HTTP 500
# "ambiguous key"; each `up` before this file added a copy, and the second `up` stopped
# cosigning for good. A key is now added only when the witness lacks it, and a database
# holding copies (left by those `up`s) is repaired.

WITNESS_PORT=${RA_WITNESS_PORT:-18091}
WITNESSES=(a b)
WITNESS_POLICY="$STACK_DIR/witness-policy.txt"

# How many times the litewitness database $1 holds key $3 for the log $2; -1 when it does
# not know the log. `witnessctl list-logs` prints one JSON object a log (origin, keys).
witness_key_copies() {
    "$LEDGER_WITNESS_BIN/witnessctl" list-logs -db "$1" | python3 -c '
import json, sys
origin, key = sys.argv[1], sys.argv[2]
for line in sys.stdin:
    entry = json.loads(line)
    if entry["origin"] == origin:
        print(sum(1 for k in entry["keys"] if k == key))
        break
else:
    print(-1)
' "$2" "$3"
}

# Makes witness $1's database (in $2) hold the log's key $3 exactly once. A repair stops its
# litewitness first: between `del-key` (which removes every copy) and `add-key` it would
# answer 404 "unknown log", which the ledger takes for a refusal.
witness_register() {
    local name=$1 dir=$2 log_key=$3
    local db="$dir/litewitness.db" origin=${3%%+*} ctl="$LEDGER_WITNESS_BIN/witnessctl" copies
    copies=$(witness_key_copies "$db" "$origin" "$log_key") \
        || die "witnessctl list-logs -db $db failed"
    case "$copies" in
        1) ;;
        -1)
            "$ctl" add-log -db "$db" -origin "$origin" 2>/dev/null || die "witnessctl add-log -db $db -origin $origin failed"
            "$ctl" add-key -db "$db" -origin "$origin" -key "$log_key" 2>/dev/null || die "witnessctl add-key -db $db failed"
            ;;
        0) "$ctl" add-key -db "$db" -origin "$origin" -key "$log_key" 2>/dev/null || die "witnessctl add-key -db $db failed" ;;
        *)
            log "witness $name holds the log's key $copies times (litewitness then answers every checkpoint with HTTP 500 \"ambiguous key\"): keeping one"
            stop_pidfile "witness $name" "$dir/litewitness.pid" litewitness
            "$ctl" del-key -db "$db" -origin "$origin" -key "$log_key" 2>/dev/null || die "witnessctl del-key -db $db failed"
            "$ctl" add-key -db "$db" -origin "$origin" -key "$log_key" 2>/dev/null || die "witnessctl add-key -db $db failed"
            ;;
    esac
}

# Starts witness $1 on port $2 (harmless when running): its key made once and kept (it
# signs what the witness vouched for), the ledger's log registered with it once, a
# dedicated ssh-agent holding its key, and litewitness.
witness_up() {
    local name=$1 port=$2 dir="$STACK_DIR/witness-$1"
    local agent_pid="$dir/ssh-agent.pid" pid="$dir/litewitness.pid" socket="$dir/agent.sock"
    mkdir -p "$dir"
    # The log: its origin and its key (the digest key's public half).
    local log_key
    log_key=$("$LEDGER_BIN" proof log-key --public-key "$SECRETS_DIR/digest-key.pub.pem") \
        || die "$LEDGER_BIN proof log-key failed"
    witness_register "$name" "$dir" "$log_key"
    if pid_alive "$pid" litewitness; then
        log "witness $name already running on http://127.0.0.1:$port (pid $(cat "$pid"))"
    else
        port_in_use "$port" && die "port $port is taken: set RA_WITNESS_PORT"
        [ -f "$dir/witness.key" ] || ssh-keygen -q -t ed25519 -N '' -C "witness-$name" -f "$dir/witness.key"
        if ! pid_alive "$agent_pid" ssh-agent; then
            rm -f "$socket"
            (nohup ssh-agent -D -a "$socket" >/dev/null 2>&1 & echo $! > "$agent_pid")
            local tries=0
            # Listening, not only bound: `ssh-add -l` exits 2 while it cannot connect (the
            # socket file appears before the agent listens), 1 for an agent with no key.
            until SSH_AUTH_SOCK=$socket ssh-add -l >/dev/null 2>&1 || [ $? -eq 1 ]; do
                tries=$((tries + 1)); [ $tries -lt 100 ] || die "ssh-agent of witness $name did not start"
                sleep 0.05
            done
        fi
        SSH_AUTH_SOCK=$socket ssh-add -q "$dir/witness.key" 2>/dev/null || die "ssh-add for witness $name failed"
        local fingerprint
        fingerprint=$(ssh-keygen -l -E sha256 -f "$dir/witness.key.pub" | awk '{print $2}')
        log "starting witness $name (litewitness $TORCHWOOD_VERSION) on http://127.0.0.1:$port"
        (nohup "$LEDGER_WITNESS_BIN/litewitness" -name "witness-$name.ra-ledger.local" -key "$fingerprint" \
            -listen "127.0.0.1:$port" -db "$dir/litewitness.db" -ssh-agent "$socket" \
            >"$dir/litewitness.log" 2>&1 & echo $! > "$pid")
        local tries=0
        until port_in_use "$port"; do
            tries=$((tries + 1))
            sleep 0.1
            pid_alive "$pid" litewitness || die "witness $name exited; see $dir/litewitness.log"
            [ $tries -lt 100 ] || die "witness $name not listening after 10 s; see $dir/litewitness.log"
        done
    fi
    [ "$(witness_key_copies "$dir/litewitness.db" "${log_key%%+*}" "$log_key")" = 1 ] \
        || die "witness $name does not hold the log's key $log_key once; see witnessctl list-logs -db $dir/litewitness.db"
}

# Both witnesses, and the policy naming them with the keys they printed at their start.
witnesses_up() {
    ensure_witness
    openssl pkey -in "$SECRETS_DIR/digest-key.pem" -pubout -out "$SECRETS_DIR/digest-key.pub.pem" 2>/dev/null
    local i=0 name lines=()
    for name in "${WITNESSES[@]}"; do
        witness_up "$name" $((WITNESS_PORT + i))
        local vkey
        vkey=$(grep -o 'vkey=[^ ]*' "$STACK_DIR/witness-$name/litewitness.log" | tail -n1 | cut -d= -f2-)
        [ -n "$vkey" ] || die "witness $name printed no verifier key; see $STACK_DIR/witness-$name/litewitness.log"
        lines+=("witness $name $vkey http://127.0.0.1:$((WITNESS_PORT + i))")
        i=$((i + 1))
    done
    {
        echo "# The stack's witnesses (deploy/stack): both must cosign every checkpoint."
        echo "log $("$LEDGER_BIN" proof log-key --public-key "$SECRETS_DIR/digest-key.pub.pem")"
        printf '%s\n' "${lines[@]}"
        echo "group both all ${WITNESSES[*]}"
        echo "quorum both"
    } > "$WITNESS_POLICY"
}

# Stops both witnesses and their ssh-agents.
witnesses_down() {
    local name
    for name in "${WITNESSES[@]}"; do
        stop_pidfile "witness $name" "$STACK_DIR/witness-$name/litewitness.pid" litewitness
        stop_pidfile "ssh-agent of witness $name" "$STACK_DIR/witness-$name/ssh-agent.pid" ssh-agent
    done
}
