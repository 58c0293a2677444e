// Package target is the HTTP endpoint the benchmark's schedulers call. It
// records, for every request, when the handler saw it and the headers that
// say which run it is: Flyball-Task, Flyball-Scheduled-At and
// Idempotency-Key.
//
// A target runs either inside the benchmark process (Listen) or in a child
// process (Spawn), so the CPU it burns serving requests is not charged to
// the scheduler under test. The child is the benchmark binary itself, run
// with the "target" subcommand, which calls Main.
package target

import (
	"bufio"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flyballhq/flyball/loadtest/stats"
)

// Headers read from every request. The executor sends them; the floor and
// the nats-server baseline send the same ones.
const (
	HeaderTask        = "Flyball-Task"
	HeaderScheduledAt = "Flyball-Scheduled-At"
	HeaderKey         = "Idempotency-Key"
)

// drainPath returns every arrival recorded so far as a gob-encoded
// []stats.Arrival and forgets them. With ?before=N (Unix nanoseconds) it
// forgets only the arrivals before N, keeps the rest for the next drain and
// answers how many it forgot, in decimal: the warm-up drain at a
// measurement window's start, which neither encodes nor throws away the
// window's first calls.
const drainPath = "/_bench/drain"

// beforeParam is drainPath's query parameter for a warm-up drain.
const beforeParam = "before"

// Target is a running target.
type Target interface {
	// URLs are the base URLs to call, one per listening address.
	URLs() []string
	// Drain returns every arrival recorded since the last Drain.
	Drain(ctx context.Context) ([]stats.Arrival, error)
	// DrainBefore forgets the arrivals recorded before t (Unix
	// nanoseconds) and returns how many; those at or after t stay for the
	// next Drain.
	DrainBefore(ctx context.Context, t int64) (int, error)
	// PID is the process serving requests: 0 for this process.
	PID() int
	// Close stops the target.
	Close() error
}

// Recorder is an http.Handler that records arrivals.
type Recorder struct {
	mu       sync.Mutex
	arrivals []stats.Arrival
}

// ServeHTTP records the request and answers 200.
func (r *Recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	at := time.Now().UnixNano()
	if req.URL.Path == drainPath {
		r.serveDrain(w, req)
		return
	}
	a := stats.Arrival{At: at, Task: req.Header.Get(HeaderTask), Key: req.Header.Get(HeaderKey)}
	if s := req.Header.Get(HeaderScheduledAt); s != "" {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			a.Scheduled = t.UnixNano()
		}
	}
	r.mu.Lock()
	r.arrivals = append(r.arrivals, a)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "ok")
}

// Drain returns and forgets the arrivals recorded so far.
func (r *Recorder) Drain() []stats.Arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.arrivals
	r.arrivals = make([]stats.Arrival, 0, max(len(out), 1024))
	return out
}

// DrainBefore forgets the arrivals recorded before t and returns how many;
// the others, in their order, stay for the next Drain. Arrivals are not
// strictly in time order (each is stamped before the lock), so every one
// is checked.
func (r *Recorder) DrainBefore(t int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := r.arrivals[:0]
	for _, a := range r.arrivals {
		if a.At >= t {
			kept = append(kept, a)
		}
	}
	n := len(r.arrivals) - len(kept)
	clear(r.arrivals[len(kept):]) // drop the forgotten strings
	r.arrivals = kept
	return n
}

func (r *Recorder) serveDrain(w http.ResponseWriter, req *http.Request) {
	if s := req.URL.Query().Get(beforeParam); s != "" {
		t, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			http.Error(w, "bad "+beforeParam, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, strconv.Itoa(r.DrainBefore(t)))
		return
	}
	out := r.Drain()
	w.Header().Set("Content-Type", "application/x-gob")
	if err := gob.NewEncoder(w).Encode(out); err != nil {
		// Headers are gone; the client sees a truncated body.
		return
	}
}

// Local is a target served by this process.
type Local struct {
	rec     *Recorder
	servers []*http.Server
	urls    []string
	wg      sync.WaitGroup
}

// Listen starts a target on hosts loopback addresses (127.0.0.1,
// 127.0.0.2, …), each on a free port. More than one host lets a scheduler
// with a per-host concurrency limit use several connections pools.
func Listen(hosts int) (*Local, error) {
	if hosts < 1 || hosts > 250 {
		return nil, fmt.Errorf("target: hosts must be in [1, 250], got %d", hosts)
	}
	l := &Local{rec: &Recorder{}}
	for i := range hosts {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:0", i+1))
		if err != nil {
			_ = l.Close()
			return nil, fmt.Errorf("target: listen: %w", err)
		}
		srv := &http.Server{
			Handler:           l.rec,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       5 * time.Minute,
		}
		l.servers = append(l.servers, srv)
		l.urls = append(l.urls, "http://"+ln.Addr().String())
		l.wg.Go(func() { _ = srv.Serve(ln) })
	}
	return l, nil
}

