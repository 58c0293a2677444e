package executor

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// readers wraps a body the ways a connection delivers it: whole, a byte at
// a time, half of each read, with an error after the data.
func readers(body []byte) map[string]io.Reader {
	return map[string]io.Reader{
		"whole":      bytes.NewReader(body),
		"one byte":   iotest.OneByteReader(bytes.NewReader(body)),
		"half":       iotest.HalfReader(bytes.NewReader(body)),
		"data + EOF": iotest.DataErrReader(bytes.NewReader(body)),
		"then error": io.MultiReader(bytes.NewReader(body), iotest.ErrReader(errBroken)),
	}
}

var errBroken = errors.New("connection reset")

// checkReadBody compares readBody, from an empty and from a reused buffer,
// with io.ReadAll of an io.LimitReader, which it replaces.
func checkReadBody(t *testing.T, body []byte, n int64, spare []byte) {
	t.Helper()
	for name := range readers(body) {
		want, wantErr := io.ReadAll(io.LimitReader(readers(body)[name], n))
		for _, start := range [][]byte{nil, spare[:0]} {
			got, err := readBody(readers(body)[name], start, n)
			if !bytes.Equal(got, want) || !errors.Is(err, wantErr) && (err != nil || wantErr != nil) {
				t.Fatalf("%s, %d bytes, limit %d, buffer cap %d: got %d bytes, %v; io.ReadAll got %d bytes, %v",
					name, len(body), n, cap(start), len(got), err, len(want), wantErr)
			}
		}
	}
}

// TestReadBodyMatchesReadAll: the pooled read keeps what io.ReadAll of the
// limited body kept, across the buffer's boundaries and the limit's.
func TestReadBodyMatchesReadAll(t *testing.T) {
	spare := make([]byte, 0, 16)
	for _, size := range []int{0, 1, 15, 16, 17, 100, 5000} {
		body := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
		for _, n := range []int64{1, 15, 16, 17, int64(size), int64(size) + 1, 10 << 20} {
			checkReadBody(t, body, n, spare)
		}
	}
}

// FuzzReadBodyMatchesReadAll: the same, for any body, limit and buffer.
func FuzzReadBodyMatchesReadAll(f *testing.F) {
	f.Add([]byte(`{"ok":true}`), int64(5), 4)
	f.Add([]byte{}, int64(1), 0)
	f.Fuzz(func(t *testing.T, body []byte, n int64, spareCap int) {
		if n < 1 || n > 1<<20 || spareCap < 0 || spareCap > 1<<16 {
			return
		}
		checkReadBody(t, body, n, make([]byte, 0, spareCap))
	})
}
