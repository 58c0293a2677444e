package target_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/flyballhq/flyball/loadtest/target"
)

const childArg = "flyball-bench-target-child"

func TestMain(m *testing.M) {
	if slices.Contains(os.Args[1:], childArg) {
		if err := target.Main(context.Background(), 2, os.Stdin, os.Stdout); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func call(t *testing.T, url, task, scheduled, key string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/t/"+task, http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(target.HeaderTask, task)
	if scheduled != "" {
		req.Header.Set(target.HeaderScheduledAt, scheduled)
	}
	req.Header.Set(target.HeaderKey, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP %d", resp.StatusCode)
	}
}

func exercise(t *testing.T, tg target.Target) {
	t.Helper()
	if n := len(tg.URLs()); n != 2 {
		t.Fatalf("URLs = %v, want 2", tg.URLs())
	}
	sched := time.Date(2030, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	before := time.Now().UnixNano()
	call(t, tg.URLs()[0], "a", sched.Format(time.RFC3339Nano), "a:1")
	call(t, tg.URLs()[1], "b", "not a time", "b:2")
	after := time.Now().UnixNano()

	got, err := tg.Drain(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("drained %d arrivals, want 2: %+v", len(got), got)
	}
	if got[0].Task != "a" || got[0].Key != "a:1" || got[0].Scheduled != sched.UnixNano() {
		t.Errorf("first arrival = %+v", got[0])
	}
	if got[1].Task != "b" || got[1].Scheduled != 0 {
		t.Errorf("second arrival = %+v: an unparseable schedule must read as 0", got[1])
	}
	for _, a := range got {
		if a.At < before || a.At > after {
			t.Errorf("arrival time %d outside [%d, %d]", a.At, before, after)
		}
	}
	again, err := tg.Drain(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 0 {
		t.Errorf("second drain returned %d arrivals, want 0", len(again))
	}
}

func TestLocal(t *testing.T) {
	t.Parallel()
	l, err := target.Listen(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if l.PID() != 0 {
		t.Errorf("PID = %d, want 0 for an in-process target", l.PID())
	}
	exercise(t, l)
}

func TestProcess(t *testing.T) {
	t.Parallel()
	p, err := target.Spawn(t.Context(), os.Args[0], childArg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	if p.PID() <= 0 || p.PID() == os.Getpid() {
		t.Errorf("PID = %d, want a child's", p.PID())
	}
	exercise(t, p)
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// warmDrain asks tg's drain endpoint to forget the arrivals before from
// (the measurement window's start) and keep the rest.
func warmDrain(t *testing.T, tg target.Target, from int64) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet,
		tg.URLs()[0]+"/_bench/drain?before="+strconv.FormatInt(from, 10), http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// TestWarmupDrainKeepsTheWindowsArrivals: the warm-up drain at the
// window's start forgets only the calls that arrived before it; a call
// that arrived at or after the window's start, before the target answered,
// stays for the window's count.
func TestWarmupDrainKeepsTheWindowsArrivals(t *testing.T) {
	t.Parallel()
	l, err := target.Listen(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	p, err := target.Spawn(t.Context(), os.Args[0], childArg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	for _, tg := range []target.Target{l, p} {
		// Through the endpoint, then through DrainBefore.
		for _, viaMethod := range []bool{false, true} {
			call(t, tg.URLs()[0], "warm", "", "warm:1")
			call(t, tg.URLs()[0], "warm", "", "warm:2")
			from := time.Now().UnixNano()
			call(t, tg.URLs()[0], "late", "", "late:1")

			var forgot string
			if viaMethod {
				n, err := tg.DrainBefore(t.Context(), from)
				if err != nil {
					t.Fatal(err)
				}
				forgot = strconv.Itoa(n)
			} else {
				forgot = warmDrain(t, tg, from)
			}
			got, err := tg.Drain(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0].Task != "late" || got[0].At < from {
				t.Fatalf("after the warm-up drain at the window's start, Drain returned %d arrivals %+v, want the 1 that arrived at or after it", len(got), got)
			}
			if forgot != "2" {
				t.Errorf("warm-up drain answered %q, want the count of arrivals before the window, 2", forgot)
			}
		}
	}
}
