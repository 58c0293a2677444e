// Package bufpool reuses byte buffers on a hot path: a buffer is filled,
// handed to a call that copies it or is done with it before returning, and
// then given back.
package bufpool

import "sync"

// Pool hands out empty buffers of at least its first size and keeps those
// given back that are at most its largest: a rare large one is left to the
// collector instead of being held by the pool.
type Pool struct {
	size, largest int
	p             sync.Pool
}

// New returns a pool of buffers that start at size bytes, keeping those
// that grew to at most largest.
func New(size, largest int) *Pool {
	p := &Pool{size: size, largest: largest}
	p.p.New = func() any {
		b := make([]byte, 0, p.size)
		return &b
	}
	return p
}

// Get returns an empty buffer. Fill (*buf)[:0] and give back what it grew
// to with Put.
func (p *Pool) Get() *[]byte {
	buf := p.p.Get().(*[]byte)
	*buf = (*buf)[:0]
	return buf
}

// Put gives buf back holding grown, the slice its owner filled from it:
// nothing may use either afterwards.
func (p *Pool) Put(buf *[]byte, grown []byte) {
	if cap(grown) > p.largest {
		return
	}
	*buf = grown[:0]
	p.p.Put(buf)
}
