package events

import (
	"reflect"
	"testing"
	"time"
)

func compareRun(t *testing.T, data []byte) { compareFast(t, data, TypeRunSucceeded, DecodeRun) }

var runSeeds = []string{
	`{"dispatchId":"t1:1772532900000","taskId":"t1","scheduledAt":"2026-03-03T10:15:00Z","attempt":1,"startedAt":"2026-03-03T10:15:00.0012Z","finishedAt":"2026-03-03T10:15:00.0042Z","duration":"3.0001ms","status":200,"body":"{\"ok\":true}","fingerprint":"sha256:ab","request":{"method":"GET","url":"http://127.0.0.1:8080/x","headers":{"Authorization":"[REDACTED]"}},"source":"baseline-interval","breakerKey":"t1"}`,
	`{"dispatchId":"t1:1","taskId":"t1","scheduledAt":"2026-03-03T10:15:00Z","attempt":3,"error":"dial tcp: refused","errorKind":"transient","final":true,"dispatch":{"dispatchId":"t1:1","taskId":"t1","scheduledAt":"2026-03-03T10:15:00Z","firedAt":"2026-03-03T10:15:00Z"}}`,
	`{"dispatchId":"r:1","taskId":"r","scheduledAt":"9999-12-31T23:30:00-01:00","attempt":1}`,
	`{"dispatchId":"t1:1","taskId":"t1","scheduledAt":"2026-03-03T10:15:00Z","breakerKey":"t1","taskCreatedAt":"2026-03-01T08:00:00.5Z","dispatch":{"dispatchId":"t1:1","taskId":"t1","taskCreatedAt":"2026-03-01T08:00:00.5Z"}}`,
	`{"taskId":"a","taskCreatedAt":null}`,
	`{"dispatchId":"r:1","taskId":"r","scheduledAt":"2026-03-02T11:00:00\u005a","attempt":1,"dispatch":{"dispatchId":"r:1","taskId":"r","firedAt":"2026-03-02T11:00:00\u005A"}}`,
	`{"taskId":"a","taskCreatedAt":1772500000}`,
	`{"dispatchId":"r:1","taskId":"r","scheduledAt":"2026-03-02T10:00:00Z","finishedAt":"0001-01-01T00:30:00+01:00"}`,
	`{"dispatchId":"t1:1","taskId":"t1","scheduledAt":"2026-03-03T10:15:00Z","attempt":1,"error":"503","retryIn":"1.5s","duration":"812µs"}`,
	`{"dispatchId":"t1:1","taskId":"t1","scheduledAt":"2026-03-03T10:15:00Z","reason":"task paused","trail":["a","b"],"bodyTruncated":false}`,
	`{"taskId":"a","dispatch":{"taskId":"é","taskId":"b"}}`,
	`{"taskId":"a","request":{"headers":{"a":"1","a":"2"}}}`,
	`{"taskId":"a","request":{"method":"GET","extra":1}}`,
	`{"taskId":"a","request":null}`,
	`{"taskId":"a","request":{}}`,
	`{"taskId":"a","request":{"headers":{}}}`,
	`{"taskId":"a","request":{"headers":null}}`,
	`{"taskId":"a","request":{"headers":{"a":null}}}`,
	`{"taskId":"a","request":{"headers":{"a\u0062":"1","ab":"2"}}}`,
	`{"taskId":"a","request":{"method":"GET","method":"PUT"}}`,
	`{"taskId":"a","request":{"Method":"GET"}}`,
	`{"taskId":"a","request":{"headers":{"a":"1"},"headers":{"b":"2"}}}`,
	`{"taskId":"a","trail":null}`,
	`{"taskId":null}`,
	`{"attempt":1.0}`,
	`{"attempt":1e2}`,
	`{"attempt":-0}`,
	`{"attempt":99999999999999999999}`,
	`{"status":"200"}`,
	`{"final":1}`,
	`{"duration":"1x"}`,
	`{"duration":"\u0031s"}`,
	`{"body":"caf\u00e9 \ud83d"}`,
	"{\"body\":\"\xff\xfe\"}",
	`{"body":"é"}`,
	`{"taskId":"a","taskId":"b"}`,
	`{"TaskId":"a"}`,
	`{"taskId":"a","extra":1}`,
	`{"scheduledAt":"2026-13-03T10:15:00Z"}`,
	`{"scheduledAt":null}`,
	`{}`,
	`[]`,
	`{"taskId":"a"}x`,
	`{"taskId":"a",}`,
}

func TestDecodeRunMatchesDecodeData(t *testing.T) {
	for _, s := range runSeeds {
		t.Run(s, func(t *testing.T) { compareRun(t, []byte(s)) })
	}
	// What the executor writes takes the fast path.
	now := time.Now().UTC()
	r := Run{
		DispatchID: "t:1", TaskID: "t", ScheduledAt: now.Truncate(time.Second), Attempt: 1,
		StartedAt: now, FinishedAt: now.Add(time.Millisecond), Duration: Duration(time.Millisecond + 7),
		Status: 200, Body: `{"n":1}`, Fingerprint: "f",
		Request: &RequestRecord{Method: "GET", URL: "http://h/x", Headers: map[string]string{"Authorization": "[REDACTED]"}},
		Source:  "baseline-interval", BreakerKey: "t",
		Dispatch: &Dispatch{DispatchID: "t:1", TaskID: "t", ScheduledAt: now, FiredAt: now},
		RetryIn:  Duration(time.Second), Final: true, Error: "x", ErrorKind: ErrorTransient,
	}
	body, err := Marshal(TypeRunSucceeded, "flyball/executor/x", "t", r, now, "t:1:1:succeeded")
	if err != nil {
		t.Fatal(err)
	}
	e, err := Decode(nil, body)
	if err != nil {
		t.Fatal(err)
	}
	var got Run
	if !fastRun(e.Data(), &got) || !reflect.DeepEqual(got, r) {
		t.Fatalf("the executor's run did not take the fast path:\n got %#v\nwant %#v", got, r)
	}
}

func FuzzDecodeRunMatchesDecodeData(f *testing.F) {
	for _, s := range runSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { compareRun(t, data) })
}

func BenchmarkDecodeRunData(b *testing.B) {
	benchFast(b, dataEvent(b, TypeRunSucceeded, []byte(runSeeds[0])), DecodeRun)
}
