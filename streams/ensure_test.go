package streams

import (
	"cmp"
	"context"
	"errors"
	"io/fs"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

const day = 24 * time.Hour

// startJS starts a private in-process JetStream server for one test.
func startJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	_, js := startJSAt(t, t.TempDir())
	return js
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustEnsure(t *testing.T, ctx context.Context, js jetstream.JetStream) {
	t.Helper()
	if err := Ensure(ctx, js); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
}

// TestDefinitionsDecodeIntoServerTypes proves every embedded file is valid
// input for `nats stream add --config` / `nats consumer add --config`: it
// decodes strictly into nats-server's own config types.
func TestDefinitionsDecodeIntoServerTypes(t *testing.T) {
	t.Parallel()
	counts := map[string]int{}
	for _, dir := range []string{dirStreams, dirKV, dirConsumers} {
		err := fs.WalkDir(defsFS, dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if path.Ext(p) != ".json" {
				t.Errorf("%s: unexpected non-JSON file", p)
				return nil
			}
			data, err := defsFS.ReadFile(p)
			if err != nil {
				return err
			}
			base := strings.TrimSuffix(path.Base(p), ".json")
			switch dir {
			case dirStreams, dirKV:
				var cfg server.StreamConfig
				if err := decodeStrict(data, &cfg); err != nil {
					t.Errorf("%s: decode into server.StreamConfig: %v", p, err)
					return nil
				}
				want := base
				if dir == dirKV {
					want = kvStreamPrefix + base
				}
				if cfg.Name != want {
					t.Errorf("%s: name %q, want %q", p, cfg.Name, want)
				}
				if cfg.Storage != server.FileStorage || cfg.Replicas != 1 {
					t.Errorf("%s: storage %v replicas %d, want file/1", p, cfg.Storage, cfg.Replicas)
				}
			case dirConsumers:
				var cfg server.ConsumerConfig
				if err := decodeStrict(data, &cfg); err != nil {
					t.Errorf("%s: decode into server.ConsumerConfig: %v", p, err)
					return nil
				}
				_, durable, _ := strings.Cut(base, ".")
				if cfg.Durable != durable || cfg.Name != durable {
					t.Errorf("%s: name %q durable_name %q, want %q", p, cfg.Name, cfg.Durable, durable)
				}
				if cfg.AckPolicy != server.AckExplicit || cfg.DeliverPolicy != server.DeliverAll ||
					cfg.ReplayPolicy != server.ReplayInstant || cfg.Replicas != 0 {
					t.Errorf("%s: want explicit ack, deliver all, replay instant, num_replicas 0", p)
				}
			}
			counts[dir]++
			return nil
		})
		if err != nil {
			t.Fatalf("walk %s: %v", dir, err)
		}
	}
	want := map[string]int{dirStreams: 6, dirKV: 8, dirConsumers: 8}
	if !reflect.DeepEqual(counts, want) {
		t.Errorf("file counts %v, want %v", counts, want)
	}
}

func TestConfigsParse(t *testing.T) {
	t.Parallel()
	scs, err := StreamConfigs()
	if err != nil {
		t.Fatalf("StreamConfigs: %v", err)
	}
	var names []string
	for _, c := range scs {
		names = append(names, c.Name)
	}
	wantNames := []string{
		StreamAdvisories, StreamDeadLetter, StreamDispatch, StreamHealth,
		"KV_" + BucketAttempts, "KV_" + BucketBreakers, "KV_" + BucketLeases, "KV_" + BucketPauses, "KV_" + BucketProbes, "KV_" + BucketRuntime, "KV_" + BucketSchedules, "KV_" + BucketTasks,
		StreamRuns, StreamTasks,
	}
	if !slices.Equal(names, wantNames) {
		t.Errorf("stream names %q, want %q", names, wantNames)
	}

	ccs, err := ConsumerConfigs()
	if err != nil {
		t.Fatalf("ConsumerConfigs: %v", err)
	}
	got := map[string][]string{}
	for stream, cs := range ccs {
		for _, c := range cs {
			got[stream] = append(got[stream], c.Durable)
		}
	}
	want := map[string][]string{
		StreamTasks:      {ConsumerGovernor},
		StreamRuns:       {ConsumerBreaker, ConsumerDeadLetter, ConsumerGovernor},
		StreamHealth:     {ConsumerGovernor},
		StreamDispatch:   {ConsumerExecutor},
		StreamAdvisories: {ConsumerDeadLetter},
		StreamDeadLetter: {ConsumerGovernor},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("consumers %v, want %v", got, want)
	}
}

