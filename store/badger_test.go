package store_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/store"
)

// testLogger logs Badger's warnings and errors to the test output.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func openBadger(t *testing.T, dir string, opts ...store.BadgerOption) *store.Badger {
	t.Helper()
	opts = append([]store.BadgerOption{store.WithLogger(testLogger(t))}, opts...)
	b, err := store.OpenBadger(dir, opts...)
	if err != nil {
		t.Fatalf("OpenBadger(%s): %v", dir, err)
	}
	return b
}

var ksTest = store.MustKeyspace("test")

func TestBadgerReopenKeepsData(t *testing.T) {
	dir := t.TempDir()
	b := openBadger(t, dir)
	for i := range 100 {
		if err := b.Put(ksTest, fmt.Appendf(nil, "k%03d", i), fmt.Appendf(nil, "v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.PutTTL(ksTest, []byte("ttl"), []byte("v"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ksTest, []byte("k050")); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = openBadger(t, dir)
	defer b.Close()
	for i := range 100 {
		got, err := b.Get(ksTest, fmt.Appendf(nil, "k%03d", i))
		if i == 50 {
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("deleted key k050 after reopen: %q, %v", got, err)
			}
			continue
		}
		if want := fmt.Sprintf("v%d", i); err != nil || string(got) != want {
			t.Errorf("Get(k%03d) after reopen = %q, %v; want %q", i, got, err, want)
		}
	}
	if _, err := b.Get(ksTest, []byte("ttl")); err != nil {
		t.Errorf("TTL key after reopen: %v", err)
	}
	if v, err := store.SchemaVersionOf(b); err != nil || v != strconv.Itoa(store.SchemaVersion) {
		t.Errorf("schema version = %q, %v; want %d", v, err, store.SchemaVersion)
	}
}

func TestBadgerSchemaMismatch(t *testing.T) {
	for _, version := range []string{"2", "0", "garbage"} {
		t.Run(version, func(t *testing.T) {
			dir := t.TempDir()
			b := openBadger(t, dir)
			if err := b.Put(ksTest, []byte("k"), []byte("v")); err != nil {
				t.Fatal(err)
			}
			if err := store.SetSchemaVersion(b, version); err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}

			_, err := store.OpenBadger(dir, store.WithLogger(testLogger(t)))
			if !errors.Is(err, store.ErrSchema) {
				t.Fatalf("OpenBadger with schema %q: %v, want ErrSchema", version, err)
			}
			if !strings.Contains(err.Error(), dir) {
				t.Errorf("error %q does not name the directory", err)
			}

			b = openBadger(t, dir, store.WithoutSchemaCheck())
			defer b.Close()
			if got, err := b.Get(ksTest, []byte("k")); err != nil || string(got) != "v" {
				t.Errorf("data after refused open = %q, %v; want %q", got, err, "v")
			}
			if got, err := store.SchemaVersionOf(b); err != nil || got != version {
				t.Errorf("schema version after refused open = %q, %v; want %q kept", got, err, version)
			}
		})
	}
}

// snapshot returns the SHA-256 of every file under dir, by relative path.
func snapshot(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	files := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		files[rel] = sha256.Sum256(data)
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot %s: %v", dir, err)
	}
	return files
}

func sameFiles(t *testing.T, before, after map[string][32]byte) {
	t.Helper()
	for name, sum := range before {
		got, ok := after[name]
		switch {
		case !ok:
			t.Errorf("%s was deleted", name)
		case got != sum:
			t.Errorf("%s was modified", name)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			t.Errorf("%s was created", name)
		}
	}
}

