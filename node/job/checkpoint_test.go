package job

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpumesh/gpumesh/node/job/pb"
)

// swapEnv makes the test binary a swapper (see TestSwapperProcess): the
// value is "A B", two paths it exchanges in a loop.
const swapEnv = "GPUMESH_TEST_SWAP"

// TestSwapperProcess is not a test: run by startSwapper as a separate
// process, it exchanges two paths with renameat2(RENAME_EXCHANGE) as fast
// as it can, as a hostile job does, until it is killed.
func TestSwapperProcess(t *testing.T) {
	pair := os.Getenv(swapEnv)
	if pair == "" {
		t.Skip("helper process for the swap tests")
	}
	a, b, _ := strings.Cut(pair, " ")
	deadline := time.Now().Add(5 * time.Minute) // in case nobody kills it
	for i := 0; time.Now().Before(deadline); i++ {
		if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
			fmt.Println("swap failed:", err)
			os.Exit(2)
		}
		if i == 0 {
			fmt.Println("swapping")
		}
	}
	os.Exit(0)
}

// startSwapper starts a process that swaps a and b until the test ends.
func startSwapper(t *testing.T, a, b string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSwapperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), swapEnv+"="+a+" "+b)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "swapping" {
		if strings.Contains(line, "invalid argument") {
			t.Skipf("this filesystem has no RENAME_EXCHANGE: %s", line)
		}
		t.Fatalf("swapper did not start: %q %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
}

// secretDir makes a folder outside the checkpoint holding name, with
// random bytes that must never appear in an archive.
func secretDir(t *testing.T, name string) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	secret := []byte("SUPPLIER-SECRET-" + hex.EncodeToString(randBytes(t, 16)))
	if err := os.WriteFile(filepath.Join(dir, name), secret, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, secret
}

func randBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for rel, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// archiveNames lists the entries of an archive.
func archiveNames(t *testing.T, a []byte) []string {
	t.Helper()
	var names []string
	tr := tar.NewReader(bytes.NewReader(a))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatalf("archive: %v", err)
		}
		names = append(names, h.Name)
	}
}

// archiveFiles is the regular files of an archive and their contents.
func archiveFiles(t *testing.T, a []byte) map[string]string {
	out := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(a))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Errorf("archive: %v", err)
			return out
		}
		if h.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			out[h.Name] = string(b)
		}
	}
}

// TestPackCheckpointSwapRace is the attack of issue 9: a job swaps a
// sub-folder of its checkpoint folder with a symlink to the node's data
// folder (renameat2 RENAME_EXCHANGE in a tight loop, from another
// process) while the node packs. The sub-folder holds a file with the
// name of the node's key, so a packer that lists the real folder and then
// opens the path through the symlink archives the key. No archive may
// ever hold the secret's bytes.
func TestPackCheckpointSwapRace(t *testing.T) {
	secrets, secret := secretDir(t, "identity.key")
	cp := t.TempDir()
	writeTree(t, cp, map[string]string{"step": "41", "sub/identity.key": "not a key", "sub/api.token": "not a token"})
	if err := os.Symlink(secrets, filepath.Join(cp, "link")); err != nil {
		t.Fatal(err)
	}
	startSwapper(t, filepath.Join(cp, "sub"), filepath.Join(cp, "link"))

	const packs = 300
	deadline := time.Now().Add(2 * time.Minute)
	var n, failed int
	var firstErr error
	for n = 0; n < packs && time.Now().Before(deadline); n++ {
		a, _, err := PackCheckpoint(cp)
		if bytes.Contains(a, secret) {
			t.Fatalf("archive %d of %d holds the secret; entries %q", n+1, packs, archiveNames(t, a))
		}
		if err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d packs failed under the swap, first: %v", failed, n, firstErr)
	}
	t.Logf("%d packs under the swap, none held the secret", n)
}

