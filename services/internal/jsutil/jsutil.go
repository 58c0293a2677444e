// Package jsutil holds the JetStream plumbing every flyball service shares:
// publishing CloudEvents with a dedup ID, consuming a durable, terminating
// bad messages with a reason, and CAS retry on KV.
package jsutil

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/metrics"
)

// PublishAsyncTimeout is how long nats.go keeps an async publish waiting
// for its ack. Without it, an ack lost with a stream leader stays pending
// forever and holds one of the context's 4,000 async publish slots: enough
// leader elections under load and every async publish stalls. The timer
// (after 3 s) and the executor outbox (after a 2 s round) stop waiting for
// such an ack and publish again, so this only clears what they have
// already given up on.
const PublishAsyncTimeout = 15 * time.Second

// ErrAckTimeout is the error of an async publish whose ack did not arrive
// by the caller's deadline. The ack may yet come, or be lost with a stream
// leader: publishing again with the same Nats-Msg-Id settles it either way.
var ErrAckTimeout = errors.New("no publish ack within the ack timeout")

// AckDeadline waits for the acks of a batch of async publishes against one
// deadline. Once the deadline has fired, Await takes only acks that have
// already arrived, so the rest of the batch is settled at once.
type AckDeadline struct {
	fired   <-chan time.Time
	expired bool
}

// NewAckDeadline waits until fired delivers (a timer's channel).
func NewAckDeadline(fired <-chan time.Time) *AckDeadline { return &AckDeadline{fired: fired} }

