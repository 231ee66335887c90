# The local stack's value format of the contact, assignment and reassignment topics, which
# RA_VALUE_FORMAT gives the relay when deploy/stack starts it, and only then: the relay reads
# its settings once. So `up` on a stack whose relay runs refuses a format other than the
# running one (stop the relay first), and every start of the relay with a format other than
# the last one is recorded with the topics' end offsets at that moment, taken while no relay
# runs: the first offset of each partition in the new format. `deploy/stack status` shows
# the record. Sourced by deploy/stack; pure functions but `value_format_record`, which asks
# Kafka (tested by `deploy/test -p ra-ledger-tests --test integration stack_value_formats`).

# The file of the record: one line per switch, `<UTC time> <format> <topic>:<partition>:<offset> ...`.
value_format_file() { echo "$1/relay-value-formats"; }

# The format of the last switch recorded in file $1 (empty when none is).
value_format_last() { [ -f "$1" ] && tail -n1 "$1" | awk '{print $2}' || true; }

# The format `up` gives a relay: $1 the running relay's format (empty: none runs, or it is
# not recorded), $2 RA_VALUE_FORMAT (empty: unset), $3 the relay's pid file. Prints the
# format; fails, saying what to do, when a running relay has another one.
value_format_for_up() {
    local running=$1 requested=$2 pidfile=$3
    if [ -z "$requested" ]; then
        echo "${running:-protobuf}"
    elif [ -z "$running" ] || [ "$running" = "$requested" ]; then
        echo "$requested"
    else
        log "error: the relay runs with values $running (pid $(cat "$pidfile" 2>/dev/null)); RA_VALUE_FORMAT=$requested takes effect only when the relay starts. Stop it first (kill \$(cat $pidfile), or deploy/stack down), then run RA_VALUE_FORMAT=$requested deploy/stack up"
        return 1
    fi
}

# Appends a switch to format $2 to file $1 when the last one recorded is another format,
# with the end offsets now (brokers $3) of the topics matching $4 (default: the stack's
# three event topics); call it while no relay runs, right before one starts.
value_format_record() {
    local file=$1 format=$2 brokers=$3 topics=${4:-'^outbox\.event\.(contact|assignment|reassignment)$'} offsets
    [ "$(value_format_last "$file")" != "$format" ] || return 0
    offsets=$(kafka_tool org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$brokers" \
        --topic-partitions "$topics" 2>/dev/null | grep -E '^[^ :]+:[0-9]+:[0-9]+$' | sort | tr '\n' ' ') \
        || offsets=""
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $format ${offsets:-offsets-unknown}" >>"$file"
}

# `deploy/stack status`'s lines for file $1: each topic's format and the offset of each
# partition where it starts, and the format before.
value_format_status() {
    local file=$1
    if [ ! -f "$file" ]; then
        printf '%-11s %-20s %s\n' values unrecorded "no relay started by this deploy/stack yet (each topic protobuf unless the relay was given another format)"
        return 0
    fi
    awk '
        { before = format; format = $2; since = $1; delete starts
          for (i = 3; i <= NF; i++) { n = split($i, part, ":"); if (n == 3) starts[part[1]] = starts[part[1]] " " part[2] ":" part[3] } }
        END {
            for (topic in starts) {
                line = sprintf("%-11s %-20s %s", "values", format, topic " since " since ", partition:first offset" starts[topic])
                if (before != "") line = line " (" before " before)"
                print line
            }
            if (length(starts) == 0) printf "%-11s %-20s %s\n", "values", format, "since " since " (end offsets unknown)"
        }' "$file" | sort
}
