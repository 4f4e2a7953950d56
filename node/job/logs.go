package job

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// logFile is an attempt's output: an append-only file with a size cap,
// readable from any offset while it grows, with a signal for followers.
type logFile struct {
	mu      sync.Mutex
	f       *os.File
	size    int64
	dropped int64
	changed chan struct{} // closed and replaced on every write
	closed  bool
}

func openLog(path string) (*logFile, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open log: %w", err)
	}
	return &logFile{f: f, size: fi.Size(), changed: make(chan struct{})}, nil
}

// Write appends p, dropping what passes MaxLogSize (counted, noted once).
func (l *logFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return len(p), nil
	}
	keep := p
	if room := MaxLogSize - l.size; int64(len(p)) > room {
		if room < 0 {
			room = 0
		}
		keep = p[:room]
		if l.dropped == 0 {
			keep = append(append([]byte(nil), keep...), fmt.Sprintf("\n[gpumesh: log limit of %d bytes reached; further output dropped]\n", MaxLogSize)...)
		}
		l.dropped += int64(len(p)) - room
	}
	if len(keep) > 0 {
		n, err := l.f.Write(keep)
		l.size += int64(n)
		if err != nil {
			return len(p), err
		}
		close(l.changed)
		l.changed = make(chan struct{})
	}
	return len(p), nil
}

// ReadAt reads up to max bytes from off, and the channel that closes on
// the next write.
func (l *logFile) ReadAt(off int64, max int) ([]byte, <-chan struct{}, error) {
	l.mu.Lock()
	size, ch := l.size, l.changed
	l.mu.Unlock()
	if off >= size {
		return nil, ch, nil
	}
	n := min(int64(max), size-off)
	b := make([]byte, n)
	if _, err := l.f.ReadAt(b, off); err != nil && err != io.EOF {
		return nil, ch, err
	}
	return b, ch, nil
}

// Size is how many bytes the log holds.
func (l *logFile) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size
}

// Close closes the file and wakes followers for the last time.
func (l *logFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	close(l.changed)
	l.changed = make(chan struct{})
	return l.f.Close()
}
