package governor

import (
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flyballhq/flyball/pkg/cron"
	"github.com/flyballhq/flyball/pkg/events"
)

// scheduleKey names a parsed cron expression in a zone.
type scheduleKey struct{ expr, zone string }

type parsedSchedule struct {
	sched *cron.Schedule
	loc   *time.Location
}

// schedules caches parsed cron expressions with their zones. Decide sits on
// a hot path, so reads are one atomic load and one map lookup, with no lock
// and no allocation; a miss parses and publishes a copy of the map with the
// new entry (copy-on-write: distinct schedules are few).
var schedules struct {
	m  atomic.Pointer[map[scheduleKey]parsedSchedule]
	mu sync.Mutex // serialises writers
}

// cacheLimit bounds the cache: past it, new schedules are parsed on every
// use instead of stored (a defence against unbounded distinct inputs).
const cacheLimit = 4096

func cronSchedule(expr, tz string) (*cron.Schedule, *time.Location, error) {
	key := scheduleKey{expr, tz}
	if e, ok := cached(key); ok {
		return e.sched, e.loc, nil
	}
	loc, err := zone(tz)
	if err != nil {
		return nil, nil, err
	}
	s, err := cron.Parse(expr)
	if err != nil {
		return nil, nil, err
	}
	remember(key, parsedSchedule{s, loc})
	return s, loc, nil
}

func cached(key scheduleKey) (parsedSchedule, bool) {
	if m := schedules.m.Load(); m != nil {
		e, ok := (*m)[key]
		return e, ok
	}
	return parsedSchedule{}, false
}

func remember(key scheduleKey, e parsedSchedule) {
	schedules.mu.Lock()
	defer schedules.mu.Unlock()
	old := schedules.m.Load()
	if old != nil && len(*old) >= cacheLimit {
		return
	}
	m := make(map[scheduleKey]parsedSchedule, 1)
	if old != nil {
		m = maps.Clone(*old)
	}
	m[key] = e
	schedules.m.Store(&m)
}

// zone loads an IANA zone; the empty name means UTC. events.LoadLocation
// caches zones itself.
func zone(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	return events.LoadLocation(name)
}

var errClock = errors.New(`quiet hours: times must be "HH:MM"`)

// clockZone marks cache entries of clockSchedule (no IANA zone has this
// name).
const clockZone = "\x00clock"

// clockSchedule is the daily cron schedule of a wall-clock time "HH:MM".
func clockSchedule(hhmm string) (*cron.Schedule, error) {
	key := scheduleKey{hhmm, clockZone}
	if e, ok := cached(key); ok {
		return e.sched, nil
	}
	if len(hhmm) != 5 || hhmm[2] != ':' {
		return nil, errClock
	}
	for _, i := range [...]int{0, 1, 3, 4} {
		if hhmm[i] < '0' || hhmm[i] > '9' {
			return nil, errClock
		}
	}
	s, err := cron.Parse("0 " + hhmm[3:] + " " + hhmm[:2] + " * * *")
	if err != nil {
		return nil, err
	}
	remember(key, parsedSchedule{sched: s})
	return s, nil
}
