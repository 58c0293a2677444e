package procstat

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		given      string
		user, syst time.Duration
		wantErr    bool
	}{
		{
			name:  "plain command",
			given: "1234 (flyball) S 1 1234 1234 0 -1 4194560 5000 0 0 0 250 75 0 0 20 0 12 0 100 0 0",
			user:  2500 * time.Millisecond, syst: 750 * time.Millisecond,
		},
		{
			name:  "command with spaces and parentheses",
			given: "99 (a (weird) name) R 1 99 99 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 100 0 0",
			user:  70 * time.Millisecond, syst: 30 * time.Millisecond,
		},
		{name: "no parenthesis", given: "1234 flyball S 1", wantErr: true},
		{name: "truncated", given: "1234 (flyball) S 1 2 3", wantErr: true},
		{name: "not a number", given: "1 (x) S 1 1 1 0 -1 0 0 0 0 0 x 3 0 0 20 0 1 0 100 0 0", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u, s, err := parseStat([]byte(tt.given))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if u != tt.user || s != tt.syst {
				t.Errorf("user, system = %v, %v; want %v, %v", u, s, tt.user, tt.syst)
			}
		})
	}
}

func TestParseStatus(t *testing.T) {
	t.Parallel()
	m, err := parseStatus([]byte("Name:\tx\nVmPeak:\t 9000 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\nThreads:\t3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS != 1024<<10 || m.Peak != 2048<<10 {
		t.Errorf("memory = %+v, want RSS 1 MiB, peak 2 MiB", m)
	}
	if _, err := parseStatus([]byte("Name:\tx\nVmRSS:\t 1 kB\n")); err == nil {
		t.Error("status without VmHWM: want an error")
	}
}

func TestSelf(t *testing.T) {
	t.Parallel()
	before, _ := Take(Self)
	// Burn CPU until the counter moves by at least one tick; a loaded
	// machine may take a while to give us that tick.
	deadline := time.Now().Add(20 * time.Second)
	var used time.Duration
	for x := 0; used <= 0 && time.Now().Before(deadline); x++ {
		if x%100_000 == 0 {
			now, _ := Take(Self)
			used = now.Since(before)[Self]
		}
	}
	if used <= 0 {
		t.Errorf("CPU used by a 20s busy loop = %v, want > 0", used)
	}
	m, err := ReadMemory(Self)
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS <= 0 || m.Peak < m.RSS {
		t.Errorf("memory = %+v: want 0 < RSS <= peak", m)
	}
	if err := ResetPeak(Self); err != nil {
		t.Logf("ResetPeak not permitted here: %v", err)
	}
}

// TestTakeReportsAProcessItCannotRead: a PID that cannot be read is left
// out of the sample and named in the error, not dropped silently.
func TestTakeReportsAProcessItCannotRead(t *testing.T) {
	t.Parallel()
	gone := math.MaxInt32 // above any pid_max: never a process
	s, err := Take(Self, gone)
	if _, ok := s.CPU[Self]; !ok {
		t.Errorf("sample %v lacks this process", s.CPU)
	}
	if _, ok := s.CPU[gone]; ok {
		t.Errorf("sample %v has a process that does not exist", s.CPU)
	}
	if err == nil || !strings.Contains(err.Error(), "/proc/"+strconv.Itoa(gone)+"/stat") {
		t.Errorf("Take error = %v, want one naming /proc/%d/stat", err, gone)
	}
	if _, err := Take(Self); err != nil {
		t.Errorf("Take(Self) = %v, want no error", err)
	}
}
