package executor

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/flyballhq/flyball/pkg/events"
	"github.com/flyballhq/flyball/services/internal/natstest"
)

// fakeResolver is a Go resolver whose DNS server, in process, answers
// every A query with addrs, in that order, and any other query with no
// record.
func fakeResolver(addrs ...netip.Addr) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		client, server := net.Pipe() // a stream: DNS over TCP framing
		go serveDNS(server, addrs)
		return client, nil
	}}
}

func serveDNS(c net.Conn, addrs []netip.Addr) {
	defer c.Close()
	for {
		var n [2]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return
		}
		q := make([]byte, binary.BigEndian.Uint16(n[:]))
		if _, err := io.ReadFull(c, q); err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(q)
		if err != nil {
			return
		}
		question, err := p.Question()
		if err != nil {
			return
		}
		b := dnsmessage.NewBuilder(make([]byte, 2, 512), dnsmessage.Header{
			ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true,
		})
		_ = b.StartQuestions()
		_ = b.Question(question)
		_ = b.StartAnswers()
		if question.Type == dnsmessage.TypeA {
			for _, a := range addrs {
				rh := dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 60}
				_ = b.AResource(rh, dnsmessage.AResource{A: a.As4()})
			}
		}
		msg, err := b.Finish()
		if err != nil {
			return
		}
		binary.BigEndian.PutUint16(msg, uint16(len(msg)-2))
		if _, err := c.Write(msg); err != nil {
			return
		}
	}
}

// TestPartlyBlockedNameFailsTransiently: a name that resolves to an
// address the guard refuses and to one it allows, which cannot be
// reached, failed permanently (dead-lettered) when the refused address
// came first, and transiently otherwise: the dialer returns the first
// address's error. The call is refused for good only when the guard
// refused every address the dial tried; otherwise it is an ordinary
// transient failure, whatever the order.
func TestPartlyBlockedNameFailsTransiently(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // nothing listens there now: 127.0.0.1 refuses the connection
	a := netip.MustParseAddr
	d := &events.Dispatch{DispatchID: "x:1", TaskID: "x", ScheduledAt: time.Now()}
	for _, c := range []struct {
		name      string
		addrs     []netip.Addr
		permanent bool
	}{
		{"refused address first", []netip.Addr{a("127.0.0.2"), a("127.0.0.1")}, false},
		{"refused address last", []netip.Addr{a("127.0.0.1"), a("127.0.0.2")}, false},
		{"every address refused", []netip.Addr{a("127.0.0.2"), a("127.0.0.3")}, true},
	} {
		g := Guard{AllowLoopback: true, Deny: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/31")}}
		s, err := New(Config{JS: srv.JS, Guard: g})
		if err != nil {
			t.Fatal(err)
		}
		httpTransport(s.client).DialContext = (&guardedDialer{
			guard: &s.cfg.Guard, dialer: net.Dialer{Timeout: 5 * time.Second, Resolver: fakeResolver(c.addrs...)},
		}).DialContext
		tg := &events.HTTPTarget{Method: "GET", URL: "http://two.flyball.test:" + strconv.Itoa(port) + "/", Timeout: events.Duration(5 * time.Second), MaxResponseBytes: 100, ExpectStatus: []string{"2xx"}}
		res := s.callHTTP(t.Context(), tg, nil, d, 1)
		if res.ok() || res.permanent != c.permanent || errors.Is(res.err, ErrBlocked) != c.permanent {
			t.Errorf("%s (%v): ok %v, permanent %v, err %v; want a failure, permanent %v, wrapping ErrBlocked %v",
				c.name, c.addrs, res.ok(), res.permanent, res.err, c.permanent, c.permanent)
		}
	}
}
