package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// maxReplicas is the largest replica count JetStream supports.
const maxReplicas = 5

type options struct {
	replicas     int // 0: an existing stream's own, a new one's inherited (newReplicas)
	asyncPersist bool
	report       func(Difference)
	err          error
}

// Option configures [Ensure].
type Option func(*options)

// WithReplicas overrides the replica count of every stream, including the
// streams backing KV buckets. Consumers keep num_replicas 0 and so inherit
// the replica count of their stream. n must be between 1 and 5. Without
// it, a stream that exists keeps its replica count and a new one gets the
// highest replica count among flyball's existing streams (the
// definition's 1 when there are none), reported as a [LimitReplicas]
// [Difference].
func WithReplicas(n int) Option {
	return func(o *options) {
		if n < 1 || n > maxReplicas {
			o.err = fmt.Errorf("streams: WithReplicas(%d): replicas must be between 1 and %d", n, maxReplicas)
			return
		}
		o.replicas = n
	}
}

// AsyncPersistStreams are the streams [WithAsyncPersist] applies to: the
// two that every run writes and whose messages the sweeper re-creates when
// a server forgets them (a lost dispatch or run event is a zombie,
// re-dispatched 5 minutes after its slot). TASKS, DEADLETTER, HEALTH and
// the KV buckets keep the default. The schedules bucket, the third write
// of every run, stays out although the sweeper repairs a lost write of an
// outcome's decision: a forgotten decision of a command (a pause, an
// update) whose ack the server kept would undo the command after it was
// answered task.accepted, with nothing to notice it
// (docs/benchmark-findings.md, finding 39).
var AsyncPersistStreams = []string{StreamDispatch, StreamRuns}

// WithAsyncPersist creates the [AsyncPersistStreams], when on is true, with
// nats-server's async persist mode (false: the default mode, as without
// the option): the server acknowledges a publish before it writes
// it to its file, and writes every few milliseconds in batches, instead
// of once per message. It saves a write system call per message; a
// nats-server that dies without a clean shutdown (kill -9, a crash, the
// OOM killer) forgets the messages of its last milliseconds. It applies
// to replicas 1 only: nats-server refuses it on replicated streams, which
// already write asynchronously behind their Raft log, so Ensure fails
// when it is combined with WithReplicas(n > 1) or with files of
// num_replicas > 1. nats-server cannot change the mode of an existing
// stream; Ensure fails on a mismatch, either way, with a message saying
// so.
func WithAsyncPersist(on bool) Option {
	return func(o *options) { o.asyncPersist = on }
}