// Await waits for f to resolve. It returns ErrAckTimeout once the deadline
// has fired, and ctx's error when ctx ends first.
func (d *AckDeadline) Await(ctx context.Context, f jetstream.PubAckFuture) (*jetstream.PubAck, error) {
	select {
	case ack := <-f.Ok():
		return ack, nil
	case err := <-f.Err():
		return nil, err
	default:
	}
	if d.expired {
		return nil, ErrAckTimeout
	}
	select {
	case ack := <-f.Ok():
		return ack, nil
	case err := <-f.Err():
		return nil, err
	case <-d.fired:
		d.expired = true
		return nil, ErrAckTimeout
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// New is jetstream.New with the options every flyball service needs.
func New(nc *nats.Conn, opts ...jetstream.JetStreamOpt) (jetstream.JetStream, error) {
	return jetstream.New(nc, append([]jetstream.JetStreamOpt{jetstream.WithPublishAsyncTimeout(PublishAsyncTimeout)}, opts...)...)
}

// Source builds the CloudEvents source of a service instance.
func Source(service, instance string) string { return "flyball/" + service + "/" + instance }

// Publish publishes body to subject with the given Nats-Msg-Id (if not
// empty) and waits for the PubAck. extra holds more header name/value pairs.
func Publish(ctx context.Context, js jetstream.JetStream, subject, msgID string, body []byte, extra ...string) (*jetstream.PubAck, error) {
	return PublishMsg(ctx, js, EventMsg(subject, msgID, body, extra...))
}

// PublishMsg publishes m with opts (an expected last sequence, say) and
// waits for the PubAck, retrying "no responders" for a few seconds: an R3
// stream electing a new leader answers nobody for a moment, and giving up
// there turns a finished run into a redelivery after AckWait.
func PublishMsg(ctx context.Context, js jetstream.JetStream, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	opts = append(opts, jetstream.WithRetryAttempts(20), jetstream.WithRetryWait(250*time.Millisecond))
	ack, err := js.PublishMsg(ctx, m, opts...)
	if err != nil {
		return nil, fmt.Errorf("publish %s: %w", m.Subject, err)
	}
	return ack, nil
}

// EventMsg is a structured-mode CloudEvent message with its Nats-Msg-Id
// (if not empty) and extra header name/value pairs.
func EventMsg(subject, msgID string, body []byte, extra ...string) *nats.Msg {
	m := &nats.Msg{Subject: subject, Data: body, Header: make(nats.Header, 2+len(extra)/2)}
	m.Header.Set("Content-Type", events.ContentTypeStructured)
	if msgID != "" {
		m.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m.Header.Set(extra[i], extra[i+1])
	}
	return m
}

// PublishEvent builds a structured CloudEvent and publishes it. The msgID is
// both the event id and the Nats-Msg-Id, so a retried publish deduplicates.
func PublishEvent(ctx context.Context, js jetstream.JetStream, subject, msgID, typ, source, taskID string, data any, at time.Time) error {
	_, err := PublishNewEvent(ctx, js, subject, msgID, typ, source, taskID, data, at)
	return err
}

// PublishNewEvent is PublishEvent that also reports whether this publish
// stored the event: false when the stream took it for a duplicate of one
// stored within its duplicate window (an earlier try's, or another
// replica's), which its caller must not count or announce again.
//
// Error 10158 (IsDuplicateInProcess: the same message ID is being stored
// right now) is not taken for stored: that other publish may yet fail (no
// quorum, a leader change), and a caller that went on as if the event were
// stored (the dead-letter service deletes the dispatch) lost it. The
// publish is sent again, every DuplicateInProcessRetry, until the stream
// answers stored or duplicate; after DuplicateInProcessWait, or when ctx
// ends, the 10158 error is returned, for the caller to retry as any
// failed publish.
func PublishNewEvent(ctx context.Context, js jetstream.JetStream, subject, msgID, typ, source, taskID string, data any, at time.Time) (bool, error) {
	body, err := events.Marshal(typ, source, taskID, data, at, msgID)
	if err != nil {
		return false, err
	}
	deadline := time.Now().Add(DuplicateInProcessWait)
	for {
		ack, err := Publish(ctx, js, subject, msgID, body)
		if err == nil {
			return !ack.Duplicate, nil
		}
		if !IsDuplicateInProcess(err) || !time.Now().Before(deadline) {
			return false, err
		}
		t := time.NewTimer(DuplicateInProcessRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, err
		case <-t.C:
		}
	}
}

// How PublishNewEvent waits out error 10158: a clustered stream answers it
// only while the other publish's raft proposal is uncommitted, normally a
// few milliseconds.
const (
	DuplicateInProcessRetry = 100 * time.Millisecond
	DuplicateInProcessWait  = 5 * time.Second
)

// NotStored reports a publish error after which the message is certainly
// not stored: no stream took it (the server refused it, or no stream
// listens on its subject), or the client never sent it (over max_payload,
// an invalid subject, a connection draining, or one disconnected with no
// reconnect buffer, as flyball serve connects: nats: outbound buffer limit
// exceeded). A duplicate being stored right now (10158) may be stored, so
// it is not; nor is a timeout or a lost connection (nats: connection closed
// comes also when the connection closes while the ack is awaited), after
// which the message may have been stored.
func NotStored(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && !IsDuplicateInProcess(err) ||
		TooLarge(err) || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrPermissionViolation) || errors.Is(err, nats.ErrBadSubject) || errors.Is(err, nats.ErrInvalidMsg) ||
		errors.Is(err, nats.ErrReconnectBufExceeded) || errors.Is(err, nats.ErrConnectionDraining)
}

// Reconnecting reports a publish error that says only that the
// connection was down while nats.go reconnects it: the message was never
// sent (no reconnect buffer, as flyball serve connects: nats: outbound
// buffer limit exceeded; or nats: connection reconnecting), or the
// disconnect cut off its ack (nats: server is disconnected), after which
// it may be stored. Publishing it again with the same Nats-Msg-Id once
// the connection is back settles it either way; a publish made before
// then fails the same way at once. A closed connection (nats: connection
// closed) is not reconnecting: it never comes back.
func Reconnecting(err error) bool {
	return errors.Is(err, nats.ErrReconnectBufExceeded) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrDisconnected)
}

// IsDuplicateInProcess reports JetStream error 10158: a message with the
// same Nats-Msg-Id is being stored right now (another replica won the race,
// or an earlier try whose ack timed out is not committed yet). That other
// publish may still fail: PublishNewEvent, and the timer for a dispatch,
// publish again until the stream answers stored or duplicate.
func IsDuplicateInProcess(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10158
}

// TooLarge reports a publish or write refused for its size: by the
// client (over the server's max_payload) or by the stream (over its
// max_msg_size). No retry mends it.
func TooLarge(err error) bool {
	return errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum)
}

// IsKeyMissing reports whether a KV read found no value: the key was
// never written, or was deleted or purged.
func IsKeyMissing(err error) bool {
	return errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted)
}

// WatchClosed is the error of a KV watch whose updates channel closed
// before it had delivered every stored value; what names the read, as
// "read KV flyball-tasks". nats.go stops a watch when the context it was
// started with ends, and the closed channel can win a select over
// ctx.Done(): the context's error is then the cause, so a caller's
// errors.Is(err, context.DeadlineExceeded) holds and the caller is not
// told the server cut the watch off. With the context live it says
// "watch closed".
func WatchClosed(ctx context.Context, what string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return errors.New(what + ": watch closed")
}