type streamWant struct {
	subjects   []string
	retention  jetstream.RetentionPolicy
	discard    jetstream.DiscardPolicy
	maxPerSubj int64
	discardNPS bool
	dup        time.Duration
	maxAge     time.Duration
}

// wantStreams is the specification, written independently of the files.
var wantStreams = map[string]streamWant{
	StreamTasks:      {[]string{"flyball.task.>"}, jetstream.LimitsPolicy, jetstream.DiscardOld, -1, false, 2 * time.Minute, 365 * day},
	StreamDispatch:   {[]string{"flyball.dispatch.*"}, jetstream.WorkQueuePolicy, jetstream.DiscardNew, 1, true, 2 * time.Minute, 0},
	StreamRuns:       {[]string{"flyball.run.>"}, jetstream.LimitsPolicy, jetstream.DiscardOld, 1000, false, 2 * time.Minute, 7 * day},
	StreamDeadLetter: {[]string{"flyball.deadletter.*"}, jetstream.LimitsPolicy, jetstream.DiscardOld, -1, false, 24 * time.Hour, 90 * day},
	StreamHealth:     {[]string{"flyball.breaker.>", "flyball.runtime.>"}, jetstream.LimitsPolicy, jetstream.DiscardOld, 1000, false, 2 * time.Minute, 7 * day},
	StreamAdvisories: {[]string{
		"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.DISPATCH.*",
		"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.DISPATCH.*",
	}, jetstream.LimitsPolicy, jetstream.DiscardOld, -1, false, 2 * time.Minute, 7 * day},
	"KV_" + BucketTasks:     {[]string{"$KV." + BucketTasks + ".>"}, jetstream.LimitsPolicy, jetstream.DiscardNew, 5, false, 2 * time.Minute, 0},
	"KV_" + BucketSchedules: {[]string{"$KV." + BucketSchedules + ".>"}, jetstream.LimitsPolicy, jetstream.DiscardNew, 1, false, 2 * time.Minute, 0},
	"KV_" + BucketBreakers:  {[]string{"$KV." + BucketBreakers + ".>"}, jetstream.LimitsPolicy, jetstream.DiscardNew, 1, false, 2 * time.Minute, 0},
	"KV_" + BucketPauses:    {[]string{"$KV." + BucketPauses + ".>"}, jetstream.LimitsPolicy, jetstream.DiscardNew, 1, false, 2 * time.Minute, 0},
	"KV_" + BucketRuntime:   {[]string{"$KV." + BucketRuntime + ".>"}, jetstream.LimitsPolicy, jetstream.DiscardNew, 1, false, 2 * time.Minute, 0},
	"KV_" + BucketLeases:    {[]string{"$KV." + BucketLeases + ".>"}, jetstream.LimitsPolicy, jetstream.DiscardNew, 1, false, 2 * time.Minute, 0},
	"KV_" + BucketAttempts:  {[]string{"$KV." + BucketAttempts + ".>"}, jetstream.LimitsPolicy, jetstream.DiscardNew, 1, false, 2 * time.Minute, 3 * day},
	"KV_" + BucketProbes:    {[]string{"$KV." + BucketProbes + ".>"}, jetstream.LimitsPolicy, jetstream.DiscardNew, 1, false, 2 * time.Minute, time.Hour},
}

type consumerWant struct {
	filters       []string
	ackWait       time.Duration
	maxDeliver    int
	maxAckPending int
}

