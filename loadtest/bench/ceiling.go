package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/flyballhq/flyball/loadtest/procstat"
)

// ceiling measures raw JetStream async-publish throughput: RawMsgs messages
// of RawSize bytes into a scratch file-store stream, PublishAsync, then
// wait for every ack. It runs on a fresh embedded server with the stack's
// options, or on the external server.
func (r *runner) ceiling(ctx context.Context) *Ceiling {
	c := &Ceiling{Msgs: r.cfg.RawMsgs, Size: r.cfg.RawSize}
	if err := r.measureCeiling(ctx, c); err != nil {
		c.Error = err.Error()
	}
	return c
}

func (r *runner) measureCeiling(ctx context.Context, c *Ceiling) error {
	env, err := r.startNATS(ctx)
	if err != nil {
		return err
	}
	defer env.close()
	r.res.Machine.NATSServer = env.serverVersion()
	name, subject := "BENCHRAW", "benchraw.x"
	if r.cfg.Stack == StackExternal {
		name, subject = name+"_"+r.tag, "benchraw"+r.tag+".x"
	}
	if _, err := env.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage,
		PersistMode: r.persistMode(),
	}); err != nil {
		return err
	}
	defer func() { _ = env.js.DeleteStream(context.WithoutCancel(ctx), name) }()
	payload := make([]byte, c.Size)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	pids := append([]int{procstat.Self}, env.pids(r.cfg.StackPIDs)...)
	before, berr := procstat.Take(pids...)
	start := time.Now()
	for range c.Msgs {
		if _, err := env.js.PublishAsync(subject, payload, jetstream.WithStallWait(time.Minute)); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	if err := env.waitPublished(ctx); err != nil {
		return err
	}
	elapsed := time.Since(start)
	after, aerr := procstat.Take(pids...)
	if c.Uncharged = errText(berr, aerr); c.Uncharged == "" {
		for _, d := range after.Since(before) {
			c.CPUSeconds += d.Seconds()
		}
	}
	c.Seconds = elapsed.Seconds()
	c.MsgsPerSec = float64(c.Msgs) / elapsed.Seconds()
	return nil
}
