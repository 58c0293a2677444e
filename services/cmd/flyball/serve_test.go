package main

import (
	"strings"
	"testing"
)

// TestNATSURLCredentialsAreNotShown: the URL list that `flyball serve`
// logs and puts in a connect error keeps its hosts but never a password
// or a token.
func TestNATSURLCredentialsAreNotShown(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                              "nats://127.0.0.1:4222",
		"nats://governor:hunter2@nats-1:4222":                "nats://governor:REDACTED@nats-1:4222",
		"nats://s3cr3t-token@nats-1:4222":                    "nats://REDACTED@nats-1:4222",
		"nats://a:hunter2@n1:4222, nats://a:hunter2@n2:4222": "nats://a:REDACTED@n1:4222,nats://a:REDACTED@n2:4222",
		"tls://n1:4222,nats://n2":                            "tls://n1:4222,nats://n2",
	} {
		if got := redactURLs(in); got != want {
			t.Errorf("redactURLs(%q) = %q, want %q", in, got, want)
		}
	}
	f := natsFlags{url: "nats://governor:hunter2@127.0.0.1:1", name: "test"}
	_, _, err := f.connect()
	if err == nil {
		t.Fatal("connected to port 1")
	}
	if strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("connect error %q: want the host without the password", err)
	}
}