// Ensure creates or updates every stream (including the KV_<bucket> streams
// backing the KV buckets), then every durable consumer, so that their
// configs match the embedded definitions. It is idempotent: on a server that
// already matches, it changes nothing. Settings the server cannot change in
// place (for example storage type or retention policy) make Ensure fail.
// Without [WithReplicas], existing streams keep their replica count and
// new ones take the highest among them ([LimitReplicas]).
// Existing [HistoryStreams] keep their retention limits (max_age,
// max_bytes, max_msgs, max_msgs_per_subject) as an operator set them,
// and a duplicate window no longer than the max age kept
// ([LimitDuplicateWindow]); every other setting is the definition's:
// [WithReport] is told of each limit and duplicate window that differs,
// kept or set back.
// Errors name the definition file and wrap the underlying error.
func Ensure(ctx context.Context, js jetstream.JetStream, opts ...Option) error {
	if js == nil {
		return errors.New("streams: Ensure: nil JetStream")
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.err != nil {
		return o.err
	}

	streams, consumers, err := load()
	if err != nil {
		return err
	}
	version, err := DefinitionsVersion()
	if err != nil {
		return err
	}
	e := ensurer{js: js, o: &o, version: version}
	plans := make([]streamPlan, len(streams))
	for i, d := range streams {
		if plans[i], err = e.planStream(ctx, d); err != nil {
			return err
		}
		e.inherit = max(e.inherit, plans[i].liveReplicas)
	}
	for i, d := range streams {
		if err := e.finishPlan(d, &plans[i]); err != nil {
			return err
		}
	}
	if testHookPlanned != nil {
		testHookPlanned()
	}
	for i, d := range streams {
		if err := e.applyStream(ctx, d, plans[i]); err != nil {
			return err
		}
	}
	for _, d := range consumers {
		if err := e.ensureConsumer(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

// racedCreates bounds how often Ensure reads a stream or consumer again
// after its create found it created by another process in between: once
// is the race; more is a server that keeps flipping it.
const racedCreates = 3

type ensurer struct {
	js      jetstream.JetStream
	o       *options
	version int
	// inherit is the highest replica count among the streams found,
	// which a new stream takes without WithReplicas (0: none found).
	inherit int
}

// report passes d to the caller's WithReport, if any.
func (e *ensurer) report(d Difference) {
	if e.o.report != nil {
		e.o.report(d)
	}
}

// streamPlan is what Ensure writes to one stream: cfg, with a create-only
// call when the stream was absent (exists false), nothing when newer
// definitions are in place (skip). liveReplicas is the found stream's
// replica count (0: absent), liveRetention its retention.
type streamPlan struct {
	cfg           jetstream.StreamConfig
	exists        bool
	skip          bool
	liveReplicas  int
	liveRetention jetstream.RetentionPolicy
	// inherited: cfg.Replicas is e.inherit, not the definition's.
	inherited bool
}

// planStream reads d's stream and plans its config from the definition
// and the live config, if any: its replicas (without WithReplicas), a
// history stream's retention limits, its metadata. finishPlan completes
// it.
func (e *ensurer) planStream(ctx context.Context, d streamDef) (streamPlan, error) {
	cfg := d.cfg
	var live *jetstream.StreamConfig
	info, err := e.js.Stream(ctx, cfg.Name)
	switch {
	case err == nil:
		live = &info.CachedInfo().Config
		// A newer flyball's ensure (a rolling upgrade's new
		// instances) is not undone by an old instance's restart.
		if v := recordedVersion(live.Metadata); v > e.version {
			e.report(newerDifference(cfg.Name, v))
			return streamPlan{skip: true, liveReplicas: live.Replicas}, nil
		}
		// Limits the definition re-applied were lost data: an
		// operator's raised max_msgs_per_subject on RUNS dropped
		// every message past the definition's 1000 at the next
		// restart, and a lowered max_age came back.
		for _, diff := range limits(&cfg, live) {
			e.report(diff)
		}
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return streamPlan{}, fmt.Errorf("streams: ensure stream %s (%s): %w", cfg.Name, d.file, err)
	}
	if e.o.replicas > 0 {
		cfg.Replicas = e.o.replicas
	} else if live != nil {
		// The files' 1 would scale a cluster's R3 streams down to
		// one copy: an upgrade's "flyball provision" without
		// --replicas then lost the data of a lost node.
		cfg.Replicas = live.Replicas
	}
	var md map[string]string
	plan := streamPlan{exists: live != nil}
	if live != nil {
		md = live.Metadata
		plan.liveReplicas, plan.liveRetention = live.Replicas, live.Retention
	}
	cfg.Metadata = withVersion(md, e.version)
	plan.cfg = cfg
	return plan, nil
}

// finishPlan completes a plan once every stream is read: a new stream
// without WithReplicas takes e.inherit, the highest replica count among
// the streams found (a DISPATCH an operator deleted, or a bucket a new
// version adds, came back at the files' 1 on a cluster provisioned with
// --replicas 3, one node's loss from losing its data), and the
// AsyncPersistStreams their persist mode.
func (e *ensurer) finishPlan(d streamDef, plan *streamPlan) error {
	if plan.skip {
		return nil
	}
	cfg := &plan.cfg
	if !plan.exists && e.o.replicas == 0 && e.inherit > 0 && e.inherit != cfg.Replicas {
		cfg.Replicas, plan.inherited = e.inherit, true
	}
	if e.o.asyncPersist && slices.Contains(AsyncPersistStreams, cfg.Name) {
		// Refused before any stream is touched.
		if cfg.Replicas > 1 {
			return fmt.Errorf("streams: ensure stream %s (%s): async persist applies to replicas 1 only, not %d: replicated streams already write asynchronously behind their Raft log", cfg.Name, d.file, cfg.Replicas)
		}
		cfg.PersistMode = jetstream.AsyncPersistMode
	}
	return nil
}

// applyStream writes plan. A stream planned absent is created with a
// create-only call: another ensure racing this one (a provision with
// --replicas 3 while a service without it starts) may have created it
// since, and an update would have scaled it to the definition's 1
// replica, or failed on its different config (error 10058, "stream name
// already in use"), stopping a serve. Found created, it is read and
// planned again from what it is.
func (e *ensurer) applyStream(ctx context.Context, d streamDef, plan streamPlan) error {
	for try := 1; ; try++ {
		if plan.skip {
			return nil
		}
		var err error
		if plan.exists {
			_, err = e.js.CreateOrUpdateStream(ctx, plan.cfg)
		} else {
			_, err = e.js.CreateStream(ctx, plan.cfg)
			if isCreated(err) && try < racedCreates {
				if plan, err = e.planStream(ctx, d); err != nil {
					return err
				}
				if err = e.finishPlan(d, &plan); err != nil {
					return err
				}
				continue
			}
		}
		if err != nil {
			return fmt.Errorf("streams: ensure stream %s (%s): %w%s%s", plan.cfg.Name, d.file, err, persistHint(err, e.o.asyncPersist), retentionHint(plan))
		}
		if plan.inherited {
			e.report(Difference{Stream: plan.cfg.Name, Limit: LimitReplicas, Live: fmt.Sprint(plan.cfg.Replicas), Def: fmt.Sprint(d.cfg.Replicas)})
		}
		return nil
	}
}

// ensureConsumer reads d's durable and creates or updates it, unless
// newer definitions are in place; one it found absent is created with a
// create-only call, and read again when another process created it in
// between (applyStream).
func (e *ensurer) ensureConsumer(ctx context.Context, d consumerDef) error {
	for try := 1; ; try++ {
		cfg := d.cfg
		var md map[string]string
		exists := false
		c, err := e.js.Consumer(ctx, d.stream, cfg.Name)
		switch {
		case err == nil:
			exists = true
			md = c.CachedInfo().Config.Metadata
			if v := recordedVersion(md); v > e.version {
				e.report(newerDifference(d.stream+"."+cfg.Name, v))
				return nil
			}
		case !errors.Is(err, jetstream.ErrConsumerNotFound):
			return fmt.Errorf("streams: ensure consumer %s.%s (%s): %w", d.stream, cfg.Name, d.file, err)
		}
		if testHookConsumerRead != nil {
			testHookConsumerRead(d.stream, cfg.Name)
		}
		cfg.Metadata = withVersion(md, e.version)
		if exists {
			_, err = e.js.CreateOrUpdateConsumer(ctx, d.stream, cfg)
		} else {
			_, err = e.js.CreateConsumer(ctx, d.stream, cfg)
			if isCreated(err) && try < racedCreates {
				continue
			}
		}
		if err != nil {
			return fmt.Errorf("streams: ensure consumer %s.%s (%s): %w", d.stream, cfg.Name, d.file, err)
		}
		return nil
	}
}

// isCreated reports whether a create-only call found the stream or
// consumer created with another config (an identical one succeeds).
func isCreated(err error) bool {
	// APIError.Is compares error codes, so a raw 10058 or 10148 matches.
	return errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) || errors.Is(err, jetstream.ErrConsumerExists)
}

// Test hooks: testHookPlanned runs after Ensure has read every stream and
// before it writes any; testHookConsumerRead after it has read a consumer
// and before it writes it. Another process's ensure (or an operator)
// acting in between is the race they let a test make.
var (
	testHookPlanned      func()
	testHookConsumerRead func(stream, name string)
)

// retentionHint gives the cure of a stream found with another retention
// than its definition's, which nats-server refuses to change in place
// (to or from work-queue: a DISPATCH an old deployment created with
// limits retention) with an error that names no way out. It is Check's,
// and DISPATCH's only: its cure names the sweeper re-creating pending
// dispatches, and only work-queue retention cannot change in place.
func retentionHint(plan streamPlan) string {
	if !plan.exists || plan.cfg.Name != StreamDispatch || plan.liveRetention == plan.cfg.Retention {
		return ""
	}
	return fmt.Sprintf(" (%s: %s)", retentionDrift(plan.liveRetention, plan.cfg.Retention), cureRetention)
}

// persistHint explains nats-server's refusal to change a stream's persist
// mode, which names neither mode nor way out.
func persistHint(err error, async bool) string {
	if !strings.Contains(err.Error(), "persist mode") {
		return ""
	}
	if async {
		return " (the stream was created with the default persist mode; async persist applies to a stream created with it: see docs/operations.md, \"Async persist\")"
	}
	return " (the stream was created with async persist: ensure with it again, or re-create the stream: see docs/operations.md, \"Async persist\")"
}
