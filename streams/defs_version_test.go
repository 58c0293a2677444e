package streams

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
)

// TestDefinitionsVersionBumped fails when a definition file changed
// without defs/version.json's version being bumped: Ensure records the
// version on every stream and consumer, and leaves alone the ones a
// newer version applied (a rolling upgrade's new instances), so two
// different sets of definitions must never share a version.
func TestDefinitionsVersionBumped(t *testing.T) {
	t.Parallel()
	v, err := loadVersion()
	if err != nil {
		t.Fatal(err)
	}
	got, err := defsHash()
	if err != nil {
		t.Fatal(err)
	}
	if got != v.SHA256 {
		t.Fatalf("the definitions changed since version %d: set streams/defs/version.json to {\"version\": %d, \"sha256\": %q}", v.Version, v.Version+1, got)
	}
}

// defsHash is the SHA-256 of every definition file, path and contents,
// in lexical order: defs/version.json holds it with the version, and a
// test fails when a file changes without the version being bumped.
func defsHash() (string, error) {
	h := sha256.New()
	for _, dir := range []string{dirStreams, dirKV, dirConsumers} {
		err := eachJSON(dir, func(file, _ string, data []byte) error {
			fmt.Fprintf(h, "%s\x00%d\x00", file, len(data))
			h.Write(data)
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
