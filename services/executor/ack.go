package executor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flyballhq/flyball/services/internal/metrics"
	"github.com/flyballhq/flyball/services/internal/repeatlog"
)

// A plain Ack is fire-and-forget, and one that reaches the cluster while
// the DISPATCH consumer is electing a leader (a NATS node died, say) is
// dropped. The dispatch then stays in DISPATCH until AckWait (30s by
// default) and redelivers a run that already happened, and because
// DISPATCH keeps one message per task, the task's next run cannot be
// dispatched until then: a node loss would hold back every task whose run
// finished during the election. A nak or a term is lost the same way, with
// worse effects: a lost NakWithDelay turns a retry due in a second into one
// after AckWait, and a lost term redelivers a run that already failed for
// good after AckWait, so its target is called again.
//
// The server confirms any ack kind sent with a reply subject (DoubleAck is
// that request for +ACK; nats.go has no such call for naks and terms). So
// the executor sends every ack, nak and term as a request, and retries it
// until the consumer leader's reply comes.
//
// Except a nak whose delay may have passed. nats-server applies an ack,
// nak or term to the message its reply subject names (the stream
// sequence), whichever delivery of it is current: it does not check the
// delivery the subject was made for. An ack or a term that was applied
// removes the message from DISPATCH (a work queue), so a retry of it finds
// nothing to settle; one that was not applied leaves the same delivery in
// place. A nak that was applied but whose confirmation was slow or lost is
// different: once its delay has passed the message is delivered again,
// and a retry of the nak landing then hands back that new delivery while
// its call runs, and the server delivers it once more: the target is
// called twice at once for one dispatch. So a try that went unanswered
// (it may have been applied) is retried only while the retry is due a
// whole try before the nak's delay, counted from its first try, could
// have passed; a try the server answered "no responders" was not applied
// and is retried as an ack is. A nak with no delay (a shutdown hand-back)
// is thus never sent again after an unanswered try. One that was lost is
// covered all the same: the delivery comes back after AckWait.

// The settler sends them all through one reply subscription and one
// retry ticker: a settled dispatch costs a map entry and a publish, not a
// goroutine with its own request, context and timer (3.7% of the CPU of a
// W1c profile went to those).

const (
	// ackTry is how long a try waits for its confirmation.
	ackTry = 2 * time.Second
	// ackRetry is the first pause after a failed try; it doubles up to
	// ackTry.
	ackRetry = 250 * time.Millisecond
	// settleTick is how often unanswered tries are checked, while any is
	// pending.
	settleTick = 100 * time.Millisecond
	// settleLogWindow is the least time between two lines of the same
	// give-up or late-confirmation message: when NATS is overloaded, every
	// dispatch of a burst can give up at once, and each used to log a
	// warning (about 6,000 in two seconds, benchmark-findings.md finding 41). The
	// repeats are counted in one line; flyball_settles_unconfirmed_total
	// counts every give-up.
	settleLogWindow = 10 * time.Second
)

// settler sends acks, naks and terms as requests and retries each until
// the consumer leader confirms it, the dispatch's AckWait has passed
// (it is being redelivered anyway), the settler stops (one last try), or,
// for a nak a try of which went unanswered, a retry could land after the
// nak's delay (stale).
type settler struct {
	nc  *nats.Conn
	log *slog.Logger
	// warns writes the give-ups and late confirmations, which come in
	// bursts, once per window with a count of the rest.
	warns       *repeatlog.Log
	unconfirmed *prometheus.CounterVec // by kind: given up
	prefix      string                 // reply subjects are prefix + an ID
	sub         *nats.Subscription
	// try, retry and tick are ackTry, ackRetry and settleTick (tests
	// shorten them).
	try, retry, tick time.Duration

	mu       sync.Mutex
	pending  map[uint64]*pendingSettle
	next     uint64
	ticking  bool // the ticker goroutine runs (while any is pending)
	stopping bool
	idle     sync.WaitGroup // one per pending settle
}

// pendingSettle is one ack, nak or term not confirmed yet.
type pendingSettle struct {
	to, subject, kind string // the consumer's reply subject; the dispatch's subject and the kind, for logs
	body              []byte
	deadline          time.Time // give up once a retry would pass it
	at                time.Time // sent: fails if unanswered by then; else: send again then
	sent              bool
	wait              time.Duration // the pause after the next failed try
	tries             int
	// resendBy, for a nak, is the last time a retry may be sent once a
	// try may have been applied (unsure): a whole try before the nak's
	// delay, counted from the first try, can have passed. Zero for acks
	// and terms, which are retried until deadline.
	resendBy time.Time
	unsure   bool // a try went unanswered: it may have been applied
}