func wantDamagedError(t *testing.T, err error, dir string) {
	t.Helper()
	if err == nil {
		t.Fatalf("OpenBadger(%s) succeeded, want an error", dir)
	}
	t.Logf("OpenBadger error: %v", err)
	msg := err.Error()
	for _, want := range []string{dir, "not a gpumesh store or is damaged", "move it aside or pass another --data"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
}

func TestBadgerCorruptDir(t *testing.T) {
	dir := t.TempDir()
	b := openBadger(t, dir)
	for i := range 50 {
		if err := b.Put(ksTest, fmt.Appendf(nil, "k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	garbage := []byte("this is not a badger manifest, just some bytes\x00\x01\x02")
	if err := os.WriteFile(filepath.Join(dir, "MANIFEST"), garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)

	_, err := store.OpenBadger(dir, store.WithLogger(testLogger(t)))
	wantDamagedError(t, err, dir)
	sameFiles(t, before, snapshot(t, dir))
}

func TestBadgerNotAStoreDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("my notes"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	_, err := store.OpenBadger(dir, store.WithLogger(testLogger(t)))
	wantDamagedError(t, err, dir)
	sameFiles(t, before, snapshot(t, dir))
}

func TestBadgerRegularFileAsDir(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(path, []byte("a file"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := store.OpenBadger(path, store.WithLogger(testLogger(t)))
	wantDamagedError(t, err, path)
	if got, _ := os.ReadFile(path); string(got) != "a file" {
		t.Errorf("file changed to %q", got)
	}
}

func TestBadgerLockedDir(t *testing.T) {
	dir := t.TempDir()
	b := openBadger(t, dir)
	defer b.Close()
	_, err := store.OpenBadger(dir, store.WithLogger(testLogger(t)))
	if err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("second OpenBadger of an open dir: %v, want an in-use error", err)
	}
	if err := b.Put(ksTest, []byte("k"), []byte("v")); err != nil {
		t.Errorf("first store after the refused open: %v", err)
	}
}

func TestBadgerGCLoopStopsOnClose(t *testing.T) {
	b := openBadger(t, t.TempDir(), store.WithGCInterval(time.Millisecond))
	for i := range 200 {
		if err := b.Put(ksTest, fmt.Appendf(nil, "k%d", i), make([]byte, 1024)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond) // let the loop run a few times
	if err := b.Close(); err != nil {
		t.Fatalf("Close with GC loop running: %v", err)
	}
}

// TestBadgerCompactsAroundWrites writes more than Badger holds before it
// stalls writers for a compaction (two memtables and four level-0 tables
// of 8 MiB): with Badger's own compactors off, the store's compactor must
// drain level 0 while writes are in flight, and finish once they stop.
func TestBadgerCompactsAroundWrites(t *testing.T) {
	b := openBadger(t, t.TempDir(), store.WithSyncWrites(false))
	defer b.Close()
	const batches, perBatch, size = 128, 128, 4 << 10 // 64 MiB
	value := make([]byte, size)
	done := make(chan error, 1)
	go func() {
		for i := range batches {
			err := b.Batch(func(w store.Batch) error {
				for j := range perBatch {
					value[0], value[1] = byte(i), byte(j)
					if err := w.Put(ksTest, fmt.Appendf(nil, "k%03d/%03d", i, j), value); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				done <- fmt.Errorf("batch %d: %w", i, err)
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("64 MiB of writes still blocked after 2 min; levels: %+v", store.Levels(b))
	}
	deadline := time.Now().Add(30 * time.Second)
	for store.Levels(b)[0].NumTables >= 2 {
		if time.Now().After(deadline) {
			t.Fatalf("level 0 not compacted 30 s after the writes; levels: %+v", store.Levels(b))
		}
		time.Sleep(50 * time.Millisecond)
	}
	var below int
	for _, l := range store.Levels(b)[1:] {
		below += l.NumTables
	}
	if below == 0 {
		t.Fatalf("nothing was compacted below level 0; levels: %+v", store.Levels(b))
	}
	for _, k := range []string{"k000/000", "k063/064", "k127/127"} {
		v, err := b.Get(ksTest, []byte(k))
		if err != nil || len(v) != size {
			t.Fatalf("Get(%s) after compaction = %d bytes, %v", k, len(v), err)
		}
	}
}

const helperDirEnv = "GPUMESH_STORE_HELPER_DIR"

// TestHelperProcessWriter is the child of TestBadgerKillDurability: it
// writes keys "<round>/<i>" in order and prints "ack i" after each Put
// returns, until it is killed.
func TestHelperProcessWriter(t *testing.T) {
	dir := os.Getenv(helperDirEnv)
	if dir == "" {
		t.Skip("helper process for TestBadgerKillDurability")
	}
	round := os.Getenv("GPUMESH_STORE_HELPER_ROUND")
	b, err := store.OpenBadger(dir, store.WithLogger(testLogger(t)))
	if err != nil {
		fmt.Fprintf(os.Stdout, "open failed: %v\n", err)
		os.Exit(2)
	}
	deadline := time.Now().Add(30 * time.Second) // never outlive a lost parent
	for i := 0; time.Now().Before(deadline); i++ {
		if err := b.Put(ksTest, fmt.Appendf(nil, "%s/%08d", round, i), fmt.Appendf(nil, "value %d", i)); err != nil {
			fmt.Fprintf(os.Stdout, "put failed: %v\n", err)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stdout, "ack %d\n", i)
	}
	os.Exit(3)
}

// TestBadgerKillDurability kills a writer with SIGKILL mid-stream and checks
// that every write it acknowledged is there after reopening.
func TestBadgerKillDurability(t *testing.T) {
	dir := t.TempDir()
	acked := map[int]int{} // round → highest acked i, or -1
	for round := range 5 {
		acked[round] = runKilledWriter(t, dir, round)

		b := openBadger(t, dir)
		for r := 0; r <= round; r++ {
			for i := 0; i <= acked[r]; i++ {
				got, err := b.Get(ksTest, fmt.Appendf(nil, "%d/%08d", r, i))
				if want := fmt.Sprintf("value %d", i); err != nil || string(got) != want {
					b.Close()
					t.Fatalf("round %d: acked key %d/%d after kill -9 = %q, %v; want %q", round, r, i, got, err, want)
				}
			}
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %d acked writes all present", round, acked[round]+1)
	}
}

// runKilledWriter runs the helper writer on dir, lets it acknowledge writes
// for about 300ms, kills it with SIGKILL and returns the highest i it acked.
func runKilledWriter(t *testing.T, dir string, round int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcessWriter$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperDirEnv+"="+dir, "GPUMESH_STORE_HELPER_ROUND="+strconv.Itoa(round))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()

	last := -1
	var stop <-chan time.Time // starts at the first ack
	var other []string
	kill := func() {
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Errorf("kill writer: %v", err)
		}
	}
read:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				break read // the writer is gone; every line it printed is read
			}
			n, found := strings.CutPrefix(line, "ack ")
			if !found {
				other = append(other, line)
				continue
			}
			i, err := strconv.Atoi(n)
			if err != nil || i != last+1 {
				kill()
				t.Fatalf("writer printed %q after ack %d", line, last)
			}
			last = i
			if stop == nil {
				stop = time.After(300 * time.Millisecond)
			}
		case <-stop:
			kill()
			stop = nil
		case <-ctx.Done():
			kill()
			t.Fatalf("writer did not finish: %v; output %q", ctx.Err(), other)
		}
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("writer ended with %v, not SIGKILL; output %q", err, other)
	}
	if last < 0 {
		t.Fatalf("writer acknowledged nothing; output %q", other)
	}
	return last
}
