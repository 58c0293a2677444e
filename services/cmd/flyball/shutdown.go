package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// drainTimeout bounds how long dev and serve wait for their NATS
// connection to drain at a stop.
const drainTimeout = 5 * time.Second

// untilSignalled waits until ctx, a signal.NotifyContext's, ends, and
// then stops catching the signals (stop): a second Ctrl-C or SIGTERM
// while the process stops gets the default action and ends it at once.
// Caught until return, it was swallowed, and only kill -9 ended a stop
// that took long (calls in flight) or hung.
func untilSignalled(ctx context.Context, stop context.CancelFunc, log *slog.Logger) {
	<-ctx.Done()
	stop()
	log.Info("stopping; a second Ctrl-C or SIGTERM exits at once, without a clean stop")
}

// drainAndClose drains nc and waits, at most timeout, for the drain to
// close it: nc.Drain only starts it, and the connection (and dev's
// embedded server) closed right after cut off the messages handlers
// still held and the publishes not yet flushed. A drain not done by then
// is cut off by Close.
func drainAndClose(nc *nats.Conn, timeout time.Duration, log *slog.Logger) {
	if err := nc.Drain(); err != nil {
		log.Warn("drain", "err", err)
		nc.Close()
		return
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for !nc.IsClosed() {
		select {
		case <-deadline.C:
			log.Warn("the NATS connection did not drain in time; closing it", "timeout", timeout)
			nc.Close()
			return
		case <-poll.C:
		}
	}
}
