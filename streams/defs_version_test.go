package streams

import "testing"

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
