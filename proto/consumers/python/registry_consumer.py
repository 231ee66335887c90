#!/usr/bin/env python3
"""A consumer of RA Ledger's assignment events through a schema registry, on confluent-kafka's
own ProtobufDeserializer and SchemaRegistryClient: for a topic the relay frames for registries
(value_formats = { assignment = "confluent_protobuf" }). Every value is read with the writer's
schema, fetched from the registry by the id in the record; no Rust code, and no copy of
events.proto but the one the registry holds.

It reads the topic from the beginning to the end each partition had when it started, keeps
"the current registered agent of each business in each jurisdiction" in memory (applying
each event id once: the relay delivers at least once), and prints what it found as one JSON
object: the records read, the schema ids and message indexes they carried, the distinct event
ids and the current assignments.

    registry_consumer.py --brokers HOST:PORT --registry http://HOST:PORT/apis/ccompat/v7
                         [--topic outbox.event.assignment] [--kafka key=value ...]

Apicurio Registry 3.3.3 answers GET /schemas/ids/{id}?format=serialized, which this client
asks for Protobuf, with the descriptor's bytes turned into text (every byte above 0x7f lost),
where Confluent's registry answers them base64-encoded. ApicurioSchemaRegistryClient mends
that one answer: it fetches the schema's .proto text (no format) and serializes its
descriptor itself. Against Confluent's registry use SchemaRegistryClient as it is.
"""

import argparse
import base64
import json
import pathlib
import sys
import tempfile

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2
from grpc_tools import protoc


class ApicurioSchemaRegistryClient(SchemaRegistryClient):
    """SchemaRegistryClient, with `format=serialized` answered as Confluent's registry does."""

    def __init__(self, conf):
        super().__init__(conf)
        self._serialized = {}

    def get_schema(self, schema_id, subject_name=None, fmt=None, reference_format=None):
        if fmt != "serialized":
            return super().get_schema(schema_id, subject_name, fmt, reference_format)
        if schema_id not in self._serialized:
            text = super().get_schema(schema_id, subject_name, None, reference_format)
            self._serialized[schema_id] = Schema(
                base64.b64encode(descriptor_of(text.schema_str)).decode("ascii"),
                text.schema_type,
                text.references,
            )
        return self._serialized[schema_id]


def descriptor_of(proto_text):
    """The serialized FileDescriptorProto of a self-contained .proto file's text."""
    with tempfile.TemporaryDirectory(prefix="ra-ledger-schema-") as folder:
        source = pathlib.Path(folder, "schema.proto")
        source.write_text(proto_text)
        out = pathlib.Path(folder, "schema.pb")
        include = pathlib.Path(protoc.__file__).parent / "_proto"
        status = protoc.main(
            ["protoc", f"-I{folder}", f"-I{include}", f"--descriptor_set_out={out}", "schema.proto"]
        )
        if status != 0:
            sys.exit(f"protoc could not compile the registry's schema (exit {status})")
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
        return files.file[0].SerializeToString()


def envelope_class(registry, topic):
    """The writer's envelope class, from the latest schema of the topic's subject: the
    deserializer wants a class to read into, and this consumer has no events.proto of its own."""
    from google.protobuf import descriptor_pool
    from google.protobuf.message_factory import GetMessageClass

    latest = registry.get_latest_version(f"{topic}-value")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(descriptor_of(latest.schema.schema_str)))
    return GetMessageClass(pool.FindMessageTypeByName("ra.ledger.v1.Envelope"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", required=True)
    parser.add_argument("--registry", required=True, help="the Confluent-compatible API's URL")
    parser.add_argument("--topic", default="outbox.event.assignment")
    parser.add_argument("--kafka", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()

    registry = ApicurioSchemaRegistryClient({"url": args.registry})
    deserialize = ProtobufDeserializer(
        envelope_class(registry, args.topic),
        {"subject.name.strategy.type": "TOPIC"},
        schema_registry_client=registry,
    )
    settings = {
        "bootstrap.servers": args.brokers,
        "group.id": "ra-ledger-registry-consumer",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
    }
    settings.update(dict(pair.split("=", 1) for pair in args.kafka))
    kafka = Consumer(settings)
    partitions = sorted(kafka.list_topics(args.topic, timeout=10).topics[args.topic].partitions)
    ends = {}
    for partition in partitions:
        low, high = kafka.get_watermark_offsets(TopicPartition(args.topic, partition), timeout=10)
        if high > low:
            ends[partition] = high
    kafka.assign([TopicPartition(args.topic, p, 0) for p in sorted(ends)])

    records, schema_ids, index_bytes, applied = 0, set(), set(), set()
    current = {}
    while ends:
        message = kafka.poll(1.0)
        if message is None:
            continue
        if message.error():
            raise KafkaException(message.error())
        value = message.value()
        # What the deserializer reads: the schema id, and the message indexes (0: the
        # first message of the schema, the envelope), shown so a test can see them.
        schema_ids.add(int.from_bytes(value[1:5], "big"))
        index_bytes.add(value[5])
        envelope = deserialize(value, SerializationContext(message.topic(), MessageField.VALUE))
        records += 1
        if envelope.event_id not in applied:
            applied.add(envelope.event_id)
            kind = envelope.WhichOneof("event")
            if kind == "assignment_started":
                started = envelope.assignment_started
                current[(started.business_id, started.jurisdiction)] = (
                    started.assignment_id,
                    started.contact_id,
                )
            elif kind == "assignment_ended":
                ended = envelope.assignment_ended
                key = (ended.business_id, ended.jurisdiction)
                if current.get(key, (None,))[0] == ended.assignment_id:
                    del current[key]
        if message.offset() + 1 >= ends.get(message.partition(), 0):
            ends.pop(message.partition(), None)
    kafka.close()
    print(json.dumps({
        "records": records,
        "schema_ids": sorted(schema_ids),
        "index_bytes": sorted(index_bytes),
        "event_ids": sorted(applied),
        "current": sorted([b, j, a, c] for (b, j), (a, c) in current.items()),
    }))


if __name__ == "__main__":
    main()
