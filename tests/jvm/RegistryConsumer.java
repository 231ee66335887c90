// A consumer of RA Ledger's assignment events on the JVM, through the schema registry with
// Apicurio's own Kafka deserializer (io.apicurio:apicurio-registry-serdes-protobuf-serde):
// for a topic the relay frames for registries (value_formats = { assignment =
// "confluent_protobuf" }). The deserializer reads the schema id from each record, fetches
// that schema from the registry, and parses the envelope into the class protoc generated
// from events.proto (protoc --java_out).
//
//   java -cp <classes>:<serde jars>/* RegistryConsumer BROKERS REGISTRY_V2_URL TOPIC
//
// REGISTRY_V2_URL is Apicurio's own API, e.g. http://127.0.0.1:18081/apis/registry/v2. It
// reads the topic from the beginning to the end each partition had when it started, keeps
// the current registered agent of each business in each jurisdiction (each event id applied
// once: the relay delivers at least once), and prints one JSON object: the records read, the
// distinct event ids, the current assignments.
//
// Apicurio's 2.x deserializer reads, after the 4-byte id, a length-delimited message name of
// its own where Confluent's framing puts message indexes. For the first message of a schema,
// the envelope's case, Confluent's framing is the single byte 0: an empty name to this
// deserializer, which then reads the rest as the class below. That is why the return class
// is set: without it the deserializer looks the empty name up in the schema and fails.

import com.fasterxml.jackson.databind.ObjectMapper;
import io.apicurio.registry.serde.protobuf.ProtobufKafkaDeserializer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import ra.ledger.v1.Events.Envelope;

public final class RegistryConsumer {
    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: RegistryConsumer BROKERS REGISTRY_V2_URL TOPIC");
            System.exit(2);
        }
        String brokers = args[0], registry = args[1], topic = args[2];
        Properties settings = new Properties();
        settings.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        settings.put(ConsumerConfig.GROUP_ID_CONFIG, "ra-ledger-jvm-registry-consumer");
        settings.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        settings.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        settings.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        settings.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ProtobufKafkaDeserializer.class.getName());
        settings.put("apicurio.registry.url", registry);
        // The schema id travels in the value, as Confluent's framing puts it: 4 bytes,
        // the content id that the registry's Confluent-compatible API answered.
        settings.put("apicurio.registry.headers.enabled", "false");
        settings.put("apicurio.registry.id-handler", "io.apicurio.registry.serde.Legacy4ByteIdHandler");
        settings.put("apicurio.registry.use-id", "contentId");
        settings.put("apicurio.registry.deserializer.value.return-class", Envelope.class.getName());

        int records = 0;
        Set<String> applied = new HashSet<>();
        Map<List<String>, List<String>> current = new HashMap<>();
        try (KafkaConsumer<String, Envelope> consumer = new KafkaConsumer<>(settings)) {
            List<TopicPartition> partitions = new ArrayList<>();
            consumer.partitionsFor(topic).forEach(p -> partitions.add(new TopicPartition(topic, p.partition())));
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> ends = new HashMap<>(consumer.endOffsets(partitions));
            ends.values().removeIf(end -> end == 0);
            while (!ends.isEmpty()) {
                for (ConsumerRecord<String, Envelope> record : consumer.poll(Duration.ofMillis(500))) {
                    records++;
                    Envelope envelope = record.value();
                    if (!applied.add(envelope.getEventId())) {
                        continue;
                    }
                    switch (envelope.getEventCase()) {
                        case ASSIGNMENT_STARTED -> {
                            var started = envelope.getAssignmentStarted();
                            current.put(List.of(started.getBusinessId(), started.getJurisdiction()),
                                    List.of(started.getAssignmentId(), started.getContactId()));
                        }
                        case ASSIGNMENT_ENDED -> {
                            var ended = envelope.getAssignmentEnded();
                            var key = List.of(ended.getBusinessId(), ended.getJurisdiction());
                            var open = current.get(key);
                            if (open != null && open.get(0).equals(ended.getAssignmentId())) {
                                current.remove(key);
                            }
                        }
                        default -> throw new IllegalStateException(
                                envelope.getEventId() + ": " + envelope.getEventCase() + " is not an assignment event");
                    }
                }
                ends.entrySet().removeIf(end -> consumer.position(end.getKey()) >= end.getValue());
            }
        }
        List<List<String>> rows = new ArrayList<>();
        current.forEach((key, open) -> rows.add(List.of(key.get(0), key.get(1), open.get(0), open.get(1))));
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("records", records);
        out.put("event_ids", new TreeSet<>(applied));
        out.put("current", rows);
        System.out.println(new ObjectMapper().writeValueAsString(out));
    }
}
