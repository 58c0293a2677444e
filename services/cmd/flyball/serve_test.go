package main

import (
	"os"
	"os/exec"
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

// TestHelpShowsNoSecretsFromTheEnvironment: flags whose default comes
// from the environment print that default in --help. For --api-token
// (FLYBALL_API_TOKENS) and --nats-url (NATS_URL, which may carry a
// password or a token) that printed the secret itself.
func TestHelpShowsNoSecretsFromTheEnvironment(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"serve", "--help"}, {"dev", "--help"}, {"task", "list", "--help"}} {
		cmd := exec.Command(cliBinary, args...)
		cmd.Env = append(os.Environ(), "FLYBALL_API_TOKENS=s3cr3t-api-token-0123456789", "NATS_URL=nats://cli:hunter2@127.0.0.1:4222")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("flyball %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		for _, secret := range []string{"s3cr3t-api-token", "hunter2"} {
			if i := strings.Index(string(out), secret); i >= 0 {
				line := string(out)[strings.LastIndex(string(out[:i]), "\n")+1:]
				line, _, _ = strings.Cut(line, "\n")
				t.Errorf("flyball %s prints %q from the environment: %s", strings.Join(args, " "), secret, strings.TrimSpace(line))
			}
		}
	}
}