var wantConsumers = map[string]consumerWant{
	StreamTasks + "." + ConsumerGovernor:        {[]string{"flyball.task.>"}, 30 * time.Second, -1, 1000},
	StreamRuns + "." + ConsumerGovernor:         {[]string{"flyball.run.succeeded.*", "flyball.run.failed.*", "flyball.run.skipped.*"}, 30 * time.Second, -1, 10000},
	StreamRuns + "." + ConsumerBreaker:          {[]string{"flyball.run.failed.*", "flyball.run.recovered.*"}, 30 * time.Second, -1, 10000},
	StreamRuns + "." + ConsumerDeadLetter:       {[]string{"flyball.run.failed.*"}, 30 * time.Second, -1, 1000},
	StreamHealth + "." + ConsumerGovernor:       {[]string{"flyball.breaker.>"}, 30 * time.Second, -1, 1000},
	StreamDispatch + "." + ConsumerExecutor:     {[]string{"flyball.dispatch.*"}, 30 * time.Second, 50, 20000},
	StreamAdvisories + "." + ConsumerDeadLetter: {nil, 30 * time.Second, -1, 1000},
	StreamDeadLetter + "." + ConsumerGovernor:   {[]string{"flyball.deadletter.*"}, 30 * time.Second, -1, 1000},
}

type snapshot struct {
	streams   map[string]jetstream.StreamConfig
	consumers map[string]jetstream.ConsumerConfig
}

func takeSnapshot(t *testing.T, ctx context.Context, js jetstream.JetStream) snapshot {
	t.Helper()
	snap := snapshot{streams: map[string]jetstream.StreamConfig{}, consumers: map[string]jetstream.ConsumerConfig{}}
	for name := range wantStreams {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		snap.streams[name] = s.CachedInfo().Config
	}
	for key := range wantConsumers {
		stream, durable, _ := strings.Cut(key, ".")
		c, err := js.Consumer(ctx, stream, durable)
		if err != nil {
			t.Fatalf("consumer %s: %v", key, err)
		}
		snap.consumers[key] = c.CachedInfo().Config
	}
	return snap
}

func TestEnsureIdempotent(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	js := startJS(t)

	mustEnsure(t, ctx, js)
	before := takeSnapshot(t, ctx, js)
	mustEnsure(t, ctx, js)
	after := takeSnapshot(t, ctx, js)

	for name, want := range wantStreams {
		got := after.streams[name]
		if !slices.Equal(got.Subjects, want.subjects) {
			t.Errorf("%s: subjects %q, want %q", name, got.Subjects, want.subjects)
		}
		if got.Retention != want.retention {
			t.Errorf("%s: retention %v, want %v", name, got.Retention, want.retention)
		}
		if got.Discard != want.discard {
			t.Errorf("%s: discard %v, want %v", name, got.Discard, want.discard)
		}
		if got.MaxMsgsPerSubject != want.maxPerSubj {
			t.Errorf("%s: max_msgs_per_subject %d, want %d", name, got.MaxMsgsPerSubject, want.maxPerSubj)
		}
		if got.DiscardNewPerSubject != want.discardNPS {
			t.Errorf("%s: discard_new_per_subject %v, want %v", name, got.DiscardNewPerSubject, want.discardNPS)
		}
		if got.Duplicates != want.dup {
			t.Errorf("%s: duplicate_window %v, want %v", name, got.Duplicates, want.dup)
		}
		if got.MaxAge != want.maxAge {
			t.Errorf("%s: max_age %v, want %v", name, got.MaxAge, want.maxAge)
		}
		if got.Storage != jetstream.FileStorage || got.Replicas != 1 {
			t.Errorf("%s: storage %v replicas %d, want file/1", name, got.Storage, got.Replicas)
		}
	}
	for key, want := range wantConsumers {
		got := after.consumers[key]
		filters := got.FilterSubjects
		if got.FilterSubject != "" {
			filters = []string{got.FilterSubject}
		}
		if !slices.Equal(filters, want.filters) {
			t.Errorf("%s: filters %q, want %q", key, filters, want.filters)
		}
		if got.AckWait != want.ackWait {
			t.Errorf("%s: ack_wait %v, want %v", key, got.AckWait, want.ackWait)
		}
		if got.MaxDeliver != want.maxDeliver {
			t.Errorf("%s: max_deliver %d, want %d", key, got.MaxDeliver, want.maxDeliver)
		}
		if got.MaxAckPending != want.maxAckPending {
			t.Errorf("%s: max_ack_pending %d, want %d", key, got.MaxAckPending, want.maxAckPending)
		}
		if got.AckPolicy != jetstream.AckExplicitPolicy || got.DeliverPolicy != jetstream.DeliverAllPolicy ||
			got.ReplayPolicy != jetstream.ReplayInstantPolicy || got.Durable == "" {
			t.Errorf("%s: want durable, explicit ack, deliver all, replay instant: %+v", key, got)
		}
	}
	if got := after.consumers[StreamDispatch+"."+ConsumerExecutor].MaxWaiting; got != 512 {
		t.Errorf("DISPATCH.executor: max_waiting %d, want 512", got)
	}

	if !reflect.DeepEqual(before, after) {
		for name := range before.streams {
			if !reflect.DeepEqual(before.streams[name], after.streams[name]) {
				t.Errorf("second Ensure changed stream %s:\nbefore %+v\nafter  %+v", name, before.streams[name], after.streams[name])
			}
		}
		for key := range before.consumers {
			if !reflect.DeepEqual(before.consumers[key], after.consumers[key]) {
				t.Errorf("second Ensure changed consumer %s:\nbefore %+v\nafter  %+v", key, before.consumers[key], after.consumers[key])
			}
		}
	}
}

