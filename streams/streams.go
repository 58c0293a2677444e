package streams

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Stream names.
const (
	StreamTasks      = "TASKS"
	StreamDispatch   = "DISPATCH"
	StreamRuns       = "RUNS"
	StreamDeadLetter = "DEADLETTER"
	StreamHealth     = "HEALTH"
	StreamAdvisories = "ADVISORIES"
)

// KV bucket names. Each bucket is backed by the stream "KV_<bucket>".
const (
	BucketTasks     = "flyball-tasks"
	BucketSchedules = "flyball-schedules"
	BucketBreakers  = "flyball-breakers"
	BucketRuntime   = "flyball-runtime"
	// BucketAttempts counts the attempts of each dispatch (key
	// "<task>.<scheduled unix ms>"), so breaker deferrals and crash
	// redeliveries do not burn attempts. Entries expire after 72h: longer
	// than the longest retry delay a spec can ask for (24h maxDelay × (1 +
	// jitter), under 48h), since the next attempt reads the record.
	BucketAttempts = "flyball-attempts"
	// BucketPauses holds a key for every paused task (the governor is its
	// only writer), so the executor can watch for pauses without
	// receiving the schedule every run rewrites. An entry is a hint: the
	// task's schedule in BucketSchedules is the truth.
	BucketPauses = "flyball-pauses"
	// BucketProbes holds the probe claims of half-open breakers (key
	// "<breaker key>.<retryAt unix ms>"): an executor calls a target whose
	// breaker is half-open only after it creates the claim, so one call
	// per breaker and half-open period probes the target. Each claim
	// expires with its own TTL (the call's timeout plus the time to
	// report it); the bucket's 1h max age is a backstop.
	BucketProbes = "flyball-probes"
	// BucketLeases holds one key per lease (key "timer"): the replica
	// whose name is the value does the leased work, and the others stand
	// by (services/internal/lease).
	BucketLeases = "flyball-leases"
	// LeaseTimer is the timers' key in BucketLeases.
	LeaseTimer = "timer"
)

// Durable consumer names. A durable name is unique per stream, not
// globally: "governor" exists on TASKS, RUNS and HEALTH.
const (
	ConsumerGovernor   = "governor"
	ConsumerExecutor   = "executor"
	ConsumerBreaker    = "breaker"
	ConsumerDeadLetter = "deadletter"
)

// kvStreamPrefix is the prefix of a KV bucket's backing stream name.
const kvStreamPrefix = "KV_"

// kvMaxHistory mirrors jetstream.KeyValueMaxHistory.
const kvMaxHistory = 64

const (
	dirStreams   = "defs/streams"
	dirKV        = "defs/kv"
	dirConsumers = "defs/consumers"
)

//go:embed defs/streams/*.json defs/kv/*.json defs/consumers/*.json
var defsFS embed.FS

type streamDef struct {
	file string // path inside defsFS
	cfg  jetstream.StreamConfig
}

type consumerDef struct {
	file   string // path inside defsFS
	stream string
	cfg    jetstream.ConsumerConfig
}

// StreamConfigs returns the config of every stream, including the KV_<bucket>
// streams backing the KV buckets, parsed from the embedded definitions and
// sorted by stream name.
func StreamConfigs() ([]jetstream.StreamConfig, error) {
	streams, _, err := load()
	if err != nil {
		return nil, err
	}
	out := make([]jetstream.StreamConfig, len(streams))
	for i, d := range streams {
		out[i] = d.cfg
	}
	return out, nil
}

// ConsumerConfigs returns the config of every durable consumer, parsed from
// the embedded definitions, keyed by stream name and sorted by consumer name.
func ConsumerConfigs() (map[string][]jetstream.ConsumerConfig, error) {
	_, consumers, err := load()
	if err != nil {
		return nil, err
	}
	out := make(map[string][]jetstream.ConsumerConfig)
	for _, d := range consumers {
		out[d.stream] = append(out[d.stream], d.cfg)
	}
	return out, nil
}

