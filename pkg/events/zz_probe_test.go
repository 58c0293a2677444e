package events

import (
	"fmt"
	"strings"
	"testing"
)

func TestZZProbe(t *testing.T) {
	spec := `{"id":"x","target":{"http":{"url":"https://e.com"}},"schedule":{"interval":"30s"}}`
	env := func(extra string) string {
		return `{"specversion":"1.0","type":"io.flyball.task.created","source":"cli/alice","id":"c1","subject":"x"` + extra + `}`
	}
	cases := []string{
		env(`,"datacontenttype":"application/json","data":` + spec),
		env(`,"data":` + spec),
		env(`,"data":` + fmt.Sprintf("%q", spec)),
		env(`,"datacontenttype":"application/json","data":` + fmt.Sprintf("%q", spec)),
		env(`,"datacontenttype":"Application/JSON","data":` + fmt.Sprintf("%q", spec)),
		env(`,"datacontenttype":"Application/JSON","data":` + spec),
		env(`,"datacontenttype":"text/plain","data":` + spec),
		env(`,"datacontenttype":"text/json","data":` + spec),
		env(`,"datacontenttype":"application/json; charset=utf-8","data":` + spec),
		env(`,"datacontenttype":"application/cloudevents+json","data":` + spec),
		env(`,"data_base64":"eyJpZCI6IngifQ=="`),
		env(`,"datacontenttype":"application/json","data_base64":"eyJpZCI6IngifQ=="`),
		env(`,"data":null`),
		env(`,"data":` + spec + `,"data":{"id":"y"}`),
		env(`,"id":"c2","data":` + spec),
		`{"specversion":"1.0","type":"io.flyball.task.created","source":"cli/alice","data":` + spec + `}`,
		`{"specversion":"1.0","type":"io.flyball.task.created","id":"c","data":` + spec + `}`,
		`{"specversion":"1.0","type":"io.flyball.task.created","id":"c","source":"","data":` + spec + `}`,
		`{"specversion":"1.0","type":"io.flyball.task.created","id":"","source":"s","data":` + spec + `}`,
		`{"specversion":"1.0","type":"io.flyball.task.created","id":" ","source":"s","data":` + spec + `}`,
		env(`,"ext":"v","data":` + spec),
		env(`,"traceparent":"00-abc","data":` + spec),
		env(`,"Data":` + spec),
		env(`,"time":"nope","data":` + spec),
		env(`,"time":"2026-03-02T09:00:00+01:00","data":` + spec),
		env(`,"data":{"id":"x","target":{"http":{"url":"https://e.com"}},"schedule":{"interval":60000}}`),
		env(`,"data":{"id":"x","target":{"http":{"url":"https://e.com"}},"schedule":{"interval":"1m"},"retry":{"maxAttempts":"3"}}`),
		env(`,"data":{"id":"x","target":{"http":{"url":"https://e.com"}},"schedule":{"interval":"1m"},"jitter":"0.1"}`),
		env(`,"data":{"id":"x","target":{"http":{"url":"https://e.com"}},"schedule":{"interval":"1m"},"extra":1}`),
		env(`,"data":{"id":"x","target":{"http":{"url":"https://e.com"}},"schedule":{"interval":"1m","interval":"2m"}}`),
		env(`,"data":{"id":"x","target":{"http":{"url":"https://e.com"}},"schedule":{"interval":"1m"},"job":"\xff\xfe"}`),
		env(`,"data":{"id":"x","target":{"http":{"url":"https://e.com"}},"schedule":{"interval":"1m"},"labels":{"a":"\xff"}}`),
		env(`,"data":{"id":"x","target":{"http":{"url":"https://e.com","body":"\xff"}},"schedule":{"interval":"1m"}}`),
		"{\"specversion\":\"1.0\",\"type\":\"io.flyball.task.created\",\"source\":\"cli/\xff\",\"id\":\"c\xff\",\"subject\":\"x\",\"data\":" + spec + "}",
		"{\"specversion\":\"1.0\",\"type\":\"io.flyball.task.created\",\"source\":\"cli/a\",\"id\":\"c1\",\"subject\":\"x\xff\",\"data\":" + spec + "}",
		`{"specversion":"1.0","specversion":"1.0","type":"io.flyball.task.created","source":"cli/alice","id":"c1","data":` + spec + `}`,
		`{"specversion":"1.0","type":"io.flyball.task.created","type":"io.flyball.task.deleted","source":"cli/alice","id":"c1","data":` + spec + `}`,
		`{"type":"io.flyball.task.created","type":"io.flyball.task.deleted","specversion":"1.0","source":"cli/alice","id":"c1","data":` + spec + `}`,
		`{"specversion":"1.0","type":"io.flyball.task.created","source":"cli/alice","id":"c1","subject":"x","subject":"y","data":` + spec + `}`,
		`{"subject":"y","specversion":"1.0","type":"io.flyball.task.created","source":"cli/alice","id":"c1","subject":"x","data":` + spec + `}`,
		`{"data":{"id":"y"},"specversion":"1.0","type":"io.flyball.task.created","source":"cli/alice","id":"c1","data":` + spec + `}`,
		env(`,"data":` + strings.Repeat("[", 600) + strings.Repeat("]", 600)),
		env(`,"data":` + strings.Repeat(`{"a":`, 20000) + "1" + strings.Repeat("}", 20000)),
		`{"specversion":"1.0","type":"io.flyball.task.created","source":"cli/alice","id":1,"data":` + spec + `}`,
		`{"specversion":"1.0","type":"io.flyball.task.created","source":"cli/alice","id":"a","dataschema":"::","data":` + spec + `}`,
		`{"specversion":"1.0","type":"io.flyball.task.created","source":"cli/alice","id":"a","SpecVersion":"1.0","data":` + spec + `}`,
		`{"SPECVERSION":"1.0","type":"io.flyball.task.created","source":"cli/alice","id":"a","data":` + spec + `}`,
	}
	for i, c := range cases {
		e, err := Decode(nil, []byte(c))
		re, rerr := refDecode(nil, []byte(c))
		same := fmt.Sprint(err) == fmt.Sprint(rerr)
		var specErr error
		var d string
		if err == nil {
			_, specErr = DecodeTaskSpec(e)
			d = eventDiff(e, re)
		}
		t.Logf("%d: err=%v ref=%v same=%v diff=%q specErr=%v", i, err, rerr, same, d, specErr)
	}
}