func TestEnsureRepairsDrift(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	js := startJS(t)

	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       StreamTasks,
		Subjects:   []string{"flyball.task.>"},
		Storage:    jetstream.FileStorage,
		MaxAge:     time.Hour,
		Duplicates: 30 * time.Second,
	}); err != nil {
		t.Fatalf("pre-create TASKS: %v", err)
	}
	if _, err := js.CreateConsumer(ctx, StreamTasks, jetstream.ConsumerConfig{
		Durable:       ConsumerGovernor,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       5 * time.Second,
		FilterSubject: "flyball.task.created.*",
	}); err != nil {
		t.Fatalf("pre-create TASKS.governor: %v", err)
	}

	mustEnsure(t, ctx, js)

	s, err := js.Stream(ctx, StreamTasks)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	// The duplicate window and the direct gets are flyball's; the max
	// age, a retention limit of a history stream, is the operator's.
	tasks := s.CachedInfo().Config
	if got, want := tasks.Duplicates, wantStreams[StreamTasks].dup; got != want || !tasks.AllowDirect {
		t.Errorf("TASKS duplicate_window %v allow_direct %t, want %v true", got, tasks.AllowDirect, want)
	}
	if got := tasks.MaxAge; got != time.Hour {
		t.Errorf("TASKS max_age %v, want the stream's own 1h kept", got)
	}
	c, err := js.Consumer(ctx, StreamTasks, ConsumerGovernor)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	want := wantConsumers[StreamTasks+"."+ConsumerGovernor]
	got := c.CachedInfo().Config
	filters := got.FilterSubjects
	if len(filters) == 0 && got.FilterSubject != "" {
		filters = []string{got.FilterSubject}
	}
	if got.AckWait != want.ackWait || !slices.Equal(filters, want.filters) {
		t.Errorf("TASKS.governor ack_wait %v filters %q, want %v %q", got.AckWait, filters, want.ackWait, want.filters)
	}
	// A durable made before governors were pinned is upgraded in place.
	if got.PriorityPolicy != jetstream.PriorityPolicyPinned || !slices.Equal(got.PriorityGroups, []string{"governor"}) || got.PinnedTTL != 15*time.Second {
		t.Errorf("TASKS.governor priority %v groups %q timeout %v, want pinned_client [governor] 15s", got.PriorityPolicy, got.PriorityGroups, got.PinnedTTL)
	}
}

func TestEnsureOptions(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	js := startJS(t)

	for _, n := range []int{0, -1, 6} {
		if err := Ensure(ctx, js, WithReplicas(n)); err == nil {
			t.Errorf("WithReplicas(%d): want error", n)
		}
	}
	if err := Ensure(ctx, js, WithReplicas(1)); err != nil {
		t.Fatalf("Ensure(WithReplicas(1)): %v", err)
	}
	// Standalone server: R3 must fail, and the error must name the file.
	err := Ensure(ctx, js, WithReplicas(3))
	if err == nil {
		t.Fatal("Ensure(WithReplicas(3)) on a standalone server: want error")
	}
	if !strings.Contains(err.Error(), ".json") {
		t.Errorf("error %q does not name the definition file", err)
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		t.Errorf("error %v does not wrap a *jetstream.APIError", err)
	}
}

