package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpumesh/gpumesh/internal/sdnotify/sdnotifytest"
	"github.com/gpumesh/gpumesh/node"
)

// TestNodeNotifiesSystemd runs `gpumesh node` as a Type=notify unit
// would, with a real unixgram socket as NOTIFY_SOCKET and a 2 s
// watchdog: it sends READY=1 with its status once its API answers, then
// WATCHDOG=1 pings, and STOPPING=1 when told to stop.
func TestNodeNotifiesSystemd(t *testing.T) {
	sock, next := sdnotifytest.Listen(t)
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "2000000")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		var out bytes.Buffer
		done <- run(ctx, []string{"node", "--data", t.TempDir(), "--gpus", "sim:t4:2", "--listen", "/ip4/127.0.0.1/tcp/0",
			"--api", "127.0.0.1:0", "--mdns=false"}, &out, &stderr)
	}()
	ready := next()
	if !regexp.MustCompile(`^READY=1\nSTATUS=\d+ peers, reach \S+, 2 of 2 GPUs free$`).MatchString(ready) {
		t.Fatalf("first notification %q: want READY=1 and the status", ready)
	}
	if got := next(); !strings.Contains(got, "WATCHDOG=1") || !strings.Contains(got, "STATUS=") {
		t.Fatalf("second notification %q: want STATUS and WATCHDOG=1", got)
	}
	cancel()
	if got := next(); got != "STOPPING=1" {
		t.Fatalf("on stop: %q, want STOPPING=1", got)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("node exited %d: %s", code, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("node did not stop")
	}
}

// TestJournalStream: journal lines only when $JOURNAL_STREAM names the
// very file stderr is, as systemd sets it for a service.
func TestJournalStream(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	env := fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	other := fmt.Sprintf("%d:%d", st.Dev, st.Ino+1)
	for _, c := range []struct {
		env    string
		stderr io.Writer
		want   bool
	}{
		{env, f, true}, {other, f, false}, {"", f, false}, {"junk", f, false}, {env, &bytes.Buffer{}, false},
	} {
		if got := journalStream(c.env, c.stderr); got != c.want {
			t.Errorf("journalStream(%q, %T) = %v, want %v", c.env, c.stderr, got, c.want)
		}
	}
	// And the CLI's logger then writes journal lines.
	a := &app{stderr: f, journal: journalStream(env, f)}
	cfg, err := node.LoadConfig(node.Input{DataFlag: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	a.logger(cfg).Warn("w")
	b, _ := os.ReadFile(f.Name())
	if !regexp.MustCompile(`^<4>level=WARN msg=w\n$`).Match(b) {
		t.Fatalf("logged %q, want a journal line", b)
	}
}

func TestJournalHandler(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(newJournalHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug})).With("peer", "p1").WithGroup("g")
	log.Debug("d", "k", 1)
	log.Info("i")
	log.Warn("w")
	log.Error("e", "err", "boom")
	want := "<7>level=DEBUG msg=d peer=p1 g.k=1\n<6>level=INFO msg=i peer=p1\n<4>level=WARN msg=w peer=p1\n<3>level=ERROR msg=e peer=p1 g.err=boom\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// TestNodeConfigErrorExits78: a configuration `gpumesh node` cannot run
// with is EX_CONFIG, which the unit does not restart on; other commands
// keep the usage status 2 for it.
func TestNodeConfigErrorExits78(t *testing.T) {
	data := t.TempDir()
	code, _, stderr := gm(t, "node", "--data", data, "--region", "eu west")
	if code != 78 || !strings.Contains(stderr, "not a region label") {
		t.Fatalf("node: exit %d, stderr %q; want 78 and the reason", code, stderr)
	}
	if code, _, _ := gm(t, "config", "show", "--data", data, "--region", "eu west"); code != 2 {
		t.Fatalf("config show: exit %d, want 2", code)
	}
	// Job limits are checked against the host's memory when loaded.
	code, _, stderr = gm(t, "node", "--data", data, "--gpus", "none", "--listen", "/ip4/127.0.0.1/tcp/0", "--api", "off",
		"--job-memory", "1000TiB")
	if code != 78 || !strings.Contains(stderr, "default memory_bytes 1099511627776000 is above the maximum") {
		t.Fatalf("node with job_memory above the host's: exit %d, stderr %q; want 78 and the reason", code, stderr)
	}
}
