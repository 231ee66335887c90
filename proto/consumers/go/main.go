// A consumer of RA Ledger's assignment events through a schema registry, in Go: franz-go's
// kgo client reads a topic the relay frames for registries (value_formats = { assignment =
// "confluent_protobuf" }), and its sr package strips Confluent's framing and decodes each
// value into the Envelope type protoc-gen-go generated from events.proto. No Rust code.
//
// sr.Serde fetches nothing by itself: it decodes only the schema ids registered with it. So
// this consumer registers the id of the subject's latest schema before it reads, and any
// other id a record carries (an older version of events.proto, written before a change) when
// it first meets it, after asking the registry that the id names a Protobuf schema of the
// package ra.ledger.v1. The generated Envelope reads every version the subject holds: the
// relay keeps the subject BACKWARD_TRANSITIVE. sr.Index(0) tells the serde that the value
// carries message indexes and that the envelope is index [0] (the single byte 0x00 after
// the id); without it the index byte stays in front of the envelope's bytes.
//
// It reads the topic from the beginning to the end each partition had when it started
// (read_committed; transaction markers are kept so that a partition of an exactly-once
// topic is seen to its end), applies each event id once (the relay delivers at least once),
// keeps "the current registered agent of each business in each jurisdiction", and prints
// one JSON object: the records read, the schema ids and message-index bytes they carried,
// the distinct event ids and the current assignments. A record it cannot decode stops it
// with exit status 1, naming the record.
//
//	go-consumer --brokers HOST:PORT --registry http://HOST:PORT/apis/ccompat/v7
//	            [--topic outbox.event.assignment]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"

	ledgerv1 "ra-ledger.example/consumers/go/gen/ra/ledger/v1"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:19092", "Kafka's bootstrap servers, comma-separated")
	registry := flag.String("registry", "", "the schema registry's Confluent-compatible API, e.g. http://127.0.0.1:18081/apis/ccompat/v7")
	topic := flag.String("topic", "outbox.event.assignment", "the framed topic to read")
	flag.Parse()
	if *registry == "" {
		fail(errors.New("--registry is required: the registry's Confluent-compatible API URL (Apicurio: http://HOST:PORT/apis/ccompat/v7)"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	read, err := consume(ctx, strings.Split(*brokers, ","), *registry, *topic)
	if err != nil {
		fail(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(read); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "go-consumer:", err)
	os.Exit(1)
}

// Read is what the consumer prints.
type Read struct {
	Records    int         `json:"records"`
	SchemaIDs  []int       `json:"schema_ids"`
	IndexBytes []int       `json:"index_bytes"`
	EventIDs   []string    `json:"event_ids"`
	Current    [][4]string `json:"current"`
}

// envelopes decodes framed values, registering each schema id with its serde on first sight.
type envelopes struct {
	registry *sr.Client
	serde    *sr.Serde
}

// register makes `id` decodable as an Envelope, once the registry said it is events.proto.
func (e *envelopes) register(ctx context.Context, id int) error {
	schema, err := e.registry.SchemaByID(ctx, id)
	if err != nil {
		return fmt.Errorf("schema id %d: the registry answered %w", id, err)
	}
	if schema.Type != sr.TypeProtobuf || !strings.Contains(schema.Schema, "package ra.ledger.v1;") {
		return fmt.Errorf("schema id %d is not RA Ledger's events.proto (type %s): is --topic a framed RA Ledger topic?", id, schema.Type)
	}
	e.serde.Register(id, &ledgerv1.Envelope{},
		sr.Index(0),
		sr.DecodeFn(func(b []byte, v any) error { return proto.Unmarshal(b, v.(*ledgerv1.Envelope)) }),
	)
	return nil
}

// decode reads one framed value.
func (e *envelopes) decode(ctx context.Context, value []byte) (*ledgerv1.Envelope, error) {
	var envelope ledgerv1.Envelope
	err := e.serde.Decode(value, &envelope)
	if errors.Is(err, sr.ErrNotRegistered) {
		id, _, idErr := e.serde.DecodeID(value)
		if idErr != nil {
			return nil, idErr
		}
		if err := e.register(ctx, id); err != nil {
			return nil, err
		}
		err = e.serde.Decode(value, &envelope)
	}
	return &envelope, err
}

// ends is each partition of `topic` holding records, with its end offset now.
func ends(ctx context.Context, client *kgo.Client, topic string) (map[int32]int64, error) {
	admin := kadm.NewClient(client)
	starts, err := admin.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("start offsets of %s: %w", topic, err)
	}
	finals, err := admin.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	if err := finals.Error(); err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	finals.Each(func(end kadm.ListedOffset) {
		if start, ok := starts.Lookup(topic, end.Partition); ok && end.Offset > start.Offset {
			out[end.Partition] = end.Offset
		}
	})
	return out, nil
}

func consume(ctx context.Context, brokers []string, registryURL, topic string) (*Read, error) {
	registry, err := sr.NewClient(sr.URLs(registryURL))
	if err != nil {
		return nil, fmt.Errorf("registry %s: %w", registryURL, err)
	}
	decoder := &envelopes{registry: registry, serde: sr.NewSerde()}
	latest, err := registry.SchemaByVersion(ctx, topic+"-value", -1)
	if err != nil {
		return nil, fmt.Errorf("subject %s-value: %w (is the topic framed, and the registry the relay's?)", topic, err)
	}
	if err := decoder.register(ctx, latest.ID); err != nil {
		return nil, err
	}
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	remaining, err := ends(ctx, admin, topic)
	admin.Close()
	if err != nil {
		return nil, err
	}
	from := map[int32]kgo.Offset{}
	for partition := range remaining {
		from[partition] = kgo.NewOffset().AtStart()
	}
	client, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
	)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	fold := newFold()
	for len(remaining) > 0 {
		fetches := client.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("partitions %v not read to their end: %w", remaining, err)
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			return nil, fmt.Errorf("fetching %s: %w", topic, errs[0].Err)
		}
		for _, record := range fetches.Records() {
			if !record.Attrs.IsControl() {
				if err := fold.read(ctx, decoder, record); err != nil {
					return nil, err
				}
			}
			if end, ok := remaining[record.Partition]; ok && record.Offset+1 >= end {
				delete(remaining, record.Partition)
			}
		}
	}
	return fold.result(), nil
}

