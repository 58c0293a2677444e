// Package control publishes control-plane commands (task.created, paused,
// hinted, …) the way every flyball client does, and waits for the
// governor's task.accepted or task.rejected answer. The HTTP API and the CLI
// both use it, so they behave identically.
package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/streams"
)

// ErrStored is wrapped by the errors SendID returns, with the command
// id, once TASKS stored the command (its publish was acked) but its
// verdict is not known: the governor accepts or rejects it when it reads
// it. Sending it again with the same id stores nothing and is answered
// with that verdict; sent again with a new id, it is a second command.
var ErrStored = errors.New("the command is stored, and the governor will accept or reject it")

// ErrTimeout is ErrStored when no answer arrived in time: no governor
// runs, or it is behind. It does not mean the command will be applied:
// it may be rejected.
var ErrTimeout = fmt.Errorf("%w, but it did not answer in time (is the governor running?)", ErrStored)

// ErrMaybeStored wraps a publish error after which TASKS may hold the
// command or not: its ack timed out or was lost with the connection, and
// publishing it again to find out failed too, or the caller's context
// ended first. SendID returns the command id with it: a command that was
// stored is applied, and sending it again with the same id (an
// Idempotency-Key) stores it at most once.
var ErrMaybeStored = errors.New("the command may or may not have been stored")

// Answer is the governor's reply to a command.
type Answer struct {
	Accepted *events.TaskAccepted `json:"accepted,omitempty"`
	Rejected *events.TaskRejected `json:"rejected,omitempty"`
}

// Client sends commands.
type Client struct {
	NC     *nats.Conn
	JS     jetstream.JetStream
	Source string
	// now is the clock, time.Now when nil (tests set it).
	now func() time.Time
}

func (c *Client) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

// Send publishes a command for task id and waits up to wait for the answer.
// wait <= 0 returns right after the command is stored. It returns the
// command's event id.
func (c *Client) Send(ctx context.Context, verb events.Verb, id string, data any, wait time.Duration) (string, *Answer, error) {
	return c.SendID(ctx, verb, id, uuid.NewString(), data, wait)
}

