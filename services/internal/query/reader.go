package query

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/streams"
)

// ErrNotFound is returned when a task or a dead-letter entry does not exist.
var ErrNotFound = errors.New("not found")

// ErrBadSpec begins TaskView.Unreadable: the task's flyball-tasks value is
// there but does not decode. The task exists, and can be updated or
// deleted.
var ErrBadSpec = errors.New("stored spec does not decode")

// Reader reads flyball's state. Create it once per process (the API) or per
// command (the CLI): NewReader binds the KV buckets.
type Reader struct {
	js        jetstream.JetStream
	tasks     jetstream.KeyValue
	schedules jetstream.KeyValue
	breakers  jetstream.KeyValue
	runtime   jetstream.KeyValue
	// taskIndex, when IndexTasks set it, holds the task IDs for TaskPage.
	taskIndex *keyIndex
	// IndexFallback, if set, is called with the reason each time a page
	// of TaskPage lists every task key because the task index (IndexTasks)
	// could not answer it: such a page costs every task, as without the
	// index.
	IndexFallback func(reason error)
	// Now is the clock used for ages, due counts and staleness. Defaults to time.Now.
	Now func() time.Time
	// MaxExplainInputs is how many inputs of a task Explain holds at
	// most; it leaves out older ones past it, and warns. Defaults to
	// DefaultMaxExplainInputs.
	MaxExplainInputs int
}

// NewReader binds every KV bucket the reads need.
func NewReader(ctx context.Context, js jetstream.JetStream) (*Reader, error) {
	r := &Reader{js: js, Now: time.Now}
	if err := jsutil.BindBuckets(ctx, js,
		jsutil.Bucket{Name: streams.BucketTasks, KV: &r.tasks},
		jsutil.Bucket{Name: streams.BucketSchedules, KV: &r.schedules},
		jsutil.Bucket{Name: streams.BucketBreakers, KV: &r.breakers},
		jsutil.Bucket{Name: streams.BucketRuntime, KV: &r.runtime},
	); err != nil {
		return nil, err
	}
	return r, nil
}

// IndexTasks makes r keep a sorted index of the task IDs (the keys of
// flyball-tasks) from a watch of entry headers, started by the first
// TaskPage, so that a page finds its IDs in O(log n + page) instead of
// listing every key: for a process that serves many pages (the API). A
// page waits for the initial load while it applies keys, and lists the
// keys itself when the watch failed or stalled (it starts again with the
// next page) or lags. The index
// holds the IDs only, no specs. It ends with ctx, or with the function
// returned, which waits for the watch to stop. Call it before the first
// read, once.
func (r *Reader) IndexTasks(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	r.taskIndex = newKeyIndex(ctx, r.tasks)
	return func() { r.taskIndex.stop(cancel) }
}

func (r *Reader) now() time.Time {
	if r.Now == nil {
		return time.Now().UTC()
	}
	return r.Now().UTC()
}

// Entries reads every live key of a bucket with one watch, which costs one
// subscription instead of a request per key, and stops the watch once the
// stored values are delivered.
func Entries(ctx context.Context, kv jetstream.KeyValue) (map[string]jetstream.KeyValueEntry, error) {
	out := map[string]jetstream.KeyValueEntry{}
	if err := eachEntry(ctx, kv, func(e jetstream.KeyValueEntry) { out[e.Key()] = e }); err != nil {
		return nil, err
	}
	return out, nil
}

// eachEntry calls fn with every live key of a bucket as Entries's watch
// delivers it, and keeps none of them: a caller that needs little of
// each value holds only that. A key updated while the watch delivers can
// come twice, its newer value last; Entries keeps the last.
func eachEntry(ctx context.Context, kv jetstream.KeyValue, fn func(jetstream.KeyValueEntry)) error {
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("read KV %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("read KV %s: %w", kv.Bucket(), ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return jsutil.WatchClosed(ctx, "read KV "+kv.Bucket())
			}
			if e == nil { // every stored value has been delivered
				return nil
			}
			fn(e)
		}
	}
}

// decodeEntries decodes every value of a bucket into T, skipping values
// that do not decode (a reader must not fail on one bad entry).
func decodeEntries[T any](ctx context.Context, kv jetstream.KeyValue) (map[string]T, map[string]jetstream.KeyValueEntry, error) {
	raw, err := Entries(ctx, kv)
	if err != nil {
		return nil, nil, err
	}
	out := make(map[string]T, len(raw))
	for k, e := range raw {
		var v T
		if json.Unmarshal(e.Value(), &v) == nil {
			out[k] = v
		}
	}
	return out, raw, nil
}

// lastN keeps the newest n values pushed (all of them when n <= 0).
type lastN[T any] struct {
	n     int
	items []T
}

func (l *lastN[T]) push(v T) {
	l.items = append(l.items, v)
	// len > 2n, without the overflow of 2n for a huge n.
	if l.n > 0 && len(l.items)-l.n > l.n {
		l.items = append(l.items[:0], l.items[len(l.items)-l.n:]...)
	}
}

func (l *lastN[T]) values() []T {
	if l.n > 0 && len(l.items) > l.n {
		return l.items[len(l.items)-l.n:]
	}
	return l.items
}

// drain returns the kept values and forgets them.
func (l *lastN[T]) drain() []T {
	v := l.values()
	l.items = nil
	return v
}
