package api_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/flyballhq/flyball/services/api"
	"github.com/flyballhq/flyball/services/internal/natstest"
	"github.com/flyballhq/flyball/services/internal/svcconf"
)

// TestSlowClientsAreCutOff: a client that sends its headers and then
// trickles (or never sends) the body it announced, or that keeps an idle
// keep-alive connection open, is cut off after Config.ReadTimeout. Only
// the headers were bounded (ReadHeaderTimeout), so a slowloris body or a
// pile of idle connections held a goroutine and a socket each, forever.
func TestSlowClientsAreCutOff(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithStreams(t)
	_, js := srv.Connect(t)
	s, err := api.New(api.Config{
		Common: svcconf.Common{JS: js}, Addr: "127.0.0.1:0", Tokens: []string{token}, ReadTimeout: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)

	// A body announced but never sent: answered 408, then the connection
	// is closed.
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "POST /api/v1/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+token+
		"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a body that never arrives: %v; want the server to answer and close within 5s (ReadTimeout is 300ms)", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("a body that never arrives: status %d, want 408", resp.StatusCode)
	}

	// An idle keep-alive connection is closed too.
	idle, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	_, _ = io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(idle)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("an idle keep-alive connection is still open after 5s; want it closed after ReadTimeout (300ms)")
		}
		t.Fatalf("idle connection: %v, want EOF", err)
	}
}
