package timer

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/flyballhq/flyball/pkg/events"
	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/jsutil"
)

// TestRunDueEncoderMatchesMarshal checks that the direct encoding is byte
// for byte what events.Marshal renders, for plain values (the direct path)
// and for every kind of value that must take the general path.
func TestRunDueEncoderMatchesMarshal(t *testing.T) {
	ids := []string{"a", "task-1", "Burst_00042", "x.y", "a/b", "with space", `q"uote`, "<tag>", "amp&", "ünï", "tab\t", "\xff"}
	sources := append([]string{"", "custom", "<b>", `"`, "é"}, func() (s []string) {
		for _, src := range gov.AllSources() {
			s = append(s, string(src))
		}
		return s
	}()...)
	instances := []string{"timer", "host-1234", "a b", "ünï", "x<y>&z", "%41", "tab\t", "a:b"}
	r := rand.New(rand.NewPCG(1, 2))
	randomUTC := func() time.Time {
		switch r.IntN(6) {
		case 0:
			return time.Date(r.IntN(10000), time.Month(1+r.IntN(12)), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(1e9), time.UTC)
		case 1:
			years := []int{-1, 0, 9999, 10000, 12000}
			return time.Date(years[r.IntN(len(years))], 6, 1, 0, 0, 0, r.IntN(2)*5e8, time.UTC)
		case 2:
			return time.Unix(0, r.Int64N(1<<62)).UTC().Truncate(time.Millisecond)
		default:
			return time.Unix(0, r.Int64N(1<<62)).UTC()
		}
	}
	fast := 0
	for _, inst := range instances {
		enc := newRunDueEncoder(jsutil.Source("timer", inst))
		for range 3000 {
			id, source := ids[r.IntN(len(ids))], sources[r.IntN(len(sources))]
			scheduledAt, firedAt := randomUTC(), randomUTC()
			var created time.Time // none: a schedule written before createdAt was copied
			if r.IntN(3) > 0 {
				created = randomUTC()
			}
			got, gotErr := enc.encode(id, scheduledAt, firedAt, source, created)
			want, wantErr := marshalRunDue(enc.raw, id, scheduledAt, firedAt, source, created)
			if (gotErr != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
				t.Fatalf("instance %q, encode(%q, %v, %v, %q, %v):\n got %s (%v)\nwant %s (%v)", inst, id, scheduledAt, firedAt, source, created, got, gotErr, want, wantErr)
			}
			if enc.fast && id != "" && plain(id) && plain(source) && jsonYear(scheduledAt) && jsonYear(firedAt) && jsonYear(created) {
				fast++
			}
		}
	}
	if fast == 0 {
		t.Fatal("no input took the direct path")
	}
	if enc := newRunDueEncoder(jsutil.Source("timer", "host-1234")); !enc.fast {
		t.Fatal("the direct path is off for an ordinary instance name: events.Marshal's rendering changed?")
	}
}

// TestRunDueEncoderDecodes checks the event as a consumer reads it.
func TestRunDueEncoderDecodes(t *testing.T) {
	enc := newRunDueEncoder("flyball/timer/t1")
	at := time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)
	fired := at.Add(1234567 * time.Nanosecond)
	created := at.Add(-time.Hour - time.Nanosecond)
	body, err := enc.encode("task-1", at, fired, "baseline-interval", created)
	if err != nil {
		t.Fatal(err)
	}
	e, err := events.Decode(map[string][]string{"Content-Type": {events.ContentTypeStructured}}, body)
	if err != nil {
		t.Fatal(err)
	}
	var d events.Dispatch
	if err := events.DecodeData(e, &d); err != nil {
		t.Fatal(err)
	}
	want := events.Dispatch{DispatchID: "task-1:1795330800000", TaskID: "task-1", ScheduledAt: at, FiredAt: fired, Source: "baseline-interval", TaskCreatedAt: created}
	if d != want {
		t.Fatalf("data %+v, want %+v", d, want)
	}
	if e.Type() != events.TypeRunDue || e.ID() != want.DispatchID || e.Subject() != "task-1" || e.Source() != "flyball/timer/t1" || !e.Time().Equal(fired) {
		t.Fatalf("attributes: type %q id %q subject %q source %q time %v", e.Type(), e.ID(), e.Subject(), e.Source(), e.Time())
	}
}

func BenchmarkRunDueEncoder(b *testing.B) {
	enc := newRunDueEncoder("flyball/timer/host-1234")
	now := time.Now().UTC()
	at := now.Truncate(time.Second)
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := enc.encode("burst-00001", at, now, "baseline-interval", at.Add(-time.Hour)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("events.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := marshalRunDue(enc.raw, "burst-00001", at, now, "baseline-interval", at.Add(-time.Hour)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