// Durable names one durable consumer: Name on Stream.
type Durable struct{ Stream, Name string }

// Durables lists every durable consumer defined, sorted by stream, then
// name.
func Durables() ([]Durable, error) {
	_, consumers, err := load()
	if err != nil {
		return nil, err
	}
	out := make([]Durable, len(consumers))
	for i, d := range consumers {
		out[i] = Durable{Stream: d.stream, Name: d.cfg.Durable}
	}
	return out, nil
}

// load parses and validates every embedded definition. Streams are sorted by
// name; consumers by stream, then name.
func load() ([]streamDef, []consumerDef, error) {
	var streams []streamDef
	seen := make(map[string]string) // stream name -> file

	add := func(d streamDef) error {
		if prev, ok := seen[d.cfg.Name]; ok {
			return fmt.Errorf("streams: %s: stream %q already defined in %s", d.file, d.cfg.Name, prev)
		}
		seen[d.cfg.Name] = d.file
		streams = append(streams, d)
		return nil
	}

	err := eachJSON(dirStreams, func(file, base string, data []byte) error {
		var cfg jetstream.StreamConfig
		if err := decodeStrict(data, &cfg); err != nil {
			return fmt.Errorf("streams: %s: %w", file, err)
		}
		if cfg.Name != base {
			return fmt.Errorf("streams: %s: name %q does not match file name", file, cfg.Name)
		}
		if strings.HasPrefix(cfg.Name, kvStreamPrefix) {
			return fmt.Errorf("streams: %s: KV streams belong in %s", file, dirKV)
		}
		return add(streamDef{file: file, cfg: cfg})
	})
	if err != nil {
		return nil, nil, err
	}

	err = eachJSON(dirKV, func(file, bucket string, data []byte) error {
		var cfg jetstream.StreamConfig
		if err := decodeStrict(data, &cfg); err != nil {
			return fmt.Errorf("streams: %s: %w", file, err)
		}
		if err := validateKV(bucket, cfg); err != nil {
			return fmt.Errorf("streams: %s: %w", file, err)
		}
		return add(streamDef{file: file, cfg: cfg})
	})
	if err != nil {
		return nil, nil, err
	}

	var consumers []consumerDef
	err = eachJSON(dirConsumers, func(file, base string, data []byte) error {
		stream, durable, ok := strings.Cut(base, ".")
		if !ok || stream == "" || durable == "" || strings.Contains(durable, ".") {
			return fmt.Errorf("streams: %s: file name must be <STREAM>.<durable>.json", file)
		}
		var cfg jetstream.ConsumerConfig
		if err := decodeStrict(data, &cfg); err != nil {
			return fmt.Errorf("streams: %s: %w", file, err)
		}
		if _, ok := seen[stream]; !ok {
			return fmt.Errorf("streams: %s: stream %q is not defined", file, stream)
		}
		if cfg.Durable != durable {
			return fmt.Errorf("streams: %s: durable_name %q does not match file name durable %q", file, cfg.Durable, durable)
		}
		if cfg.Name != durable {
			return fmt.Errorf("streams: %s: name %q does not match file name durable %q", file, cfg.Name, durable)
		}
		if cfg.DeliverSubject != "" {
			return fmt.Errorf("streams: %s: push consumers are not supported (deliver_subject set)", file)
		}
		consumers = append(consumers, consumerDef{file: file, stream: stream, cfg: cfg})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}

	slices.SortFunc(streams, func(a, b streamDef) int { return strings.Compare(a.cfg.Name, b.cfg.Name) })
	slices.SortFunc(consumers, func(a, b consumerDef) int {
		if c := strings.Compare(a.stream, b.stream); c != 0 {
			return c
		}
		return strings.Compare(a.cfg.Name, b.cfg.Name)
	})
	return streams, consumers, nil
}

// validateKV checks that cfg is a stream jetstream.KeyValue can bind to as
// bucket, with roll-ups off.
//
// jetstream.CreateKeyValue makes buckets with allow_rollup_hdrs, for
// kv.Purge (a message with "Nats-Rollup: sub"). nats-server honours the
// header on any message a user may publish into the stream, and
// "Nats-Rollup: all" removes every other message of the stream: a user
// that may write one key of a bucket (a service's own heartbeat entry)
// could empty the whole bucket. flyball never purges a key (the sweeper
// deletes, and compacts the markers: services/sweeper/compact.go), so no
// bucket allows roll-ups, and so none sets subject_delete_marker_ttl,
// which makes nats-server turn them back on. CreateKeyValue over these
// streams fails (the bucket exists with another config); binding,
// Get, Create, Update, Put, Delete, watches and key lists work.
func validateKV(bucket string, cfg jetstream.StreamConfig) error {
	if want := kvStreamPrefix + bucket; cfg.Name != want {
		return fmt.Errorf("name %q must be %q", cfg.Name, want)
	}
	if want := []string{"$KV." + bucket + ".>"}; !slices.Equal(cfg.Subjects, want) {
		return fmt.Errorf("subjects %q must be %q", cfg.Subjects, want)
	}
	switch {
	case cfg.MaxMsgsPerSubject < 1 || cfg.MaxMsgsPerSubject > kvMaxHistory:
		return fmt.Errorf("max_msgs_per_subject (history) %d must be in 1..%d", cfg.MaxMsgsPerSubject, kvMaxHistory)
	case cfg.Retention != jetstream.LimitsPolicy:
		return errors.New(`retention must be "limits"`)
	case cfg.Discard != jetstream.DiscardNew:
		return errors.New(`discard must be "new"`)
	case cfg.AllowRollup:
		return errors.New("allow_rollup_hdrs must be false: a Nats-Rollup header on any key a user may write would empty the bucket")
	case cfg.SubjectDeleteMarkerTTL != 0:
		return errors.New("subject_delete_marker_ttl must be unset: nats-server turns roll-ups on for it")
	case !cfg.DenyDelete:
		return errors.New("deny_delete must be true")
	case !cfg.AllowDirect:
		return errors.New("allow_direct must be true")
	}
	return nil
}

// eachJSON calls fn for every *.json file in dir, in lexical order, with the
// file's path, its base name without ".json" and its contents.
func eachJSON(dir string, fn func(file, base string, data []byte) error) error {
	entries, err := fs.ReadDir(defsFS, dir)
	if err != nil {
		return fmt.Errorf("streams: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() || path.Ext(e.Name()) != ".json" {
			continue
		}
		file := path.Join(dir, e.Name())
		data, err := defsFS.ReadFile(file)
		if err != nil {
			return fmt.Errorf("streams: %w", err)
		}
		if err := fn(file, strings.TrimSuffix(e.Name(), ".json"), data); err != nil {
			return err
		}
	}
	return nil
}

// decodeStrict decodes exactly one JSON value from data into v, rejecting
// unknown fields and trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after JSON value")
	}
	return nil
}

// maxMsgsPerSubject is the description nats-server (v2.15.2) gives error
// 10077 when the limit that refused a message is max_msgs_per_subject: its
// ErrMaxMsgsPerSubject, which every store path (file, memory, the
// clustered and batch pre-checks) returns as is. A test holds it to the
// server's.
const maxMsgsPerSubject = "maximum messages per subject exceeded"

// IsSubjectFull reports whether a publish failed because the subject already
// holds its one permitted message: on DISPATCH, whose definition keeps one
// message per subject and refuses a second, this means the task's run is
// already pending.
//
// Error 10077 alone does not tell: it is the server's "store failed", and
// names a stream-wide limit reached (maximum messages exceeded, maximum
// bytes exceeded) or a storage error as well. Only its description tells
// them apart, and nats.go has no sentinel for it, so the description must
// be exactly the per-subject one; anything else is a failure to store.
func IsSubjectFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10077 && apiErr.Description == maxMsgsPerSubject
}
