package kvcache_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	gov "github.com/flyballhq/flyball/pkg/governor"
	"github.com/flyballhq/flyball/services/internal/kvcache"
)

// The governor's commands read a stored spec with its createdAt
// (DecodeStoredSpec); the spec cache, the governor's loadSpec and the
// sweeper's repair read the spec alone (DecodeSpec). Both give the same
// normalized spec, and only DecodeStoredSpec reads the createdAt: one
// that does not decode makes the value unreadable there (as it is for
// the executor), and not for DecodeSpec, which never looks at it.
func TestDecodeStoredSpec(t *testing.T) {
	const spec = `"id":"t1","target":{"http":{"url":"http://example.com/"}},"schedule":{"interval":"1m"},"startAt":"2026-11-27T12:00:00+02:00"`
	cases := []struct {
		name            string
		given           string
		wantCreatedAt   time.Time
		wantStoredErr   bool // DecodeStoredSpec: ErrUnreadable
		wantSpecErr     bool // DecodeSpec: ErrUnreadable
		wantErrContains string
	}{
		{
			name:          "createdAt with an offset",
			given:         `{` + spec + `,"createdAt":"2026-11-27T10:00:00.5+02:00"}`,
			wantCreatedAt: time.Date(2026, 11, 27, 8, 0, 0, 5e8, time.UTC),
		},
		{
			name:  "no createdAt (written by hand, or before 2026-11-27)",
			given: `{` + spec + `}`,
		},
		{
			name:            "createdAt that does not decode",
			given:           `{` + spec + `,"createdAt":"yesterday"}`,
			wantStoredErr:   true,
			wantErrContains: "stored spec t1 is unreadable: ",
		},
		{
			name:            "not JSON",
			given:           `{"id":`,
			wantStoredErr:   true,
			wantSpecErr:     true,
			wantErrContains: "stored spec t1 is unreadable: ",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, createdAt, err := kvcache.DecodeStoredSpec("t1", []byte(c.given))
			if c.wantStoredErr {
				if !errors.Is(err, kvcache.ErrUnreadable) || got != nil || !createdAt.IsZero() {
					t.Fatalf("DecodeStoredSpec = %+v, %s, %v; want nil, zero, ErrUnreadable", got, createdAt, err)
				}
				if !strings.Contains(err.Error(), c.wantErrContains) {
					t.Fatalf("error %q does not contain %q", err, c.wantErrContains)
				}
			} else if err != nil || !createdAt.Equal(c.wantCreatedAt) {
				t.Fatalf("DecodeStoredSpec: createdAt %s, err %v; want %s, nil", createdAt, err, c.wantCreatedAt)
			}

			alone, err := kvcache.DecodeSpec("t1", []byte(c.given))
			if c.wantSpecErr {
				if !errors.Is(err, kvcache.ErrUnreadable) || alone != nil {
					t.Fatalf("DecodeSpec = %+v, %v; want nil, ErrUnreadable", alone, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeSpec: %v", err)
			}
			if alone.Retry == nil || alone.Target.HTTP.Method != http.MethodGet || alone.StartAt.Location() != time.UTC {
				t.Fatalf("DecodeSpec did not normalize the spec: %+v", alone)
			}
			if got != nil && !reflect.DeepEqual(got, alone) {
				t.Fatalf("the two decodes differ:\nDecodeStoredSpec %+v\nDecodeSpec       %+v", got, alone)
			}
		})
	}
}

// What the governor stores (gov.StoredSpec, its createdAt in UTC) reads
// back as the same spec and createdAt.
func TestDecodeStoredSpecReadsWhatTheGovernorStores(t *testing.T) {
	spec, err := kvcache.DecodeSpec("t1", []byte(`{"id":"t1","target":{"nats":{"subject":"work.t1"}},"schedule":{"cron":"0 * * * *"}}`))
	if err != nil {
		t.Fatal(err)
	}
	created := gov.CreatedAt(time.Date(2026, 11, 30, 9, 15, 0, 123456789, time.FixedZone("CET", 3600)))
	body, err := json.Marshal(gov.StoredSpec{TaskSpec: spec, CreatedAt: created})
	if err != nil {
		t.Fatal(err)
	}
	got, createdAt, err := kvcache.DecodeStoredSpec("t1", body)
	if err != nil {
		t.Fatal(err)
	}
	if !createdAt.Equal(created) || createdAt.IsZero() {
		t.Fatalf("createdAt %s, want %s", createdAt, created)
	}
	if !reflect.DeepEqual(got, spec) {
		t.Fatalf("spec %+v, want %+v", got, spec)
	}
}