// TestPackCheckpointFifoSwapNeverBlocks: a job swaps a regular file of
// its checkpoint with a fifo in a loop. A packer that opens the path it
// listed as a regular file would wait forever for a writer on the fifo
// (the node's meter loop, and so every receipt, stuck); packing must go on
// and never read the fifo.
func TestPackCheckpointFifoSwapNeverBlocks(t *testing.T) {
	cp := t.TempDir()
	writeTree(t, cp, map[string]string{"state": "41"})
	if err := unix.Mkfifo(filepath.Join(cp, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	startSwapper(t, filepath.Join(cp, "state"), filepath.Join(cp, "pipe"))
	done := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(2 * time.Minute)
		for n := 0; n < 300 && time.Now().Before(deadline); n++ {
			a, _, err := PackCheckpoint(cp)
			if err != nil {
				done <- err
				return
			}
			for name, data := range archiveFiles(t, a) {
				if data != "41" {
					done <- fmt.Errorf("archive %d stored %s as %q, not the file", n, name, data)
					return
				}
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(4 * time.Minute):
		t.Fatal("packing blocked on a fifo swapped in for a file")
	}
}

// TestPackCheckpointSkipsLinksAndSpecialFiles: symlinks (to files and to
// folders, inside and outside), fifos, sockets and device nodes are
// neither followed, nor read, nor stored.
func TestPackCheckpointSkipsLinksAndSpecialFiles(t *testing.T) {
	secrets, secret := secretDir(t, "identity.key")
	cp := t.TempDir()
	writeTree(t, cp, map[string]string{"step": "7", "sub/w.bin": "weights"})
	for name, target := range map[string]string{
		"key":       filepath.Join(secrets, "identity.key"),
		"secrets":   secrets,
		"inside":    "sub",
		"sub/up":    "..",
		"dangling":  filepath.Join(secrets, "nothing"),
		"sub/proc":  "/proc/self/root",
		"sub/where": "/",
	} {
		if err := os.Symlink(target, filepath.Join(cp, filepath.FromSlash(name))); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkfifo(filepath.Join(cp, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if l, err := net.Listen("unix", filepath.Join(cp, "sock")); err == nil {
		defer l.Close()
	} else {
		t.Logf("no socket: %v", err)
	}
	if err := unix.Mknod(filepath.Join(cp, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Logf("no device node (not root?): %v", err)
	}
	done := make(chan struct{})
	var a []byte
	var err error
	go func() {
		defer close(done)
		a, _, err = PackCheckpoint(cp)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("packing blocked on a special file")
	}
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(archiveNames(t, a), " ")
	if want := "step sub/ sub/w.bin"; got != want {
		t.Fatalf("archive holds %q, want %q", got, want)
	}
	if bytes.Contains(a, secret) {
		t.Fatal("the archive holds the secret")
	}
	// The folder itself may not be a symlink either.
	link := filepath.Join(t.TempDir(), "cp")
	if err := os.Symlink(secrets, link); err != nil {
		t.Fatal(err)
	}
	if a, _, err := PackCheckpoint(link); err == nil || bytes.Contains(a, secret) {
		t.Fatalf("a checkpoint folder that is a symlink was packed: %v", err)
	}
}

// goldenTree is a fixed checkpoint folder: names that sort differently by
// path and by folder ("b", "b.txt", "b/c.bin"), a name over 100 bytes
// (PAX), an empty file and folder, several modes.
func goldenTree(t *testing.T, dir string, reverse bool) {
	t.Helper()
	files := []struct {
		rel  string
		mode os.FileMode
		data string
	}{
		{"b.txt", 0o644, "bee"},
		{"a.txt", 0o600, "alpha"},
		{"b/c.bin", 0o640, strings.Repeat("0123456789", 1000)},
		{"b/empty", 0o644, ""},
		{"b/" + strings.Repeat("long-name-", 15), 0o644, "long"},
	}
	if reverse {
		for i, j := 0, len(files)-1; i < j; i, j = i+1, j-1 {
			files[i], files[j] = files[j], files[i]
		}
	}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.data), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	for rel, mode := range map[string]os.FileMode{"b/d": 0o700, "b": 0o750} {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPackCheckpointDeterministic: the same content gives the same bytes,
// whatever order it was written in, and the same bytes as the packer
// before descriptors (so hashes of existing checkpoints still match).
func TestPackCheckpointDeterministic(t *testing.T) {
	// The archive the previous, path-based packer made of goldenTree.
	const want = "c4d1bcaaecde1214ee64d03e3269cda1e4849781533be13b5a7cb00c9a2c55b3"
	x, y := t.TempDir(), t.TempDir()
	goldenTree(t, x, false)
	goldenTree(t, y, true)
	a, h, err := PackCheckpoint(x)
	if err != nil {
		t.Fatal(err)
	}
	b, h2, err := PackCheckpoint(y)
	if err != nil {
		t.Fatal(err)
	}
	if h != h2 || !bytes.Equal(a, b) {
		t.Fatal("the same content gave different archives")
	}
	if got := hex.EncodeToString(h[:]); got != want || sha256.Sum256(a) != h {
		t.Fatalf("archive hash %s, want %s", got, want)
	}
}

// TestPackCheckpointBounds: folders nested deeper than maxCheckpointDepth
// and more entries than an archive could hold are refused early.
func TestPackCheckpointBounds(t *testing.T) {
	cp := t.TempDir()
	deep := filepath.Join(cp, strings.Repeat("d/", maxCheckpointDepth+1))
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := PackCheckpoint(cp); !errors.Is(err, ErrCheckpointTooLarge) {
		t.Fatalf("%d nested folders: %v", maxCheckpointDepth+1, err)
	}
	big := t.TempDir()
	f, err := os.Create(filepath.Join(big, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxCheckpointSize); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, _, err := PackCheckpoint(big); !errors.Is(err, ErrCheckpointTooLarge) {
		t.Fatalf("a %d-byte file: %v", MaxCheckpointSize, err)
	}
}

// TestUnpackCheckpointDoesNotFollowSymlinks: a symlink already in the
// target folder (a checkpoint_dir inside a working dir that held one)
// cannot lead an archive's entries out of it.
func TestUnpackCheckpointDoesNotFollowSymlinks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		link  string // symlink made in the target folder, to outside
		entry string // archive entry that meets it
		isDir bool   // the link points at the outside folder (else file)
	}{
		{"folder link", "sub", "sub/x", true},
		{"file link", "f", "f", false},
		{"deep folder link", "a", "a/b/c", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outside := t.TempDir()
			victim := filepath.Join(outside, "victim")
			if err := os.WriteFile(victim, []byte("original"), 0o644); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			target := outside
			if !tc.isDir {
				target = victim
			}
			if err := os.Symlink(target, filepath.Join(dir, tc.link)); err != nil {
				t.Fatal(err)
			}
			a := tarWith(t, tc.entry, []byte("planted"))
			if err := UnpackCheckpoint(a, sha256.Sum256(a), dir); err == nil {
				t.Errorf("entry %q was unpacked through the symlink %s", tc.entry, tc.link)
			}
			es, _ := readDirNames(outside)
			if b, _ := os.ReadFile(victim); string(b) != "original" || len(es) != 1 {
				t.Fatalf("the archive wrote outside its folder: %q, %q", b, es)
			}
		})
	}
	// Nor may the folder itself be a symlink.
	outside := t.TempDir()
	link := filepath.Join(t.TempDir(), "cp")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	a := tarWith(t, "x", []byte("planted"))
	if err := UnpackCheckpoint(a, sha256.Sum256(a), link); err == nil {
		t.Error("unpacked into a symlink")
	}
	if es, _ := readDirNames(outside); len(es) != 0 {
		t.Fatalf("wrote %q through the symlinked folder", es)
	}
}

// TestRunReadsItsOwnCheckpointFolder: the checkpoint folder is a
// checkpoint_dir inside the working dir, so the job owns every folder on
// the way to it. A job that renames one of them away and puts a symlink
// to the node's files in its place must not get those packed: the attempt
// reads the folder it opened before the job started.
func TestRunReadsItsOwnCheckpointFolder(t *testing.T) {
	secrets, secret := secretDir(t, "identity.key")
	if err := os.Mkdir(filepath.Join(secrets, "ckpt"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(secrets, "identity.key"), filepath.Join(secrets, "ckpt", "identity.key")); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "attempt")
	spec := &Spec{JobSpec: &pb.JobSpec{Files: []*pb.File{{Path: "in/data.txt", Data: []byte("input")}}}}
	cp, err := prepareAttempt(dir, "work/state/ckpt", spec, nil, [32]byte{})
	if err != nil {
		t.Fatal(err)
	}
	r := &run{cp: cp, logger: slog.New(slog.DiscardHandler)}
	defer cp.Close()
	work := filepath.Join(dir, "work")
	if b, err := os.ReadFile(filepath.Join(work, "in", "data.txt")); err != nil || string(b) != "input" {
		t.Fatalf("input file: %q %v", b, err)
	}
	// The job writes its checkpoint, then redirects the way to it.
	writeTree(t, filepath.Join(work, "state", "ckpt"), map[string]string{"identity.key": "the job's own"})
	if err := os.Rename(filepath.Join(work, "state"), filepath.Join(work, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secrets, filepath.Join(work, "state")); err != nil {
		t.Fatal(err)
	}
	if r.refreshCheckpoint() == nil {
		t.Fatal("no checkpoint")
	}
	a, _ := r.checkpoint()
	if bytes.Contains(a, secret) || !bytes.Contains(a, []byte("the job's own")) {
		t.Fatalf("packed the wrong folder: %q", archiveNames(t, a))
	}
	// The same for the folder itself swapped for a symlink.
	if err := os.Rename(filepath.Join(work, "moved", "ckpt"), filepath.Join(work, "moved", "old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(secrets, "ckpt"), filepath.Join(work, "moved", "ckpt")); err != nil {
		t.Fatal(err)
	}
	writeTree(t, filepath.Join(work, "moved", "old"), map[string]string{"more": "later"})
	r.refreshCheckpoint()
	if a, _ := r.checkpoint(); bytes.Contains(a, secret) || !bytes.Contains(a, []byte("later")) {
		t.Fatalf("packed the wrong folder: %q", archiveNames(t, a))
	}
}