// IsCASConflict reports whether a KV write lost a compare-and-set race.
func IsCASConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}

// Terminate ends a message that can never be processed, with a reason that
// reaches the MSG_TERMINATED advisory, and counts it.
func Terminate(msg jetstream.Msg, reason string, m *metrics.Set, log *slog.Logger) {
	if err := msg.TermWithReason(Reject(msg.Subject(), reason, m, log)); err != nil {
		log.Warn("term failed", "subject", msg.Subject(), "err", err)
	}
}

// Reject counts and logs a message of subject about to be terminated as
// one that can never be processed, and returns reason as the term carries
// it to the MSG_TERMINATED advisory (cut to 200 bytes). It is Terminate
// without the term, for a consumer that sends its terms itself (the
// executor confirms each: a lost one redelivered the message, counted
// again, after AckWait).
func Reject(subject, reason string, m *metrics.Set, log *slog.Logger) string {
	m.RejectedEvents.WithLabelValues(reasonLabel(reason)).Inc()
	log.Warn("terminating malformed message", "subject", subject, "reason", reason)
	return truncate(reason, 200)
}

// TerminateMalformed terminates msg as a malformed event, with err as the
// reason (MalformedReason).
func TerminateMalformed(msg jetstream.Msg, err error, m *metrics.Set, log *slog.Logger) {
	Terminate(msg, MalformedReason(err), m, log)
}

// MalformedReason is the reason a malformed event is terminated with:
// "malformed event: …", said once whether or not err's text begins with
// it (events' decode errors wrap events.ErrMalformed).
func MalformedReason(err error) string {
	reason := err.Error()
	if !strings.HasPrefix(reason, events.ErrMalformed.Error()) {
		reason = events.ErrMalformed.Error() + ": " + reason
	}
	return reason
}

// DecodeRun decodes the run event msg carries into run, where subj is
// msg's parsed subject: the event's type must match the subject, and the
// run must name the subject's task (a consumer writes state under the
// subject's task, as the governor reads it). Otherwise it terminates msg
// with the reason, counts it, and returns false.
func DecodeRun(msg jetstream.Msg, subj events.Subject, run *events.Run, m *metrics.Set, log *slog.Logger) bool {
	e, err := events.Decode(msg.Headers(), msg.Data())
	if err == nil {
		err = events.CheckType(subj, e)
	}
	if err != nil {
		TerminateMalformed(msg, err, m, log)
		return false
	}
	if err := events.DecodeRun(e, run); err != nil {
		Terminate(msg, "malformed run: "+err.Error(), m, log)
		return false
	}
	if run.TaskID != subj.ID {
		Terminate(msg, fmt.Sprintf("malformed run: taskId %.64q does not match the subject", run.TaskID), m, log)
		return false
	}
	return true
}

