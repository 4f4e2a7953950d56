package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// journalStream reports whether stderr is the journal stream that
// $JOURNAL_STREAM (env, "DEVICE:INODE") names: systemd sets it for a
// service whose output goes to journald, and a process it starts may
// inherit it with another stderr (a shell's terminal), which must not
// get journal lines (systemd.exec(5)).
func journalStream(env string, stderr io.Writer) bool {
	f, ok := stderr.(*os.File)
	if env == "" || !ok {
		return false
	}
	var dev, ino uint64
	if _, err := fmt.Sscanf(env, "%d:%d", &dev, &ino); err != nil {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return uint64(st.Dev) == dev && st.Ino == ino
}

// journalHandler logs for journald, which reads a service's stderr:
// slog's text format without time= (the journal stamps each line), each
// line prefixed <N> with its syslog priority (sd-daemon(3)), so that
// `journalctl -p warning -u gpumesh` filters by level.
type journalHandler struct {
	inner slog.Handler
	w     *prefixWriter
}

// prefixWriter writes a prefix before each write; a handler writes one
// record per Write.
type prefixWriter struct {
	mu     sync.Mutex
	out    io.Writer
	prefix string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.out, p.prefix); err != nil {
		return 0, err
	}
	return p.out.Write(b)
}

// newJournalHandler logs to w (the service's stderr) at opts' level.
func newJournalHandler(w io.Writer, opts *slog.HandlerOptions) *journalHandler {
	o := *opts
	replace := o.ReplaceAttr
	o.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		if replace != nil {
			return replace(groups, a)
		}
		return a
	}
	pw := &prefixWriter{out: w}
	return &journalHandler{inner: slog.NewTextHandler(pw, &o), w: pw}
}

// priority is the syslog priority of level: err, warning, info, debug.
func priority(level slog.Level) string {
	switch {
	case level >= slog.LevelError:
		return "<3>"
	case level >= slog.LevelWarn:
		return "<4>"
	case level >= slog.LevelInfo:
		return "<6>"
	}
	return "<7>"
}

func (h *journalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *journalHandler) Handle(ctx context.Context, r slog.Record) error {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	h.w.prefix = priority(r.Level)
	return h.inner.Handle(ctx, r)
}

func (h *journalHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &journalHandler{inner: h.inner.WithAttrs(attrs), w: h.w}
}

func (h *journalHandler) WithGroup(name string) slog.Handler {
	return &journalHandler{inner: h.inner.WithGroup(name), w: h.w}
}
