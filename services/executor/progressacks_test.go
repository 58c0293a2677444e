package executor

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/streams"
)

// progressAcks records when each InProgress (+WPI) for a first DISPATCH
// delivery reached the server (a redelivery's, from another executor,
// would hide a keep-alive that stopped), seen on the admin connection: the
// keep-alive itself, observed rather than inferred from a redelivery
// that a starved machine can cause on its own.
type progressAcks struct {
	mu sync.Mutex
	at []time.Time
}

// firstDelivery reports whether an ack subject is for a message's first
// delivery: $JS.ACK.<stream>.<consumer>.<delivered>.… (or, with a domain
// and account hash, $JS.ACK.<domain>.<hash>.<stream>.<consumer>.<delivered>.…).
func firstDelivery(subject string) bool {
	tok := strings.Split(subject, ".")
	switch {
	case len(tok) == 9:
		return tok[4] == "1"
	case len(tok) >= 11:
		return tok[6] == "1"
	}
	return false
}

// watchProgress starts recording the InProgress acks of DISPATCH.
func (f *attemptsFixture) watchProgress(t *testing.T) *progressAcks {
	t.Helper()
	p := &progressAcks{}
	natstest.Subscribe(t, f.srv.NC, "$JS.ACK."+streams.StreamDispatch+".>", func(m *nats.Msg) {
		if string(m.Data) == "+WPI" && firstDelivery(m.Subject) {
			p.mu.Lock()
			p.at = append(p.at, time.Now())
			p.mu.Unlock()
		}
	})
	return p
}

// between is how many InProgress acks arrived in [from, to], and the
// longest stretch that ended with one (from from, or from the ack
// before). The stretch after the last ack is left out: a keep-alive that
// stopped sends none after it, and so shows no long stretch that it
// resumed from (starved).
func (p *progressAcks) between(from, to time.Time) (n int, longest time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	last := from
	for _, at := range p.at {
		if at.Before(from) || at.After(to) {
			continue
		}
		n++
		longest = max(longest, at.Sub(last))
		last = at
	}
	return n, longest
}