// reasonLabel keeps the rejected-events label bounded: the first words of a
// reason name its class, the rest (values, IDs) is dropped.
func reasonLabel(reason string) string {
	for i, c := range reason {
		if c == ':' {
			return reason[:i]
		}
		if i >= 40 {
			return reason[:i]
		}
	}
	return reason
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// consumeExpiry is how long each of Consume's pulls waits on the server
// (nats.go's default is 30 s). A pull answered "no responders" (its
// consumer had no leader: an election, a step-down) leaves nats.go
// counting it as pending until two heartbeats are missed, half an expiry
// each, so the expiry bounds how long a consumer stalls after an
// election: 5 s here, against 30 s by default.
const consumeExpiry = 5 * time.Second

// Consume starts consuming the durable and returns its context. The handler
// runs serially; handlers that need concurrency dispatch to a pool. opts
// may override the pull expiry (consumeExpiry). failures, when not nil,
// counts the failed tries to consume (flyball_pull_failures_total).
//
// nats.go's Consume ends for good on an error it takes as terminal: its
// durable deleted (by hand, or by a restore), or a pull answered 400 Bad
// Request (a durable re-provisioned with a priority policy the pulls do
// not name). This one then binds the durable again and consumes anew,
// every second at most (pullRetryCap), until the durable exists and
// takes its pulls (flyball provision, or a service started with
// --ensure-streams, created it again, or its config was put right),
// counting each failed try in failures and logging like ConsumeWorkers
// ("pull failed; retrying", then every pullWarnEvery while it lasts, and
// "pulling again" once a resumed Consume has lasted pullRetryCap), so the
// service needs no restart and FlyballPullFailing sees it meanwhile. Only
// a closed connection, on which nothing can be consumed again, ends it
// for good.
func Consume(ctx context.Context, js jetstream.JetStream, stream, durable string, log *slog.Logger, failures prometheus.Counter, h jetstream.MessageHandler, opts ...jetstream.PullConsumeOpt) (jetstream.ConsumeContext, error) {
	cons, err := js.Consumer(ctx, stream, durable)
	if err != nil {
		return nil, fmt.Errorf("consumer %s/%s: %w (run flyball provision, or flyball serve with --ensure-streams)", stream, durable, err)
	}
	rc := &resumingConsume{
		js: js, stream: stream, durable: durable, h: h, failures: failures,
		log: log.With("stream", stream, "durable", durable), closed: make(chan struct{}),
	}
	rc.ctx, rc.cancel = context.WithCancel(context.WithoutCancel(ctx))
	rc.opts = append([]jetstream.PullConsumeOpt{jetstream.PullExpiry(consumeExpiry)}, opts...)
	rc.opts = append(rc.opts, jetstream.ConsumeErrHandler(rc.onErr))
	cc, err := cons.Consume(h, rc.opts...)
	if err != nil {
		rc.cancel()
		return nil, fmt.Errorf("consume %s/%s: %w", stream, durable, err)
	}
	rc.mu.Lock()
	rc.cc = cc
	rc.mu.Unlock()
	go rc.watch(cc)
	return rc, nil
}

// resumingConsume is a Consume that consumes its durable anew after
// nats.go's Consume ended. It implements jetstream.ConsumeContext.
type resumingConsume struct {
	js              jetstream.JetStream
	stream, durable string
	h               jetstream.MessageHandler
	opts            []jetstream.PullConsumeOpt
	failures        prometheus.Counter
	log             *slog.Logger
	ctx             context.Context
	cancel          context.CancelFunc

	mu       sync.Mutex
	cc       jetstream.ConsumeContext // nil while binding again
	lastErr  error                    // the last error cc reported
	streak   pullStreak               // failed tries since the last Consume that lasted
	resuming bool
	stopping bool
	closed   chan struct{}
	once     sync.Once
}

// errConsumeEnded names an end of Consume that reported no error.
var errConsumeEnded = errors.New("consume ended")

func (r *resumingConsume) onErr(_ jetstream.ConsumeContext, err error) {
	r.mu.Lock()
	r.lastErr = err
	r.mu.Unlock()
	switch {
	case errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, nats.ErrConnectionClosed):
		r.log.Debug("consume", "err", err)
	case errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound):
		// Not found does not end nats.go's Consume, which would go on
		// pulling a durable that is gone: end it and bind again.
		r.startResume(nil, err)
	case errors.Is(err, jetstream.ErrBadRequest):
		// Ends nats.go's Consume: watch resumes it, and warns.
		r.log.Debug("consume", "err", err)
	default:
		r.log.Warn("consume", "err", err)
	}
}

// watch resumes after cc ends, unless it was stopped or replaced meanwhile.
// nats.go ends a Consume for good on any error it takes as terminal
// (consumer deleted, 400 Bad Request, a malformed status): whatever it
// was, it is consumed anew.
func (r *resumingConsume) watch(cc jetstream.ConsumeContext) {
	<-cc.Closed()
	r.mu.Lock()
	cause := r.lastErr
	r.mu.Unlock()
	switch {
	case cause == nil:
		cause = errConsumeEnded
	case errors.Is(cause, nats.ErrConnectionClosed):
		return // nothing can be consumed on it again
	}
	r.startResume(cc, cause)
}

// startResume resumes consuming, once, unless Stop or Drain came first or
// ended (when not nil) is no longer the current Consume.
func (r *resumingConsume) startResume(ended jetstream.ConsumeContext, cause error) {
	r.mu.Lock()
	if r.stopping || r.resuming || (ended != nil && r.cc != ended) {
		r.mu.Unlock()
		return
	}
	old := r.cc
	r.cc, r.resuming = nil, true
	r.mu.Unlock()
	go r.resume(old, cause)
}