// URLs implements Target.
func (l *Local) URLs() []string { return l.urls }

// Drain implements Target.
func (l *Local) Drain(context.Context) ([]stats.Arrival, error) { return l.rec.Drain(), nil }

// DrainBefore implements Target.
func (l *Local) DrainBefore(_ context.Context, t int64) (int, error) {
	return l.rec.DrainBefore(t), nil
}

// PID implements Target.
func (l *Local) PID() int { return 0 }

// Close implements Target.
func (l *Local) Close() error {
	var errs []error
	for _, s := range l.servers {
		errs = append(errs, s.Close())
	}
	l.wg.Wait()
	return errors.Join(errs...)
}

// readyPrefix starts the line a child target prints once it listens.
const readyPrefix = "flyball-bench-target "

// Main serves a target until stdin closes (the parent exited or closed it)
// or ctx ends. It prints one line to stdout with the URLs to call.
func Main(ctx context.Context, hosts int, stdin io.Reader, stdout io.Writer) error {
	l, err := Listen(hosts)
	if err != nil {
		return err
	}
	defer l.Close()
	if _, err := fmt.Fprintln(stdout, readyPrefix+strings.Join(l.URLs(), " ")); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		close(done)
	}()
	select {
	case <-ctx.Done():
	case <-done:
	}
	return nil
}

// Process is a target served by a child process.
type Process struct {
	proc   *os.Process
	stdin  io.WriteCloser
	urls   []string
	client *http.Client
	// waited is closed once the child has exited; waitErr is Wait's error.
	waited  chan struct{}
	waitErr error

	closeOnce sync.Once
	closeErr  error
}

// Spawn starts exe with args (which must make it call Main) and waits for
// it to listen.
func Spawn(ctx context.Context, exe string, args ...string) (*Process, error) {
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	proc, err := os.StartProcess(exe, append([]string{exe}, args...), &os.ProcAttr{
		Files: []*os.File{stdinR, stdoutW, os.Stderr},
	})
	_ = stdinR.Close()
	_ = stdoutW.Close()
	if err != nil {
		_ = stdinW.Close()
		_ = stdoutR.Close()
		return nil, fmt.Errorf("target: start %s: %w", exe, err)
	}
	p := &Process{proc: proc, stdin: stdinW, waited: make(chan struct{})}
	go func() {
		_, p.waitErr = proc.Wait()
		close(p.waited)
	}()
	lines := make(chan string, 1)
	go func() {
		defer stdoutR.Close()
		sc := bufio.NewScanner(stdoutR)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, readyPrefix) {
				lines <- strings.TrimPrefix(line, readyPrefix)
			}
		}
	}()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case line := <-lines:
		p.urls = strings.Fields(line)
	case <-p.waited:
		_ = stdinW.Close()
		if p.waitErr != nil {
			return nil, fmt.Errorf("target: child exited before listening: %w", p.waitErr)
		}
		return nil, errors.New("target: child exited before listening")
	case <-timer.C:
		_ = p.Close()
		return nil, errors.New("target: child did not listen within 30s")
	case <-ctx.Done():
		_ = p.Close()
		return nil, ctx.Err()
	}
	p.client = &http.Client{Timeout: 2 * time.Minute}
	return p, nil
}

// URLs implements Target.
func (p *Process) URLs() []string { return p.urls }

// PID implements Target.
func (p *Process) PID() int { return p.proc.Pid }

// Drain implements Target.
func (p *Process) Drain(ctx context.Context) ([]stats.Arrival, error) {
	var out []stats.Arrival
	err := p.drain(ctx, "", func(body io.Reader) error { return gob.NewDecoder(body).Decode(&out) })
	return out, err
}

// DrainBefore implements Target.
func (p *Process) DrainBefore(ctx context.Context, t int64) (int, error) {
	var n int
	err := p.drain(ctx, "?"+beforeParam+"="+strconv.FormatInt(t, 10), func(body io.Reader) error {
		b, err := io.ReadAll(io.LimitReader(body, 64))
		if err == nil {
			n, err = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		return err
	})
	return n, err
}

// drain asks the child's drain endpoint (with query) and reads a 200's
// body with read.
func (p *Process) drain(ctx context.Context, query string, read func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.urls[0]+drainPath+query, http.NoBody)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("target: drain: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("target: drain: HTTP %d", resp.StatusCode)
	}
	if err := read(resp.Body); err != nil {
		return fmt.Errorf("target: drain: decode: %w", err)
	}
	return nil
}

// Close implements Target: it closes the child's stdin, which makes it
// exit, and kills it if it has not exited after 5s.
func (p *Process) Close() error {
	p.closeOnce.Do(func() {
		_ = p.stdin.Close()
		t := time.NewTimer(5 * time.Second)
		defer t.Stop()
		select {
		case <-p.waited:
		case <-t.C:
			_ = p.proc.Kill()
			<-p.waited
			p.closeErr = errors.New("target: child killed after 5s")
		}
	})
	return p.closeErr
}
