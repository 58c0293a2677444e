package bufpool

import "testing"

// TestPoolHandsOutEmptyBuffersOfTheSize: every buffer starts empty with at
// least the pool's size, whatever was given back before it, and one given
// back over the maximum is never handed out again.
func TestPoolHandsOutEmptyBuffersOfTheSize(t *testing.T) {
	p := New(64, 256)
	for range 100 {
		buf := p.Get()
		if len(*buf) != 0 || cap(*buf) < 64 {
			t.Fatalf("got len %d cap %d, want an empty buffer of at least 64", len(*buf), cap(*buf))
		}
		grown := append(*buf, make([]byte, 1000)...) // over max: dropped
		p.Put(buf, grown)
		buf = p.Get()
		if cap(*buf) > 256 {
			t.Fatalf("a buffer of %d bytes came back, over the maximum 256", cap(*buf))
		}
		p.Put(buf, append(*buf, "kept"...))
	}
}
