package embedded

import (
	"strings"
	"testing"
)

func TestParseListen(t *testing.T) {
	t.Parallel()
	host, port, err := ParseListen("127.0.0.1:4222")
	if err != nil || host != "127.0.0.1" || port != 4222 {
		t.Fatalf("ParseListen(127.0.0.1:4222) = %q, %d, %v", host, port, err)
	}
	for addr, want := range map[string]string{
		"4222":            `want host:port, got "4222"`,
		"127.0.0.1:http":  `bad port "http"`,
		"127.0.0.1:70000": `bad port "70000"`,
	} {
		if _, _, err := ParseListen(addr); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseListen(%q) = %v, want an error containing %q", addr, err, want)
		}
	}
}