func newSettler(nc *nats.Conn, log *slog.Logger, m *metrics.Set) (*settler, error) {
	st := &settler{
		nc: nc, log: log, warns: repeatlog.New(log, settleLogWindow), unconfirmed: m.SettlesUnconfirmed,
		prefix: nc.NewInbox() + ".", pending: map[uint64]*pendingSettle{},
		try: ackTry, retry: ackRetry, tick: settleTick,
	}
	sub, err := nc.Subscribe(st.prefix+"*", st.reply)
	if err != nil {
		return nil, fmt.Errorf("settle replies: %w", err)
	}
	st.sub = sub
	return st, nil
}

// settle sends body (an ack, nak or term) to the reply subject to, which
// settles the delivery of subject, and keeps trying until it is confirmed
// or deadline. It never waits for the round trip.
func (st *settler) settle(to, subject, kind string, body []byte, deadline time.Time) {
	p := &pendingSettle{to: to, subject: subject, kind: kind, body: body, deadline: deadline}
	delay, isNak := nakDelay(body)
	st.mu.Lock()
	now := time.Now()
	p.wait = st.retry
	if isNak {
		p.resendBy = now.Add(delay - st.try)
	}
	if st.stopping {
		p.deadline = now // one try
	}
	id := st.next
	st.next++
	st.pending[id] = p
	st.idle.Add(1)
	if !st.ticking { // it runs while any settle is pending
		st.ticking = true
		go st.ticks()
	}
	st.send(id, p, now)
	st.mu.Unlock()
}

// send makes one try. The caller holds st.mu.
func (st *settler) send(id uint64, p *pendingSettle, now time.Time) {
	p.tries++
	p.sent, p.at = true, now.Add(st.try)
	if err := st.nc.PublishRequest(p.to, st.prefix+strconv.FormatUint(id, 10), p.body); err != nil {
		st.failed(id, p, err, now)
	}
}

// failed records a failed try: it is retried after its wait, unless that
// would pass its deadline, or the try went unanswered and is a nak whose
// retry would be due too late (stale). The caller holds st.mu.
func (st *settler) failed(id uint64, p *pendingSettle, err error, now time.Time) {
	if errors.Is(err, nats.ErrTimeout) {
		p.unsure = true
	}
	if st.stale(p, now.Add(p.wait)) {
		st.giveUpStale(id, p, now)
		return
	}
	if !now.Add(p.wait).Before(p.deadline) {
		st.unconfirmed.WithLabelValues(p.kind).Inc()
		st.warns.Log(now, slog.LevelWarn, p.kind+" not confirmed; the dispatch is redelivered after AckWait", "subject", p.subject, "tries", p.tries, "err", err)
		st.forget(id)
		return
	}
	st.log.Debug(p.kind+" not confirmed; retrying", "subject", p.subject, "err", err, "in", p.wait)
	p.sent, p.at = false, now.Add(p.wait)
	p.wait = min(2*p.wait, st.try)
}

// stale reports whether a retry of p sent at would be a nak that may land
// on a later delivery: a try of it went unanswered, and at is past its
// resendBy.
func (st *settler) stale(p *pendingSettle, at time.Time) bool {
	return p.unsure && !p.resendBy.IsZero() && at.After(p.resendBy)
}

// giveUpStale ends a nak that is not sent again (stale). The caller holds
// st.mu.
func (st *settler) giveUpStale(id uint64, p *pendingSettle, now time.Time) {
	st.unconfirmed.WithLabelValues(p.kind).Inc()
	st.warns.Log(now, slog.LevelWarn, "nak not confirmed and not sent again, as its delay may have passed; the dispatch is redelivered after its delay, or after AckWait if the nak was lost",
		"subject", p.subject, "tries", p.tries)
	st.forget(id)
}

// resend sends a try that is due again, unless it has become stale. The
// caller holds st.mu.
func (st *settler) resend(id uint64, p *pendingSettle, now time.Time) {
	if st.stale(p, now) {
		st.giveUpStale(id, p, now)
		return
	}
	st.send(id, p, now)
}

// forget ends a settle, confirmed or given up (after its log line, so a
// waiter sees it). The caller holds st.mu.
func (st *settler) forget(id uint64) {
	delete(st.pending, id)
	st.idle.Done()
}