func TestKVBucketsUsable(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	js := startJS(t)
	mustEnsure(t, ctx, js)

	// Every bucket binds (jetstream.KeyValue checks only that it keeps a
	// history), and takes what the services do to it: Create, Update,
	// Get, Delete (revision-checked, as the sweeper and the executor do)
	// and key lists. Roll-ups are off (TestKVBucketsRefuseRollups), so
	// Purge, which sends "Nats-Rollup: sub", is refused.
	for _, bucket := range []string{BucketTasks, BucketSchedules, BucketBreakers, BucketPauses, BucketRuntime, BucketLeases, BucketAttempts, BucketProbes} {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatalf("KeyValue(%s): %v", bucket, err)
		}
		rev, err := kv.Create(ctx, "k.1", []byte("a"))
		if err != nil {
			t.Fatalf("%s: Create: %v", bucket, err)
		}
		if rev, err = kv.Update(ctx, "k.1", []byte("b"), rev); err != nil {
			t.Fatalf("%s: Update: %v", bucket, err)
		}
		if e, err := kv.Get(ctx, "k.1"); err != nil || string(e.Value()) != "b" {
			t.Fatalf("%s: Get: %v (%v)", bucket, e, err)
		}
		if err := kv.Delete(ctx, "k.1", jetstream.LastRevision(rev-1)); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			t.Errorf("%s: Delete at a stale revision: err %v, want ErrKeyRevisionMismatch", bucket, err)
		}
		if err := kv.Delete(ctx, "k.1", jetstream.LastRevision(rev)); err != nil {
			t.Fatalf("%s: Delete: %v", bucket, err)
		}
		if _, err := kv.Get(ctx, "k.1"); !errors.Is(err, jetstream.ErrKeyDeleted) && !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("%s: Get after Delete: err %v, want the key gone", bucket, err)
		}
		if _, err := kv.Put(ctx, "k.2", []byte("c")); err != nil {
			t.Fatalf("%s: Put: %v", bucket, err)
		}
		lister, err := kv.ListKeys(ctx)
		if err != nil {
			t.Fatalf("%s: ListKeys: %v", bucket, err)
		}
		var keys []string
		for k := range lister.Keys() {
			keys = append(keys, k)
		}
		if !slices.Equal(keys, []string{"k.2"}) {
			t.Errorf("%s: ListKeys = %q, want [k.2]", bucket, keys)
		}
		if err := kv.Purge(ctx, "k.2"); err == nil {
			t.Errorf("%s: Purge accepted: the bucket allows roll-ups", bucket)
		}
	}

	kv, err := js.KeyValue(ctx, BucketSchedules)
	if err != nil {
		t.Fatalf("KeyValue: %v", err)
	}
	w, err := kv.Watch(ctx, "sched.>")
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	next := func() jetstream.KeyValueEntry {
		t.Helper()
		select {
		case e := <-w.Updates():
			return e
		case <-ctx.Done():
			t.Fatal("watch: timed out")
			return nil
		}
	}
	if e := next(); e != nil {
		t.Fatalf("watch: want initial nil marker on empty bucket, got %s", e.Key())
	}

	rev1, err := kv.Put(ctx, "sched.t1", []byte("v1"))
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	e, err := kv.Get(ctx, "sched.t1")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if string(e.Value()) != "v1" || e.Revision() != rev1 {
		t.Errorf("Get: %q rev %d, want v1 rev %d", e.Value(), e.Revision(), rev1)
	}
	rev2, err := kv.Update(ctx, "sched.t1", []byte("v2"), rev1)
	if err != nil {
		t.Fatalf("Update with current revision: %v", err)
	}
	if _, err := kv.Update(ctx, "sched.t1", []byte("v3"), rev1); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		t.Errorf("Update with stale revision: err %v, want ErrKeyRevisionMismatch", err)
	}

	// The watch shows v1 then v2, or v2 alone: its ordered consumer, reset
	// under load (a heartbeat or sequence gap), resumes from the latest
	// value per key, which is what a watcher of the schedules relies on.
	for {
		e := next()
		if e == nil || e.Key() != "sched.t1" {
			t.Fatalf("watch: got %v, want sched.t1", e)
		}
		if string(e.Value()) == "v2" && e.Revision() == rev2 {
			break
		}
		if string(e.Value()) != "v1" || e.Revision() != rev1 {
			t.Fatalf("watch: got %q rev %d, want v1 rev %d or v2 rev %d", e.Value(), e.Revision(), rev1, rev2)
		}
	}
}

