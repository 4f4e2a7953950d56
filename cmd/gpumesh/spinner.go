package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/mattn/go-isatty"
)

// spinner shows "⠋ what (3s)" on stderr while a wait is under way, once it
// has lasted a second, and only when stderr is a terminal: scripts and
// --json output never see it.
type spinner struct {
	w    io.Writer
	what string
	stop chan struct{}
	done sync.WaitGroup
}

func (a *app) spin(what string) *spinner {
	s := &spinner{w: a.stderr, what: what, stop: make(chan struct{})}
	f, ok := a.stderr.(*os.File)
	if !ok || !isatty.IsTerminal(f.Fd()) {
		return s
	}
	s.done.Add(1)
	go s.run()
	return s
}

func (s *spinner) run() {
	defer s.done.Done()
	frames := []rune("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")
	start := time.Now()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	shown := false
	for i := 0; ; i++ {
		select {
		case <-s.stop:
			if shown {
				fmt.Fprint(s.w, "\r\033[K")
			}
			return
		case <-t.C:
			if el := time.Since(start); el >= time.Second {
				fmt.Fprintf(s.w, "\r%c %s (%s)", frames[i%len(frames)], s.what, el.Truncate(time.Second))
				shown = true
			}
		}
	}
}

// Stop clears the spinner. Safe to call once.
func (s *spinner) Stop() {
	close(s.stop)
	s.done.Wait()
}
