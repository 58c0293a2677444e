// Package repeatlog keeps a line that can repeat thousands of times a
// second from flooding the log. The first time a message is logged it is
// written at once; for a window after that, the same message is counted
// instead, and the count is written as one line with the same message
// (attributes repeated and window), so a search for the message finds
// both.
//
// The executor's settler uses it: when NATS is overloaded or a consumer
// leader election runs long, every dispatch of a burst can give up its
// ack at once, and each used to log a warning of its own (about 6,000
// lines in two seconds under the benchmark's Stress tier with an fsync
// per write). A counter metric keeps the exact number.
package repeatlog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Log writes repeated messages once per window. It is safe for
// concurrent use.
type Log struct {
	l      *slog.Logger
	window time.Duration

	mu    sync.Mutex
	lines map[string]*line // by message
}

// line is one message's state.
type line struct {
	level slog.Level
	until time.Time // repeats before then are counted, not written
	n     int       // repeats counted and not written yet
}

// New returns a Log writing to l, at most one line per message per
// window (plus one line with the count of the repeats).
func New(l *slog.Logger, window time.Duration) *Log {
	return &Log{l: l, window: window, lines: map[string]*line{}}
}

// Log writes msg with args at level, unless msg was written less than a
// window before now; then it counts it. A count left from an earlier
// window is written first.
func (r *Log) Log(now time.Time, level slog.Level, msg string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	x := r.lines[msg]
	if x == nil {
		x = &line{level: level}
		r.lines[msg] = x
	}
	if now.Before(x.until) {
		x.n++
		return
	}
	r.writeCount(msg, x)
	r.l.Log(context.Background(), level, msg, args...)
	x.until = now.Add(r.window)
}

// Flush writes the count of each message whose window is over at now, or
// of every message with a count when all is set. A caller flushes when
// it goes quiet (no more repeats may come for a while) and when it stops.
func (r *Log) Flush(now time.Time, all bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for msg, x := range r.lines {
		if all || !now.Before(x.until) {
			r.writeCount(msg, x)
		}
		if x.n == 0 && !now.Before(x.until) {
			delete(r.lines, msg) // a message seen once does not stay for ever
		}
	}
}

// writeCount writes x's count, if any, and clears it. The caller holds
// r.mu.
func (r *Log) writeCount(msg string, x *line) {
	if x.n == 0 {
		return
	}
	r.l.Log(context.Background(), x.level, msg, "repeated", x.n, "window", r.window)
	x.n = 0
}
