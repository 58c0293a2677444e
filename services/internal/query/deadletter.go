package query

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/streams"
)

// DeadLetterRecord is one entry of the DEADLETTER stream.
type DeadLetterRecord struct {
	Seq uint64 `json:"seq"`
	// Time is when DEADLETTER stored the entry.
	Time    time.Time `json:"time"`
	Subject string    `json:"subject"`
	// EventID is the CloudEvents id of the entry.
	EventID string            `json:"eventId,omitempty"`
	Entry   events.DeadLetter `json:"entry"`
	// Error is set when the stored event does not decode.
	Error string `json:"error,omitempty"`
	// Raw is the stored message, a structured CloudEvent.
	Raw []byte `json:"-"`
}

// LastError is the error of the entry's last failed attempt.
func (d *DeadLetterRecord) LastError() string {
	if n := len(d.Entry.Errors); n > 0 {
		return d.Entry.Errors[n-1].Error
	}
	return d.Error
}

// Recreated says why the entry is not of the task v, the task of its ID
// now: the task was deleted and created again since the entry's run (the
// entry's taskCreatedAt and the task's createdAt are both known and
// differ), and retrying the entry would run the new task. It is "" when
// the entry is of v, or when either time is unknown.
func (d *DeadLetterRecord) Recreated(v *TaskView) string {
	if v == nil || v.Schedule == nil || !gov.OtherCreatedAt(d.Entry.Dispatch.TaskCreatedAt, v.Schedule.CreatedAt) {
		return ""
	}
	return fmt.Sprintf("dead letter %d is of task %q created at %s, deleted and created again at %s: retrying it would run the new task",
		d.Seq, d.Entry.TaskID, d.Entry.Dispatch.TaskCreatedAt.UTC().Format(time.RFC3339Nano), v.Schedule.CreatedAt.UTC().Format(time.RFC3339Nano))
}

// Requeue is the data of the task.requeued that retries the entry, with
// reason. It names the entry's task (taskCreatedAt, from the entry's
// dispatch), so the governor rejects it if the task was deleted and created
// again (Recreated) by the time it applies it; unless force, which runs
// whichever task has the ID then, and leaves taskCreatedAt unset.
func (d *DeadLetterRecord) Requeue(reason string, force bool) events.TaskRequeue {
	r := events.TaskRequeue{ID: d.Entry.TaskID, DeadLetterSeq: d.Seq, Reason: reason}
	if !force {
		r.TaskCreatedAt = d.Entry.Dispatch.TaskCreatedAt
	}
	return r
}

// DecodeDeadLetter decodes a DEADLETTER message (from the stream or from a
// core subscription to flyball.deadletter.>). seq and at may be zero.
func DecodeDeadLetter(seq uint64, at time.Time, subject string, header nats.Header, data []byte) DeadLetterRecord {
	rec := DeadLetterRecord{Seq: seq, Time: at, Subject: subject, Raw: data}
	e, err := events.Decode(header, data)
	if err == nil {
		rec.EventID = e.ID()
		err = events.DecodeData(e, &rec.Entry)
	}
	if err != nil {
		rec.Error = err.Error()
		if s, perr := events.ParseSubject(subject); perr == nil {
			rec.Entry.TaskID = s.ID
		}
	}
	if rec.Time.IsZero() {
		rec.Time = rec.Entry.DeadLetteredAt
	}
	return rec
}

func deadLetterFilter(taskID string) string {
	if taskID == "" {
		return events.DeadLetterSubject("*")
	}
	return events.DeadLetterSubject(taskID)
}

// DeadLetters returns the newest limit entries (every one when limit <= 0),
// of one task or, with taskID "", of all tasks, oldest first.
func (r *Reader) DeadLetters(ctx context.Context, taskID string, limit int) ([]DeadLetterRecord, error) {
	out, _, err := r.DeadLetterPage(ctx, taskID, Page{Limit: limit})
	return out, err
}

// DeadLetterPage returns one page of the entries of one task or, with
// taskID "", of all tasks, oldest first, and the Before of the page of
// older ones (zero on the oldest page).
func (r *Reader) DeadLetterPage(ctx context.Context, taskID string, p Page) ([]DeadLetterRecord, uint64, error) {
	if p.empty() {
		return []DeadLetterRecord{}, 0, nil
	}
	var (
		out []DeadLetterRecord
		err error
	)
	if taskID == "" && p.Limit > 0 {
		out, err = r.newestDeadLetters(ctx, p.keep(), p.endSeq())
	} else {
		keep := lastN[DeadLetterRecord]{n: p.keep()}
		err = Scan(ctx, r.js, ScanOptions{Stream: streams.StreamDeadLetter, Subjects: []string{deadLetterFilter(taskID)}, EndSeq: p.endSeq()}, func(m Message) error {
			keep.push(DecodeDeadLetter(m.Seq, m.Time, m.Subject, m.Header, m.Data))
			return nil
		})
		out = keep.values()
	}
	out, next := cut(p, out, func(rec *DeadLetterRecord) uint64 { return rec.Seq })
	if out == nil {
		out = []DeadLetterRecord{}
	}
	return out, next, err
}

