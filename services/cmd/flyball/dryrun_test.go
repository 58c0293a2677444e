package main

import (
	"strings"
	"testing"
)

// A dry run said "valid" for a target host the governor and the API
// refuse whatever the SSRF guard allows (a non-canonical numeric form),
// and said nothing of one the default guard refuses (a metadata address).
func TestDryRunChecksTheTargetHost(t *testing.T) {
	t.Parallel()
	e := &cliEnv{url: "nats://127.0.0.1:1", dir: t.TempDir()} // a dry run connects to nothing
	spec := func(name, url string) string {
		return e.file(t, name+".yaml", "id: "+name+"\ntarget:\n  http:\n    url: "+url+"\nschedule:\n  interval: 1m\n")
	}

	// Refused whatever the guard allows: exit 1, named like any other reason.
	for _, host := range []string{"0x7f000001", "2852039166", "10.0.0.1.", "１６７７７２１６１"} {
		f := spec("numeric", "http://"+host+":8000/x")
		r := e.fails(t, []string{"task", "create", "-f", f, "--dry-run"},
			"invalid task spec (1 reason)", "target.http.url:", "non-canonical numeric form")
		if r.stdout != "" {
			t.Fatalf("dry run of %s printed %q on stdout, want nothing", host, r.stdout)
		}
	}

	// Refused by the default guard, which a server may be told to open:
	// valid, with a note on stderr naming the rule and the flags.
	// A host that is not ASCII is judged by the IDNA ASCII form net/http
	// dials (full-width digits and dots, full-width letters).
	for _, url := range []string{
		"http://169.254.169.254/latest", "http://metadata.google.internal/", "http://127.0.0.1:8000/x",
		"http://１６９．２５４．１６９．２５４/latest", "http://ｍｅｔａｄａｔａ.google.internal/",
	} {
		r := e.run(t, "task", "create", "-f", spec("guarded", url), "--dry-run")
		if r.code != 0 || r.stdout != "valid\n" {
			t.Fatalf("dry run of %s: exit %d, stdout %q; want 0 and \"valid\"", url, r.code, r.stdout)
		}
		if !strings.HasPrefix(r.stderr, "note: target.http.url: ") || !strings.Contains(r.stderr, "--allow-") || strings.Count(r.stderr, "\n") != 1 {
			t.Fatalf("dry run of %s: stderr %q, want a one-line note naming the field and the --allow- flags", url, r.stderr)
		}
	}

	// Nothing to say of an ordinary host.
	if r := e.run(t, "task", "create", "-f", spec("plain", "https://api.example.com/health"), "--dry-run"); r.code != 0 || r.stdout != "valid\n" || r.stderr != "" {
		t.Fatalf("dry run of an ordinary host: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestDryRunReadsAFlowMappingAsYAML: a task file written as a YAML flow
// mapping ({id: a, …}) starts like JSON and was refused as `not valid
// JSON: invalid character 'i'`; it is valid. A file that is neither JSON
// nor YAML says why for both, in one line, and exits 1.
func TestDryRunReadsAFlowMappingAsYAML(t *testing.T) {
	t.Parallel()
	e := &cliEnv{url: "nats://127.0.0.1:1", dir: t.TempDir()} // a dry run connects to nothing
	flow := e.file(t, "flow.yaml", "{id: flow, target: {http: {url: \"https://api.example.com/\"}}, schedule: {interval: 30s}}\n")
	if r := e.run(t, "task", "create", "-f", flow, "--dry-run"); r.code != 0 || r.stdout != "valid\n" || r.stderr != "" {
		t.Fatalf("dry run of a flow mapping: exit %d, stdout %q, stderr %q; want 0 and \"valid\"", r.code, r.stdout, r.stderr)
	}
	broken := e.file(t, "broken.json", `{"id": "flow", "schedule": {`)
	r := e.fails(t, []string{"task", "create", "-f", broken, "--dry-run"}, "broken.json: neither JSON (not valid JSON: unexpected end of JSON input) nor YAML (line 1: ")
	if strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("stderr %q, want one line", r.stderr)
	}
}
