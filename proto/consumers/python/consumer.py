#!/usr/bin/env python3
"""A consumer of RA Ledger's assignment events in Python, written from the contract alone:
proto/proto/ra/ledger/v1/events.proto (classes generated from it at start-up with grpcio-tools)
and docs/asyncapi.yaml (topic names, header names, the completion marker). No Rust code.

It keeps "the current registered agent of each business in each jurisdiction" in PostgreSQL
(table py_current_assignment) and applies every event exactly once through an inbox: each
event runs in its own transaction that first claims its id in py_inbox; a second copy (the
relay delivers at least once, and a replay's handoff overlaps the live topic) claims nothing
and changes nothing. py_applications logs each application, so anyone can check that none
happened twice.

    consumer.py --database-url URL --brokers HOST:PORT [--topic-prefix outbox.event.]
                [--bootstrap REPLAY_ID] [--kafka key=value ...]

With --bootstrap it first reads every partition of the replay topic from the beginning until
each delivered its completion marker, then the live topic from the marker's handoff offsets.
Read positions are kept in PostgreSQL (py_positions), saved every CHECKPOINT_EVERY events:
after a crash it goes on from the last saved ones, and the inbox absorbs what it reads again.
Restart it with the same arguments. SIGTERM stops it after the event in hand.
"""

import argparse
import atexit
import importlib
import json
import os
import pathlib
import shutil
import signal
import sys
import tempfile
import time

import psycopg
import yaml
from confluent_kafka import Consumer, KafkaException, TopicPartition
from grpc_tools import protoc

REPO = pathlib.Path(__file__).resolve().parents[3]
PROTO_ROOT = REPO / "proto" / "proto"
ASYNCAPI = REPO / "docs" / "asyncapi.yaml"
# The prefix the AsyncAPI document writes its addresses with.
DOCUMENTED_PREFIX = "outbox.event."
CHECKPOINT_EVERY = 50
# How long a bootstrap waits for its replay topic to appear (a worker creates it when it starts
# the replay).
REPLAY_TOPIC_WAIT = 120

SCHEMA = """
CREATE TABLE IF NOT EXISTS py_inbox (
    event_id uuid PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS py_applications (
    event_id uuid NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS py_current_assignment (
    business_id uuid NOT NULL,
    jurisdiction text NOT NULL,
    assignment_id uuid NOT NULL,
    contact_id uuid NOT NULL,
    PRIMARY KEY (business_id, jurisdiction)
);
CREATE TABLE IF NOT EXISTS py_positions (
    topic text NOT NULL,
    partition integer NOT NULL,
    next_offset bigint NOT NULL,
    marker_seen boolean NOT NULL DEFAULT false,
    PRIMARY KEY (topic, partition)
);
CREATE TABLE IF NOT EXISTS py_bootstrap (
    replay_id uuid PRIMARY KEY,
    marker jsonb,
    completed_at timestamptz
);
"""


class Contract:
    """What the consumer takes from docs/asyncapi.yaml."""

    def __init__(self, path, topic_prefix):
        document = yaml.safe_load(path.read_text())
        channels = document["channels"]
        schemas = document["components"]["schemas"]

        def address(channel):
            text = channels[channel]["address"]
            return topic_prefix + text[len(DOCUMENTED_PREFIX):]

        self.live_topic = address("assignment")
        self.replay_template = address("assignmentReplay")
        # The deduplication key, as the document names it.
        self.id_header = "id"
        if self.id_header not in schemas["LiveHeaders"]["required"]:
            sys.exit(f"{path}: live messages no longer carry an {self.id_header!r} header")
        marker = schemas["MarkerHeaders"]["properties"]
        (self.marker_header, self.marker_value), = [
            (name, spec["const"]) for name, spec in marker.items() if "const" in spec
        ]
        self.protobuf_message = document["components"]["messages"]["AssignmentEvent"][
            "x-protobuf-message"
        ]

    def replay_topic(self, replay_id):
        return self.replay_template.replace("{replayId}", replay_id)