// fold is what the records said so far.
type fold struct {
	records    int
	schemaIDs  map[int]bool
	indexBytes map[int]bool
	applied    map[string]bool
	current    map[[2]string][2]string
}

func newFold() *fold {
	return &fold{
		schemaIDs:  map[int]bool{},
		indexBytes: map[int]bool{},
		applied:    map[string]bool{},
		current:    map[[2]string][2]string{},
	}
}

// read decodes one record and applies its event, once per event id.
func (f *fold) read(ctx context.Context, decoder *envelopes, record *kgo.Record) error {
	envelope, err := decoder.decode(ctx, record.Value)
	if err != nil {
		return fmt.Errorf("%s/%d@%d is not a framed envelope: %w", record.Topic, record.Partition, record.Offset, err)
	}
	f.records++
	// What the serde read: the schema id, and the message indexes (0x00: index [0]).
	id, rest, _ := decoder.serde.DecodeID(record.Value)
	f.schemaIDs[id] = true
	if len(rest) > 0 {
		f.indexBytes[int(rest[0])] = true
	}
	if f.applied[envelope.EventId] {
		return nil // a duplicate: the relay delivers at least once
	}
	f.applied[envelope.EventId] = true
	if started := envelope.GetAssignmentStarted(); started != nil {
		f.current[[2]string{started.BusinessId, started.Jurisdiction}] = [2]string{started.AssignmentId, started.ContactId}
	} else if ended := envelope.GetAssignmentEnded(); ended != nil {
		key := [2]string{ended.BusinessId, ended.Jurisdiction}
		if f.current[key][0] == ended.AssignmentId {
			delete(f.current, key)
		}
	}
	return nil
}

func (f *fold) result() *Read {
	read := &Read{Records: f.records, EventIDs: []string{}, Current: [][4]string{}}
	for id := range f.schemaIDs {
		read.SchemaIDs = append(read.SchemaIDs, id)
	}
	for index := range f.indexBytes {
		read.IndexBytes = append(read.IndexBytes, index)
	}
	for id := range f.applied {
		read.EventIDs = append(read.EventIDs, id)
	}
	for key, value := range f.current {
		read.Current = append(read.Current, [4]string{key[0], key[1], value[0], value[1]})
	}
	sort.Ints(read.SchemaIDs)
	sort.Ints(read.IndexBytes)
	sort.Strings(read.EventIDs)
	sort.Slice(read.Current, func(i, j int) bool {
		return strings.Join(read.Current[i][:], "\x00") < strings.Join(read.Current[j][:], "\x00")
	})
	return read
}
