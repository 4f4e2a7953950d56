package tunnel

import (
	"io"
	"sync"
)

// HalfConn is a connection whose write half closes on its own: a
// *net.TCPConn or a network.Stream.
type HalfConn interface {
	io.ReadWriteCloser
	CloseWrite() error
}

// aborter is a connection that can end with an error to the other side
// (network.Stream's Reset) rather than a clean close.
type aborter interface{ Reset() error }

// copyBuf is the buffer of one direction of a pipe: four whole yamux
// frames (a frame is at most 64 KiB with its 12-byte header). A read that
// fills it goes out as four full frames; a 256 KiB buffer went out as four
// and a 48-byte fifth, which cost its own TLS record, its own read on the
// far side and, at the supplier, its own write to the job: a fifth more
// writes than the bytes need.
const copyBuf = 4 * (yamuxFrame - yamuxHeader)

// yamuxFrame and yamuxHeader are the largest frame yamux sends (its
// default MaxMessageSize, which libp2p keeps) and its header.
const (
	yamuxFrame  = 64 << 10
	yamuxHeader = 12
)

var bufPool = sync.Pool{New: func() any { b := make([]byte, copyBuf); return &b }}

// Counts are the bytes a pipe carried each way.
type Counts struct {
	AToB, BToA int64
}

// Join pipes a and b both ways until both directions have ended or done
// closes, then closes both. A direction that reaches EOF closes the other
// side's write half, and the other direction goes on (half-close); one
// that fails aborts both. Back-pressure is the connections' own: a
// direction reads only as fast as it writes.
func Join(a, b HalfConn, done <-chan struct{}) Counts {
	var (
		c     Counts
		once  sync.Once
		wg    sync.WaitGroup
		abort = func() {
			once.Do(func() {
				for _, x := range []HalfConn{a, b} {
					if r, ok := x.(aborter); ok {
						_ = r.Reset()
					} else {
						_ = x.Close()
					}
				}
			})
		}
	)
	copyHalf := func(dst, src HalfConn, n *int64) {
		defer wg.Done()
		buf := bufPool.Get().(*[]byte)
		defer bufPool.Put(buf)
		// Plain Reader and Writer, so that io.CopyBuffer uses buf rather
		// than a socket's own 32 KiB copy: fewer, larger stream frames.
		var err error
		*n, err = io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *buf)
		if err != nil {
			abort()
			return
		}
		_ = dst.CloseWrite()
	}
	wg.Add(2)
	go copyHalf(b, a, &c.AToB)
	go copyHalf(a, b, &c.BToA)
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		close(finished)
	}()
	select {
	case <-finished:
	case <-done:
		abort()
		<-finished
	}
	_ = a.Close()
	_ = b.Close()
	return c
}