// reply handles a confirmation, or the server's "no responders" status
// while the consumer has no leader.
func (st *settler) reply(m *nats.Msg) {
	id, err := strconv.ParseUint(m.Subject[len(st.prefix):], 10, 64)
	if err != nil {
		return
	}
	noResponders := len(m.Data) == 0 && m.Header.Get("Status") == "503"
	st.mu.Lock()
	defer st.mu.Unlock()
	p, ok := st.pending[id]
	if !ok {
		return
	}
	if noResponders {
		if p.sent { // else a late answer to a try already counted as failed
			st.failed(id, p, nats.ErrNoResponders, time.Now())
		}
		return
	}
	// A confirmation of any try settles it, even one already counted as
	// unanswered.
	if p.tries > 1 {
		st.warns.Log(time.Now(), slog.LevelInfo, p.kind+" confirmed after retries", "subject", p.subject, "tries", p.tries)
	}
	st.forget(id)
}

// ticks fails unanswered tries and sends due retries, while any settle is
// pending.
func (st *settler) ticks() {
	t := time.NewTicker(st.tick)
	defer t.Stop()
	for range t.C {
		st.mu.Lock()
		now := time.Now()
		for id, p := range st.pending {
			switch {
			case now.Before(p.at):
			case p.sent:
				st.failed(id, p, nats.ErrTimeout, now)
			default:
				st.resend(id, p, now)
			}
		}
		if len(st.pending) == 0 {
			// Quiet now: the counts of repeats need not wait for their
			// windows.
			st.warns.Flush(now, true)
			st.ticking = false
			st.mu.Unlock()
			return
		}
		st.warns.Flush(now, false)
		st.mu.Unlock()
	}
}

// stop gives every pending settle one last try (those waiting to retry
// are sent at once, but for a stale nak), waits until each is confirmed
// or has failed, and ends the reply subscription.
func (st *settler) stop() {
	st.mu.Lock()
	st.stopping = true
	now := time.Now()
	for id, p := range st.pending {
		p.deadline = now
		if !p.sent {
			st.resend(id, p, now)
		}
	}
	st.mu.Unlock()
	st.idle.Wait()
	st.warns.Flush(time.Now(), true)
	_ = st.sub.Unsubscribe()
}

// Ack bodies, in nats.go's wire format.
var (
	ackBody      = []byte("+ACK")
	progressBody = []byte("+WPI") // an InProgress (keepWaitersAlive)
)

// nakBody asks for a redelivery after delay (at once when it is 0).
func nakBody(delay time.Duration) []byte {
	if delay > 0 {
		return fmt.Appendf(nil, `-NAK {"delay": %d}`, delay.Nanoseconds())
	}
	return []byte("-NAK")
}

// nakDelay is the delay of a nak body made by nakBody (ok is false for
// any other body): the settler reads it off the body it would send again.
func nakDelay(body []byte) (delay time.Duration, ok bool) {
	rest, ok := bytes.CutPrefix(body, []byte("-NAK"))
	if !ok {
		return 0, false
	}
	if len(rest) == 0 {
		return 0, true
	}
	var arg struct {
		Delay int64 `json:"delay"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(rest), &arg); err != nil {
		return 0, true // no readable delay: take it as immediate, the safe side
	}
	return time.Duration(arg.Delay), true
}

// termBody ends the delivery for good, with a reason for the advisory.
func termBody(reason string) []byte {
	if reason == "" {
		return []byte("+TERM")
	}
	return []byte("+TERM " + reason)
}

// ack acknowledges a settled dispatch (see settle).
func (s *Service) ack(m jetstream.Msg) { s.settle(m, "ack", ackBody) }

// settle sends body (an ack, nak or term) to m's reply subject as a
// request the server confirms, and retries it until the confirmation comes
// (settler). It is called from the outbox, which must not wait on a round
// trip.
//
// It ends m's keep-alive (waitBegin). If the last InProgress, or the
// delivery, is more than a quarter AckWait old, it sends one more first,
// on the same connection, so the settle has at least three quarters of an
// AckWait to be confirmed, however long the call and the outbox took.
// No InProgress may follow a nak: it would restart the AckWait and put
// off the retry the nak asked for, so one that keepWaitersAlive is
// sending is waited out (progressMu). After an ack or a term the server
// ignores it (TestInProgressAfterASettleIsHarmless), so those do not wait.
func (s *Service) settle(m jetstream.Msg, kind string, body []byte) {
	s.sentMu.Lock()
	delete(s.sent, m)
	s.sentMu.Unlock()
	if due, kept := s.waitEnd(m); kept {
		if kind == "nak" {
			s.progressMu.Lock()
			//nolint:staticcheck // SA2001: an empty section on purpose, a barrier behind keepWaitersAlive's sends
			s.progressMu.Unlock()
		}
		if !time.Now().Before(due.Add(-s.cfg.AckWait / 4)) { // due is half an AckWait after the last one
			_ = m.InProgress()
		}
	}
	s.settles.settle(m.Reply(), m.Subject(), kind, body, time.Now().Add(s.cfg.AckWait))
}