// TestProbeClaimsExpireWithTheirTTL: flyball-probes takes per-key TTLs,
// so only one Create of a key wins until the claim expires on its own,
// and then a new Create wins (the executor's probe claim).
func TestProbeClaimsExpireWithTheirTTL(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	js := startJS(t)
	mustEnsure(t, ctx, js)
	kv, err := js.KeyValue(ctx, BucketProbes)
	if err != nil {
		t.Fatalf("KeyValue: %v", err)
	}
	const key = "host_example_com.1772442019981"
	if _, err := kv.Create(ctx, key, []byte("a"), jetstream.KeyTTL(time.Second)); err != nil {
		t.Fatalf("first Create: %v", err)
	}
	if _, err := kv.Create(ctx, key, []byte("b"), jetstream.KeyTTL(time.Second)); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("second Create while the claim lives: err %v, want ErrKeyExists", err)
	}
	for {
		_, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			break
		}
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		select {
		case <-ctx.Done():
			t.Fatal("the claim did not expire")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := kv.Create(ctx, key, []byte("c"), jetstream.KeyTTL(time.Second)); err != nil {
		t.Fatalf("Create after the claim expired: %v", err)
	}
}

func TestDispatchSemantics(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	js := startJS(t)
	mustEnsure(t, ctx, js)

	const subj = "flyball.dispatch.t1"
	if _, err := js.Publish(ctx, subj, []byte("run-1"), jetstream.WithMsgID("run-1")); err != nil {
		t.Fatalf("first publish: %v", err)
	}

	// Same Nats-Msg-Id within the duplicate window: deduplicated, not rejected.
	ack, err := js.Publish(ctx, subj, []byte("run-1"), jetstream.WithMsgID("run-1"))
	if err != nil {
		t.Fatalf("duplicate publish: %v", err)
	}
	if !ack.Duplicate {
		t.Errorf("duplicate publish: PubAck.Duplicate false, want true (%+v)", ack)
	}

	// A different message on the same subject: one pending run per task.
	_, err = js.Publish(ctx, subj, []byte("run-2"), jetstream.WithMsgID("run-2"))
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("second publish: err %v, want *jetstream.APIError", err)
	}
	if apiErr.ErrorCode != 10077 {
		t.Errorf("second publish: error code %d (%v), want 10077", apiErr.ErrorCode, apiErr)
	}

	// A different task is independent.
	if _, err := js.Publish(ctx, "flyball.dispatch.t2", []byte("run-1")); err != nil {
		t.Errorf("publish for another task: %v", err)
	}

	// Once the executor acks (t1) or terminates (t2) the pending run, the
	// task may be dispatched again.
	c, err := js.Consumer(ctx, StreamDispatch, ConsumerExecutor)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	msgs, err := c.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	n := 0
	for m := range msgs.Messages() {
		switch m.Subject() {
		case subj:
			err = m.DoubleAck(ctx)
		default:
			err = m.TermWithReason("test")
		}
		if err != nil {
			t.Fatalf("ack %s: %v", m.Subject(), err)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("fetched %d messages, want 2 (err %v)", n, msgs.Error())
	}
	if _, err := js.Publish(ctx, subj, []byte("run-3"), jetstream.WithMsgID("run-3")); err != nil {
		t.Errorf("publish after ack: %v", err)
	}

	// The terminated run produced a MSG_TERMINATED advisory in ADVISORIES.
	adv, err := js.Consumer(ctx, StreamAdvisories, ConsumerDeadLetter)
	if err != nil {
		t.Fatalf("advisories consumer: %v", err)
	}
	m, err := adv.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatalf("advisory: %v", err)
	}
	if want := "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.DISPATCH.executor"; m.Subject() != want {
		t.Errorf("advisory subject %q, want %q", m.Subject(), want)
	}
	if err := m.Ack(); err != nil {
		t.Errorf("ack advisory: %v", err)
	}
}