// newestDeadLetters returns the newest limit (> 0) entries of all tasks
// stored up to sequence end (zero: the last), oldest first, without
// reading the whole stream. DEADLETTER holds only entries, so they are its
// sequences up to end, except for the gaps a purge of one task's entries
// (flyball dlq purge --task) or a deleted entry leaves. It reads back from
// end in windows, each twice as long as the one before, until it holds
// limit entries or reaches the first sequence. With no gaps that is one
// read of limit sequences. At most State.NumDeleted sequences between the
// first and end are missing, so the reads never go back further than
// limit + NumDeleted sequences.
func (r *Reader) newestDeadLetters(ctx context.Context, limit int, end uint64) ([]DeadLetterRecord, error) {
	out := []DeadLetterRecord{}
	st, err := r.js.Stream(ctx, streams.StreamDeadLetter)
	if err != nil {
		return out, fmt.Errorf("stream %s: %w", streams.StreamDeadLetter, err)
	}
	state := st.CachedInfo().State
	last := state.LastSeq
	if end > 0 {
		last = min(last, end)
	}
	first := max(state.FirstSeq, 1)
	if state.Msgs == 0 || last < first {
		return out, nil
	}
	floor := first
	if span := uint64(limit) + uint64(max(state.NumDeleted, 0)); last-first >= span {
		floor = last - span + 1
	}
	hi, window := last, uint64(limit)
	for {
		lo := floor
		if hi-floor >= window {
			lo = hi - window + 1
		}
		var got []DeadLetterRecord
		err := Scan(ctx, r.js, ScanOptions{
			Stream: streams.StreamDeadLetter, Subjects: []string{deadLetterFilter("")},
			StartSeq: lo, EndSeq: hi,
		}, func(m Message) error {
			got = append(got, DecodeDeadLetter(m.Seq, m.Time, m.Subject, m.Header, m.Data))
			return nil
		})
		out = append(got, out...)
		if err != nil || len(out) >= limit || lo == floor {
			if len(out) > limit {
				out = out[len(out)-limit:]
			}
			return out, err
		}
		hi = lo - 1
		if window > math.MaxUint64/2 {
			window = math.MaxUint64 // doubled, it overflowed
		} else {
			window *= 2
		}
	}
}

// DeadLetter returns the entry stored at seq, or an error wrapping ErrNotFound.
func (r *Reader) DeadLetter(ctx context.Context, seq uint64) (*DeadLetterRecord, error) {
	st, err := r.js.Stream(ctx, streams.StreamDeadLetter)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", streams.StreamDeadLetter, err)
	}
	raw, err := st.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("dead letter %d: %w", seq, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read dead letter %d: %w", seq, err)
	}
	rec := DecodeDeadLetter(raw.Sequence, raw.Time, raw.Subject, raw.Header, raw.Data)
	return &rec, nil
}

// CountDeadLetters counts the stored entries of one task, or of all tasks
// with taskID "".
func (r *Reader) CountDeadLetters(ctx context.Context, taskID string) (uint64, error) {
	st, err := r.js.Stream(ctx, streams.StreamDeadLetter)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", streams.StreamDeadLetter, err)
	}
	n, _, err := countDeadLetters(ctx, st, taskID)
	return n, err
}

// countDeadLetters counts the entries of one task (all with taskID "")
// and returns the stream's last sequence when it counted them.
func countDeadLetters(ctx context.Context, st jetstream.Stream, taskID string) (n, last uint64, err error) {
	if taskID == "" {
		state := st.CachedInfo().State
		return state.Msgs, state.LastSeq, nil
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(deadLetterFilter(taskID)))
	if err != nil {
		return 0, 0, fmt.Errorf("stream %s: %w", streams.StreamDeadLetter, err)
	}
	for _, c := range info.State.Subjects {
		n += c
	}
	return n, info.State.LastSeq, nil
}

// PurgeDeadLetters deletes the stored entries of one task, or of all tasks
// with taskID "", and returns how many there were. Runs are not affected:
// a purge only forgets the record. It deletes the entries it counted, up
// to the last sequence when it counted them: one stored meanwhile stays.
func (r *Reader) PurgeDeadLetters(ctx context.Context, taskID string) (uint64, error) {
	st, err := r.js.Stream(ctx, streams.StreamDeadLetter)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", streams.StreamDeadLetter, err)
	}
	n, last, err := countDeadLetters(ctx, st, taskID)
	if err != nil || n == 0 {
		return 0, err
	}
	opts := []jetstream.StreamPurgeOpt{jetstream.WithPurgeSequence(last + 1)}
	if taskID != "" {
		opts = append(opts, jetstream.WithPurgeSubject(deadLetterFilter(taskID)))
	}
	if err := st.Purge(ctx, opts...); err != nil {
		return 0, fmt.Errorf("purge %s: %w", streams.StreamDeadLetter, err)
	}
	return n, nil
}