// SendID is Send with the caller's command id (the event id and
// Nats-Msg-Id, at most 256 bytes). A command sent again with the same id
// within TASKS's duplicate window (2 minutes) is not stored again, and is
// answered with the first one's verdict: a client that retries after a
// timeout sends one command. After a publish error it returns the command
// id only with ErrMaybeStored: other publish errors mean it was not
// stored. Once the publish is acked, an error (the wait ended, the stored
// answer could not be read) wraps ErrStored and comes with the id.
func (c *Client) SendID(ctx context.Context, verb events.Verb, id, cmdID string, data any, wait time.Duration) (string, *Answer, error) {
	if !events.ValidToken(id) {
		return "", nil, &events.FieldError{Field: "id", Rule: fmt.Sprintf("must be 1-%d characters of [A-Za-z0-9_-], got %q", events.MaxIDLength, id)}
	}
	var subs []*nats.Subscription
	answers := make(chan *nats.Msg, answerBuffer)
	if wait > 0 {
		// Answers for this task travel on flyball.task.{accepted,rejected}.<id>;
		// they are also stored in TASKS, but a core subscription made before
		// publishing sees them with no consumer to clean up. Only the
		// answers: the task's other commands filled the channel while
		// a repeated command looked for its stored answer.
		defer func() {
			for _, sub := range subs {
				_ = sub.Unsubscribe()
			}
		}()
		for _, verb := range []events.Verb{events.VerbAccepted, events.VerbRejected} {
			sub, err := c.NC.ChanSubscribe(events.TaskSubject(verb, id), answers)
			if err != nil {
				return "", nil, fmt.Errorf("subscribe for the answer: %w", err)
			}
			subs = append(subs, sub)
		}
	}
	src := c.Source
	if src == "" {
		src = "flyball/cli"
	}
	start := time.Now().UTC()
	body, err := events.Marshal(verb.Type(), src, id, data, start, cmdID)
	if err != nil {
		return "", nil, err
	}
	subject := events.TaskSubject(verb, id)
	ack, err := jsutil.Publish(ctx, c.JS, subject, cmdID, body)
	if err != nil && !jsutil.NotStored(err) {
		ack, err = c.confirm(ctx, subject, cmdID, body, err)
	}
	if errors.Is(err, ErrMaybeStored) {
		return cmdID, nil, err
	}
	if err != nil {
		return "", nil, err
	}
	if ack.Duplicate && wait > 0 {
		// The first command was stored within the duplicate window; its
		// answer may be stored already, before the subscription began.
		if a, err := c.storedAnswer(ctx, id, cmdID, start.Add(-duplicateLookback)); err != nil || a != nil {
			return cmdID, a, stored(err)
		}
	}
	if wait <= 0 {
		return cmdID, nil, nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	check := time.NewTicker(droppedCheck)
	defer check.Stop()
	// A burst of the task's answers may overflow the channel (nats.go
	// drops a slow subscriber's messages), and this command's answer may
	// go with them: it is stored in TASKS, and read there once the
	// subscriptions dropped more than when last looked.
	var dropped int
	afterDrops := func() (*Answer, error) {
		n := droppedFrom(subs)
		if n <= dropped {
			return nil, nil
		}
		dropped = n
		return c.storedAnswer(ctx, id, cmdID, start.Add(-duplicateLookback))
	}
	for {
		select {
		case <-ctx.Done():
			return cmdID, nil, stored(ctx.Err())
		case <-timer.C:
			// An answer dropped after the last check is stored too.
			if a, err := afterDrops(); err != nil || a != nil {
				return cmdID, a, stored(err)
			}
			return cmdID, nil, ErrTimeout
		case <-check.C:
			if a, err := afterDrops(); err != nil || a != nil {
				return cmdID, a, stored(err)
			}
		case m := <-answers:
			if a := match(m, cmdID); a != nil {
				return cmdID, a, nil
			}
		}
	}
}

// stored wraps an error met after the command was stored in ErrStored:
// "command not stored" sent a client to send it again as a second one.
func stored(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w; its verdict is not known: %w", ErrStored, err)
}

// answerBuffer is how many of a task's answers SendID's subscription
// holds while it is not reading them (a repeated command reads the
// stored answer first); nats.go drops the ones beyond it.
const answerBuffer = 256

// droppedCheck is how often SendID looks whether its subscription
// dropped answers, to read the stored answer instead.
const droppedCheck = 100 * time.Millisecond

// droppedFrom is how many messages subs dropped as a slow consumer.
func droppedFrom(subs []*nats.Subscription) int {
	n := 0
	for _, sub := range subs {
		if d, err := sub.Dropped(); err == nil {
			n += d
		}
	}
	return n
}

// confirmTimeout bounds confirm's publish: JetStream's default publish
// timeout.
const confirmTimeout = 5 * time.Second

// confirm finds out whether a command whose publish failed with err, an
// error that is not a refusal, is stored. A publish whose ack timed out or
// was lost with the connection may have been stored, and the governor
// then applies it: "not stored" sent the client to send it again as a
// second command. confirm publishes the command again with the same
// Nats-Msg-Id, so TASKS answers Duplicate if the first publish was stored
// and stores it now if not: either way it is stored once, and its answer
// is awaited as usual. A caller whose context ended gave the command up,
// so it is not published again (nor would anyone read the answer), and
// the error says the command may have been stored.
func (c *Client) confirm(ctx context.Context, subject, cmdID string, body []byte, err error) (*jetstream.PubAck, error) {
	if ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, confirmTimeout)
		defer cancel()
		ack, again := jsutil.Publish(cctx, c.JS, subject, cmdID, body)
		if again == nil {
			return ack, nil
		}
		err = fmt.Errorf("%w; publishing it again: %w", err, again)
	}
	return nil, fmt.Errorf("%w (command %s): %w", ErrMaybeStored, cmdID, err)
}

// duplicateLookback is how far back storedAnswer looks: TASKS's duplicate
// window (2 minutes) and a margin for clock skew and a slow answer.
const duplicateLookback = 5 * time.Minute

