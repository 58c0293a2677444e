package jsutil

import (
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkShardedWorkers is the governor's path of a message: b.N
// messages on 64 keys, already stored, handled by 16 sharded workers that
// ack them. Most of its allocations are nats.go's; the ones it adds or
// saves are ConsumeWorkers'.
func BenchmarkShardedWorkers(b *testing.B) {
	js := workStream(b, 30*time.Second)
	for i := range b.N {
		if _, err := js.PublishAsync("work.k"+strconv.Itoa(i%64), nil); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 || i == b.N-1 { // within the client's async limit
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("publish acks did not arrive")
			}
		}
	}
	var handled atomic.Int64
	all := make(chan struct{})
	b.ReportAllocs()
	b.ResetTimer()
	cc, err := ConsumeWorkers(b.Context(), js, "W", "w", slog.New(slog.DiscardHandler), Workers{N: 16, Key: lastToken}, func(m jetstream.Msg) {
		_ = m.Ack()
		if handled.Add(1) == int64(b.N) {
			close(all)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	<-all
	b.StopTimer()
	cc.Stop()
	<-cc.Done()
}