def generated_classes():
    """The events.proto module, generated into a temporary folder with grpcio-tools."""
    out = tempfile.mkdtemp(prefix="ra-ledger-proto-")
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    proto = "ra/ledger/v1/events.proto"
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    status = protoc.main(
        ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={out}", proto]
    )
    if status != 0:
        sys.exit(f"protoc could not compile {PROTO_ROOT / proto} (exit {status})")
    sys.path.insert(0, out)
    return importlib.import_module("ra.ledger.v1.events_pb2")


def apply(cur, envelope):
    """The projection's change for one event."""
    kind = envelope.WhichOneof("event")
    if kind == "assignment_started":
        started = envelope.assignment_started
        cur.execute(
            "INSERT INTO py_current_assignment VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (business_id, jurisdiction) DO UPDATE "
            "SET assignment_id = EXCLUDED.assignment_id, contact_id = EXCLUDED.contact_id",
            (started.business_id, started.jurisdiction, started.assignment_id, started.contact_id),
        )
    elif kind == "assignment_ended":
        cur.execute(
            "DELETE FROM py_current_assignment WHERE assignment_id = %s",
            (envelope.assignment_ended.assignment_id,),
        )
    else:
        raise ValueError(f"event {envelope.event_id}: {kind!r} is not an assignment event")