// resume stops the ended Consume and binds the durable again until it
// exists and a Consume of it starts, or the context is stopped.
func (r *resumingConsume) resume(old jetstream.ConsumeContext, cause error) {
	if old != nil {
		old.Stop()
		<-old.Closed()
	}
	err := cause
	for {
		if r.failures != nil {
			r.failures.Inc()
		}
		r.mu.Lock()
		wait := r.streak.failed(r.log, err, time.Now())
		r.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-r.ctx.Done():
			t.Stop()
			r.finish()
			return
		case <-t.C:
		}
		var cons jetstream.Consumer
		if cons, err = r.js.Consumer(r.ctx, r.stream, r.durable); err != nil {
			if r.ctx.Err() != nil { // stopped while binding: no failed pull to count
				r.finish()
				return
			}
			continue
		}
		cc, cerr := cons.Consume(r.h, r.opts...)
		if cerr != nil {
			err = cerr
			continue
		}
		r.mu.Lock()
		stopping := r.stopping
		if !stopping {
			r.cc, r.resuming, r.lastErr = cc, false, nil
		}
		r.mu.Unlock()
		if stopping { // Stop or Drain came while it was bound again
			cc.Stop()
			<-cc.Closed()
			r.finish()
			return
		}
		go r.watch(cc)
		// A pull the server refuses (400) ends the new Consume at once:
		// the streak, its backoff and its warnings go on until one has
		// lasted.
		time.AfterFunc(pullRetryCap, func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.cc == cc && !r.stopping {
				r.streak.recovered(r.log)
			}
		})
		return
	}
}

func (r *resumingConsume) finish() { r.once.Do(func() { close(r.closed) }) }

// end stops (or drains) the current Consume; Closed closes once it has.
func (r *resumingConsume) end(drain bool) {
	r.mu.Lock()
	r.stopping = true
	cc := r.cc
	r.mu.Unlock()
	r.cancel()
	if cc == nil {
		// resume is binding again, and may still be waiting for the ended
		// Consume's last handler or starting a new one: it closes Closed
		// once neither runs (it sees the cancelled context, or stopping).
		return
	}
	if drain {
		cc.Drain()
	} else {
		cc.Stop()
	}
	go func() {
		<-cc.Closed()
		r.finish()
	}()
}

// Stop ends consuming; see jetstream.ConsumeContext.
func (r *resumingConsume) Stop() { r.end(false) }

// Drain ends consuming once what arrived is handled; see jetstream.ConsumeContext.
func (r *resumingConsume) Drain() { r.end(true) }

// Closed is closed once consuming has ended after Stop or Drain.
func (r *resumingConsume) Closed() <-chan struct{} { return r.closed }

// UpdateFunc computes the new value of a KV entry from the current one
// (nil when absent). Returning nil value with nil error means "no change".
type UpdateFunc func(current []byte) ([]byte, error)

// ErrNoChange can be returned by an UpdateFunc to skip the write.
var ErrNoChange = errors.New("no change")

// CAS reads key, applies fn and writes the result with compare-and-set,
// retrying on conflicts up to attempts times. It returns the written revision.
func CAS(ctx context.Context, kv jetstream.KeyValue, key string, attempts int, fn UpdateFunc) (uint64, error) {
	for range attempts {
		var cur []byte
		var rev uint64
		e, err := kv.Get(ctx, key)
		switch {
		case err == nil:
			cur, rev = e.Value(), e.Revision()
		case IsKeyMissing(err):
		default:
			return 0, fmt.Errorf("get %s: %w", key, err)
		}
		next, err := fn(cur)
		if err != nil {
			return rev, err
		}
		var wrote uint64
		if rev == 0 {
			wrote, err = kv.Create(ctx, key, next)
		} else {
			wrote, err = kv.Update(ctx, key, next, rev)
		}
		if err == nil {
			return wrote, nil
		}
		if !IsCASConflict(err) {
			return 0, fmt.Errorf("write %s: %w", key, err)
		}
	}
	return 0, fmt.Errorf("write %s: %d CAS conflicts in a row: %w", key, attempts, jetstream.ErrKeyRevisionMismatch)
}

// Bucket names a KV bucket and the handle BindBuckets sets.
type Bucket struct {
	Name string
	KV   *jetstream.KeyValue
}

// BindBuckets binds each bucket into its handle, in order, and fails on
// the first one that cannot be bound (missing, or not permitted). Only a
// missing bucket gets the hint to provision: a server without JetStream
// or a timeout got it too, and sent the operator to provision a stack
// that was there.
func BindBuckets(ctx context.Context, js jetstream.JetStream, buckets ...Bucket) error {
	for _, b := range buckets {
		kv, err := js.KeyValue(ctx, b.Name)
		if err != nil {
			if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("bind KV %s: %w (run flyball provision, or flyball serve with --ensure-streams)", b.Name, err)
			}
			return fmt.Errorf("bind KV %s: %w", b.Name, err)
		}
		*b.KV = kv
	}
	return nil
}