// storedAnswer finds the governor's answer to command cmdID of task id in
// TASKS, stored at or after since, or returns nil.
func (c *Client) storedAnswer(ctx context.Context, id, cmdID string, since time.Time) (*Answer, error) {
	var a *Answer
	err := c.scanTasks(ctx, since, func(m jetstream.Msg) bool {
		a = match(&nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}, cmdID)
		return a != nil
	}, events.TaskSubject(events.VerbAccepted, id), events.TaskSubject(events.VerbRejected, id))
	if err != nil {
		return nil, fmt.Errorf("read the answer to a repeated command: %w", err)
	}
	return a, nil
}

// Stored reports whether TASKS holds command cmdID (its Nats-Msg-Id) of
// task id, stored within TASKS's duplicate window less a tenth of it:
// SendID with that id then stores nothing and answers with the first
// one's verdict. A caller that would refuse the command (its task is
// missing, its pause's until has passed) asks this first when a client
// retries with the same id, and sends it again if it was stored: its own
// command may be what removed the task.
//
// The window is judged by the NATS server's clock (the time of TASKS's
// stream info), which stamps the commands and times the window, not by
// this host's: it looked back the window and a minute for clock skew
// from this host's clock, and a command found in that extra minute was
// stored again when sent, a pause whose until had passed with it, which
// the governor applied by ending the task's newer pause. The tenth left
// is for the retry to be stored before the window closes; a command sent
// longer ago than that is not found, and the caller refuses the retry as
// a new request.
func (c *Client) Stored(ctx context.Context, verb events.Verb, id, cmdID string) (bool, error) {
	st, err := c.JS.Stream(ctx, streams.StreamTasks)
	if err != nil {
		return false, fmt.Errorf("look for a repeated command: stream %s: %w", streams.StreamTasks, err)
	}
	info := st.CachedInfo()
	now := info.TimeStamp
	if now.IsZero() { // a server that does not say its time
		now = c.clock()
	}
	window := info.Config.Duplicates
	since := now.UTC().Add(-window + window/10)
	found := false
	err = c.scanTasks(ctx, since, func(m jetstream.Msg) bool {
		found = m.Headers().Get(jetstream.MsgIDHeader) == cmdID
		return found
	}, events.TaskSubject(verb, id))
	if err != nil {
		return false, fmt.Errorf("look for a repeated command: %w", err)
	}
	return found, nil
}

// scanTasks calls fn with each message of TASKS on subjects stored at or
// after since when it begins, until fn returns true.
func (c *Client) scanTasks(ctx context.Context, since time.Time, fn func(jetstream.Msg) bool, subjects ...string) error {
	cons, err := c.JS.OrderedConsumer(ctx, streams.StreamTasks, jetstream.OrderedConsumerConfig{
		FilterSubjects: subjects,
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &since,
		// Should the delete below fail.
		InactiveThreshold: jsutil.OrderedInactiveThreshold,
	})
	if err != nil {
		return err
	}
	defer func() { _ = jsutil.DeleteOrdered(ctx, c.JS, streams.StreamTasks, cons) }()
	// The messages stored when the consumer was made; a later answer
	// reaches SendID's subscription.
	for pending := cons.CachedInfo().NumPending; pending > 0; {
		batch, err := cons.Fetch(int(min(pending, 256)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return err
		}
		n := uint64(0)
		for m := range batch.Messages() {
			n++
			if fn(m) {
				return nil
			}
		}
		if err := batch.Error(); err != nil && n == 0 {
			return err
		}
		if n == 0 {
			break
		}
		pending -= min(n, pending)
	}
	return nil
}

func match(m *nats.Msg, cmdID string) *Answer {
	if !strings.HasPrefix(m.Subject, "flyball.task.accepted.") && !strings.HasPrefix(m.Subject, "flyball.task.rejected.") {
		return nil
	}
	e, err := events.Decode(m.Header, m.Data)
	if err != nil {
		return nil
	}
	switch e.Type() {
	case events.TypeTaskAccepted:
		var a events.TaskAccepted
		if events.DecodeData(e, &a) == nil && a.CommandID == cmdID {
			return &Answer{Accepted: &a}
		}
	case events.TypeTaskRejected:
		var r events.TaskRejected
		if events.DecodeData(e, &r) == nil && r.CommandID == cmdID {
			return &Answer{Rejected: &r}
		}
	}
	return nil
}
