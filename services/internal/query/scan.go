package query

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/services/internal/jsutil"
)

// ErrStop ends a Scan without an error when its callback returns it.
var ErrStop = errors.New("stop scan")

// Message is one message read back from a stream.
type Message struct {
	Stream  string
	Seq     uint64
	Subject string
	// Time is when the stream stored the message.
	Time   time.Time
	Header nats.Header
	Data   []byte
}

// ScanOptions selects the messages Scan reads.
type ScanOptions struct {
	// Stream is the stream name. Required.
	Stream string
	// Subjects filters by subject (wildcards allowed). Empty reads every
	// subject. Work-queue streams take at most one filter.
	Subjects []string
	// StartSeq starts at this stream sequence. Zero starts at the first
	// message (or at StartTime).
	StartSeq uint64
	// StartTime starts at the first message stored at or after it.
	StartTime time.Time
	// EndSeq stops after this stream sequence. Zero: at the last message
	// stored when the scan began. Not with Follow.
	EndSeq uint64
	// Until stops at the first message stored after it. Zero: no limit.
	Until time.Time
	// Follow keeps delivering messages stored after the scan began, until
	// ctx ends (which then is not an error). Not supported on work queues.
	Follow bool
	// CaughtUp, if set, is called once every message stored when the scan
	// began has been delivered (or none matched), before any new one.
	CaughtUp func() error
}

// Scan reads a stream in order and calls fn for each message. It reads
// with an ephemeral ordered consumer that never acks, so it never changes
// the stream, and it ends (unless Follow) at the last message stored when
// it began, so republishing into the scanned stream cannot loop.
func Scan(ctx context.Context, js jetstream.JetStream, opts ScanOptions, fn func(Message) error) error {
	st, err := js.Stream(ctx, opts.Stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", opts.Stream, err)
	}
	if opts.Follow && opts.EndSeq > 0 {
		return fmt.Errorf("stream %s: a scan that follows the stream cannot end at a sequence", opts.Stream)
	}
	info := st.CachedInfo()
	upper := info.State.LastSeq
	if opts.EndSeq > 0 {
		upper = min(upper, opts.EndSeq)
	}
	if info.Config.Retention == jetstream.WorkQueuePolicy {
		return scanByGet(ctx, st, upper, info.State.FirstSeq, opts, fn)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: opts.Subjects, InactiveThreshold: jsutil.OrderedInactiveThreshold}
	switch {
	case opts.StartSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, opts.StartSeq
	case !opts.StartTime.IsZero():
		t := opts.StartTime
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	}
	cons, err := st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("read %s: %w", opts.Stream, err)
	}
	// Deleted once the iterator is stopped (defers run last first): a
	// scan is one-off, and stopping it leaves its consumer on the
	// stream. A failed delete leaves it to the inactive threshold.
	defer func() { _ = jsutil.DeleteOrdered(ctx, js, opts.Stream, cons) }()
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("read %s: %w", opts.Stream, err)
	}
	defer it.Stop()

	caughtUp := false
	// catchUp reports whether the scan is over.
	catchUp := func() (bool, error) {
		if caughtUp {
			return false, nil
		}
		caughtUp = true
		if opts.CaughtUp != nil {
			if err := opts.CaughtUp(); err != nil {
				return true, err
			}
		}
		return !opts.Follow, nil
	}
	if ci := cons.CachedInfo(); upper == 0 || upper < opts.StartSeq || (ci != nil && ci.NumPending == 0) {
		if done, err := catchUp(); done || err != nil {
			return stopped(err)
		}
	}
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil && opts.Follow {
				return nil
			}
			return fmt.Errorf("read %s: %w", opts.Stream, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("read %s: %w", opts.Stream, err)
		}
		if !caughtUp && md.Sequence.Stream > upper {
			if done, err := catchUp(); done || err != nil {
				return stopped(err)
			}
		}
		if !opts.Until.IsZero() && md.Timestamp.After(opts.Until) {
			_, err := catchUp()
			return stopped(err)
		}
		msg := Message{Stream: opts.Stream, Seq: md.Sequence.Stream, Subject: m.Subject(), Time: md.Timestamp, Header: m.Headers(), Data: m.Data()}
		if err := fn(msg); err != nil {
			return stopped(err)
		}
		if !caughtUp && (md.NumPending == 0 || md.Sequence.Stream >= upper) {
			if done, err := catchUp(); done || err != nil {
				return stopped(err)
			}
		}
	}
}

func stopped(err error) error {
	if errors.Is(err, ErrStop) {
		return nil
	}
	return err
}

// scanByGet reads a work-queue stream message by message with "next by
// subject" gets: JetStream refuses consumers without explicit acks on work
// queues, and an acking consumer would remove the messages.
func scanByGet(ctx context.Context, st jetstream.Stream, upper, first uint64, opts ScanOptions, fn func(Message) error) error {
	if opts.Follow {
		return fmt.Errorf("stream %s is a work queue: it cannot be followed, only read", opts.Stream)
	}
	if len(opts.Subjects) > 1 {
		return fmt.Errorf("stream %s is a work queue: give at most one subject filter, got %d", opts.Stream, len(opts.Subjects))
	}
	filter := ">"
	if len(opts.Subjects) == 1 {
		filter = opts.Subjects[0]
	}
	seq := max(opts.StartSeq, first, 1)
	for seq <= upper {
		raw, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", opts.Stream, err)
		}
		if raw.Sequence > upper {
			break
		}
		seq = raw.Sequence + 1
		if !opts.StartTime.IsZero() && raw.Time.Before(opts.StartTime) {
			continue
		}
		if !opts.Until.IsZero() && raw.Time.After(opts.Until) {
			break
		}
		msg := Message{Stream: opts.Stream, Seq: raw.Sequence, Subject: raw.Subject, Time: raw.Time, Header: raw.Header, Data: raw.Data}
		if err := fn(msg); err != nil {
			return stopped(err)
		}
	}
	if opts.CaughtUp != nil {
		return stopped(opts.CaughtUp())
	}
	return nil
}
