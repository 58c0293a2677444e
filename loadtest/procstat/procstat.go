// Package procstat reads a Linux process's CPU time and memory from /proc,
// so the benchmark can charge CPU-seconds and peak RSS to the processes that
// did the work.
package procstat

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ClockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat.
// It is 100 on every Linux architecture Go supports; reading the real value
// would need sysconf(3) and therefore cgo.
const ClockTicks = 100

// Self names the calling process.
const Self = 0

func path(pid int, file string) string {
	if pid == Self {
		return "/proc/self/" + file
	}
	return "/proc/" + strconv.Itoa(pid) + "/" + file
}

// CPU returns the user and system CPU time pid has used so far. An error
// names the file it could not read.
func CPU(pid int) (user, system time.Duration, err error) {
	b, err := os.ReadFile(path(pid, "stat"))
	if err != nil {
		return 0, 0, err
	}
	user, system, err = parseStat(b)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path(pid, "stat"), err)
	}
	return user, system, nil
}

// CPUTotal is user + system CPU time.
func CPUTotal(pid int) (time.Duration, error) {
	u, s, err := CPU(pid)
	return u + s, err
}

// parseStat reads utime and stime (fields 14 and 15) from a stat line. The
// command name (field 2) is parenthesised and may contain spaces and
// parentheses, so fields are counted from the last ')'.
func parseStat(b []byte) (user, system time.Duration, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("procstat: malformed stat: no ')'")
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3 (state); utime is field 14, stime field 15.
	if len(fields) < 13 {
		return 0, 0, fmt.Errorf("procstat: malformed stat: %d fields after the command", len(fields))
	}
	ut, err := strconv.ParseUint(fields[11], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("procstat: utime: %w", err)
	}
	st, err := strconv.ParseUint(fields[12], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("procstat: stime: %w", err)
	}
	tick := time.Second / ClockTicks
	return time.Duration(ut) * tick, time.Duration(st) * tick, nil
}

// Memory is a process's resident set size now and at its peak.
type Memory struct {
	// RSS is VmRSS in bytes.
	RSS int64 `json:"rss"`
	// Peak is VmHWM in bytes: the largest RSS since the process started or
	// since the last ResetPeak.
	Peak int64 `json:"peak"`
}

// ReadMemory reads VmRSS and VmHWM from /proc/<pid>/status.
func ReadMemory(pid int) (Memory, error) {
	b, err := os.ReadFile(path(pid, "status"))
	if err != nil {
		return Memory{}, err
	}
	return parseStatus(b)
}

func parseStatus(b []byte) (Memory, error) {
	var m Memory
	var found int
	for line := range strings.Lines(string(b)) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var dst *int64
		switch name {
		case "VmRSS":
			dst = &m.RSS
		case "VmHWM":
			dst = &m.Peak
		default:
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return Memory{}, fmt.Errorf("procstat: malformed %s line %q", name, strings.TrimSpace(line))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("procstat: %s: %w", name, err)
		}
		*dst = kb << 10
		found++
	}
	if found != 2 {
		return Memory{}, errors.New("procstat: VmRSS or VmHWM missing from status")
	}
	return m, nil
}

// ResetPeak resets pid's VmHWM to its current RSS by writing "5" to
// /proc/<pid>/clear_refs (Linux 4.0+). It needs write access to that file,
// which a process always has for itself and for its own children.
func ResetPeak(pid int) error {
	return os.WriteFile(path(pid, "clear_refs"), []byte("5"), 0)
}

// Sample is one reading of a set of processes.
type Sample struct {
	At  time.Time
	CPU map[int]time.Duration
}

// Take reads the CPU time of every pid (Self for this process). A process
// that cannot be read is left out of the sample, and the error names it.
func Take(pids ...int) (Sample, error) {
	s := Sample{At: time.Now(), CPU: make(map[int]time.Duration, len(pids))}
	var errs []error
	for _, p := range pids {
		c, err := CPUTotal(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.CPU[p] = c
	}
	return s, errors.Join(errs...)
}

// Since returns the CPU each pid used between earlier and s.
func (s Sample) Since(earlier Sample) map[int]time.Duration {
	out := make(map[int]time.Duration, len(s.CPU))
	for p, c := range s.CPU {
		if e, ok := earlier.CPU[p]; ok {
			out[p] = c - e
		}
	}
	return out
}