class Runner:
    def __init__(self, args):
        self.args = args
        self.contract = Contract(ASYNCAPI, args.topic_prefix)
        self.events = generated_classes()
        *_, message = self.contract.protobuf_message.split(".")
        self.envelope_class = getattr(self.events, message)
        self.db = psycopg.connect(args.database_url, autocommit=True)
        self.db.execute(SCHEMA)
        settings = {
            "bootstrap.servers": args.brokers,
            "group.id": "ra-ledger-python-consumer",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
        settings.update(dict(pair.split("=", 1) for pair in args.kafka))
        self.kafka = Consumer(settings)
        self.positions = {}
        self.stopping = False
        self.applied = self.duplicates = 0
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))

    def partitions(self, topic, wait_seconds=0):
        """The topic's partitions; a replay topic may not exist yet when the replay was only
        just requested, so up to `wait_seconds` are spent waiting for it."""
        deadline = time.monotonic() + wait_seconds
        while True:
            metadata = self.kafka.list_topics(topic, timeout=10).topics[topic]
            if metadata.error is None and metadata.partitions:
                return sorted(metadata.partitions)
            if time.monotonic() >= deadline or self.stopping:
                sys.exit(f"topic {topic}: {metadata.error} (is the replay running? ledger replay status)")
            time.sleep(0.5)

    def stored(self, topic):
        rows = self.db.execute(
            "SELECT partition, next_offset, marker_seen FROM py_positions WHERE topic = %s",
            (topic,),
        ).fetchall()
        return {partition: (offset, seen) for partition, offset, seen in rows}

    def checkpoint(self):
        with self.db.transaction():
            for (topic, partition), offset in self.positions.items():
                self.db.execute(
                    "INSERT INTO py_positions (topic, partition, next_offset) VALUES (%s, %s, %s) "
                    "ON CONFLICT (topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset",
                    (topic, partition, offset),
                )

    def handle_event(self, message):
        """Applies one event once: its id claimed in the inbox, in one transaction."""
        envelope = self.envelope_class.FromString(message.value())
        headers = dict((name, value.decode()) for name, value in (message.headers() or []))
        event_id = headers.get(self.contract.id_header)
        if event_id != envelope.event_id:
            raise ValueError(f"{message.topic()}/{message.partition()}@{message.offset()}: "
                             f"id header {event_id!r} is not the envelope's {envelope.event_id!r}")
        with self.db.transaction():
            with self.db.cursor() as cur:
                cur.execute(
                    "INSERT INTO py_inbox (event_id) VALUES (%s) ON CONFLICT DO NOTHING",
                    (event_id,),
                )
                if cur.rowcount == 1:
                    apply(cur, envelope)
                    cur.execute("INSERT INTO py_applications (event_id) VALUES (%s)", (event_id,))
                    self.applied += 1
                else:
                    self.duplicates += 1
        self.advance(message)

    def advance(self, message):
        self.positions[(message.topic(), message.partition())] = message.offset() + 1
        if (self.applied + self.duplicates) % CHECKPOINT_EVERY == 0:
            self.checkpoint()

    def bootstrap(self, replay_id):
        """Phase 1: the replay topic until every partition delivered its marker."""
        done = self.db.execute(
            "SELECT completed_at IS NOT NULL FROM py_bootstrap WHERE replay_id = %s", (replay_id,)
        ).fetchone()
        if done and done[0]:
            return
        self.db.execute(
            "INSERT INTO py_bootstrap (replay_id) VALUES (%s) ON CONFLICT DO NOTHING", (replay_id,)
        )
        topic = self.contract.replay_topic(replay_id)
        stored = self.stored(topic)
        waiting = {p for p in self.partitions(topic, wait_seconds=REPLAY_TOPIC_WAIT) if not stored.get(p, (0, False))[1]}
        self.kafka.assign([
            TopicPartition(topic, p, stored.get(p, (0, False))[0]) for p in sorted(waiting)
        ])
        marker = None
        while waiting and not self.stopping:
            message = self.poll()
            if message is None:
                continue
            headers = dict((name, value.decode()) for name, value in (message.headers() or []))
            if headers.get(self.contract.marker_header) != self.contract.marker_value:
                self.handle_event(message)
                continue
            value = json.loads(message.value())
            if value["replay_id"] != replay_id or (marker and value != marker):
                sys.exit(f"{topic}/{message.partition()}: a marker of another replay: {value}")
            marker = value
            waiting.discard(message.partition())
            self.advance(message)
            self.checkpoint()
            with self.db.transaction():
                self.db.execute(
                    "UPDATE py_positions SET marker_seen = true "
                    "WHERE topic = %s AND partition = %s",
                    (topic, message.partition()),
                )
                self.db.execute(
                    "UPDATE py_bootstrap SET marker = %s WHERE replay_id = %s",
                    (json.dumps(marker), replay_id),
                )
        if waiting:
            return
        if marker is None:
            # Every marker was seen before a restart: the one kept then.
            (marker,) = self.db.execute(
                "SELECT marker FROM py_bootstrap WHERE replay_id = %s", (replay_id,)
            ).fetchone()
        with self.db.transaction():
            for partition, offset in marker["handoff"].items():
                self.db.execute(
                    "INSERT INTO py_positions (topic, partition, next_offset) VALUES (%s, %s, %s) "
                    "ON CONFLICT DO NOTHING",
                    (marker["live_topic"], int(partition), offset),
                )
            self.db.execute(
                "UPDATE py_bootstrap SET completed_at = now() WHERE replay_id = %s", (replay_id,)
            )
        self.positions.clear()
        print(f"bootstrap from replay {replay_id} complete; handoff {marker['handoff']}",
              flush=True)

    def live(self):
        """Phase 2: the live topic from the stored positions (the handoff's, after a bootstrap)."""
        topic = self.contract.live_topic
        stored = self.stored(topic)
        self.kafka.assign([
            TopicPartition(topic, p, stored.get(p, (0, False))[0]) for p in self.partitions(topic)
        ])
        print(f"reading {topic} live", flush=True)
        while not self.stopping:
            message = self.poll()
            if message is not None:
                self.handle_event(message)

    def poll(self):
        message = self.kafka.poll(0.5)
        if message is None:
            return None
        if message.error():
            raise KafkaException(message.error())
        return message

    def run(self):
        try:
            if self.args.bootstrap:
                self.bootstrap(self.args.bootstrap)
            if not self.stopping:
                self.live()
        finally:
            self.checkpoint()
            self.kafka.close()
            print(f"stopped: {self.applied} applied, {self.duplicates} duplicates absorbed",
                  flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL"), required=False)
    parser.add_argument("--brokers", default="127.0.0.1:19092")
    parser.add_argument("--topic-prefix", default=DOCUMENTED_PREFIX)
    parser.add_argument("--bootstrap", metavar="REPLAY_ID")
    parser.add_argument("--kafka", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    if not args.database_url:
        parser.error("--database-url (or DATABASE_URL) is required")
    Runner(args).run()


if __name__ == "__main__":
    main()