// TestEnsureAsyncPersist: WithAsyncPersist creates DISPATCH and RUNS, and
// no other stream, in async persist mode; ensuring again with it changes
// nothing; ensuring without it, or it with replicas 3, fails with a
// message that says why. A server whose streams were made without it
// refuses it the same way.
func TestEnsureAsyncPersist(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	js := startJS(t)
	if err := Ensure(ctx, js, WithAsyncPersist(true)); err != nil {
		t.Fatalf("Ensure(WithAsyncPersist(true)): %v", err)
	}
	names := js.StreamNames(ctx)
	seen := 0
	for name := range names.Name() {
		seen++
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		want := jetstream.DefaultPersistMode
		if slices.Contains(AsyncPersistStreams, name) {
			want = jetstream.AsyncPersistMode
		}
		if got := s.CachedInfo().Config.PersistMode; got != want {
			t.Errorf("%s: persist mode %v, want %v", name, got, want)
		}
	}
	if names.Err() != nil || seen < len(AsyncPersistStreams)+4 {
		t.Fatalf("listed %d streams (err %v)", seen, names.Err())
	}
	if err := Ensure(ctx, js, WithAsyncPersist(true)); err != nil {
		t.Errorf("Ensure(WithAsyncPersist(true)) again: %v", err)
	}
	err := Ensure(ctx, js)
	if err == nil || !strings.Contains(err.Error(), "was created with async persist") {
		t.Errorf("Ensure() over async streams: %v, want the persist-mode refusal and its hint", err)
	}
	err = Ensure(ctx, js, WithAsyncPersist(true), WithReplicas(3))
	if err == nil || !strings.Contains(err.Error(), "replicas 1 only") {
		t.Errorf("Ensure(WithAsyncPersist(true), WithReplicas(3)): %v, want the replicas refusal", err)
	}

	plain := startJS(t)
	if err := Ensure(ctx, plain, WithAsyncPersist(false)); err != nil {
		t.Fatalf("Ensure(WithAsyncPersist(false)): %v", err)
	}
	err = Ensure(ctx, plain, WithAsyncPersist(true))
	if err == nil || !strings.Contains(err.Error(), "created with the default persist mode") {
		t.Errorf("Ensure(WithAsyncPersist(true)) over default streams: %v, want the persist-mode refusal and its hint", err)
	}
}

// TestDurablesListEveryConsumerInOrder: Durables names each durable of
// ConsumerConfigs once, sorted by stream, then name (the order the
// backlog report and flyball status print them in).
func TestDurablesListEveryConsumerInOrder(t *testing.T) {
	ds, err := Durables()
	if err != nil {
		t.Fatal(err)
	}
	defs, err := ConsumerConfigs()
	if err != nil {
		t.Fatal(err)
	}
	var want []Durable
	for stream, cs := range defs {
		for _, c := range cs {
			want = append(want, Durable{Stream: stream, Name: c.Durable})
		}
	}
	slices.SortFunc(want, func(a, b Durable) int { return cmp.Or(cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.Name, b.Name)) })
	if !slices.Equal(ds, want) || len(ds) < 8 {
		t.Fatalf("Durables() = %v, want %v", ds, want)
	}
}

// TestEnsureNamesTheCureOfALimitsDispatch: a DISPATCH created with limits
// retention (an old deployment's) cannot be changed to work-queue in
// place; Ensure (provision, serve --ensure-streams) fails naming the
// retention and the cure streams.Check gives with --ensure-streams=false.
// It failed with the server's "can not change retention policy to/from
// workqueue" alone.
func TestEnsureNamesTheCureOfALimitsDispatch(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	js := startJS(t)
	defs, err := StreamConfigs()
	if err != nil {
		t.Fatal(err)
	}
	cfg := defs[slices.IndexFunc(defs, func(c jetstream.StreamConfig) bool { return c.Name == StreamDispatch })]
	cfg.Retention = jetstream.LimitsPolicy
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatalf("pre-create DISPATCH: %v", err)
	}
	err = Ensure(ctx, js)
	if err == nil {
		t.Fatal("Ensure succeeded on a DISPATCH with limits retention")
	}
	for _, w := range []string{
		"retention Limits, want WorkQueue",
		`delete the stream (its pending dispatches are re-created by the sweeper), then run "flyball provision"`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Ensure: %v\nwant it to contain %q", err, w)
		}
	}
}
