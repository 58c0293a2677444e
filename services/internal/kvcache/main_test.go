package kvcache

import (
	"os"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	// A re-created bucket is noticed within this, not the 5 s of a service.
	streamCheck = 100 * time.Millisecond
	// A read refused by an ACL times out: three in a row within 3 s.
	streamReadTimeout = time.Second
	os.Exit(m.Run())
}
