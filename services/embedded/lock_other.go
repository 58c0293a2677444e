//go:build !unix

package embedded

// lockStore takes no lock where there is no flock(2) (Windows): there, a
// second server on the same store directory is not refused.
func lockStore(string) (release func(), err error) { return func() {}, nil }
