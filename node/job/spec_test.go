package job

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

func validSpec() *pb.JobSpec {
	return &pb.JobSpec{
		JobId: bytes.Repeat([]byte{7}, 16), Argv: []string{"python", "train.py"}, Gpus: 2,
		Env:     []*pb.EnvVar{{Name: "EPOCHS", Value: "3"}},
		Files:   []*pb.File{{Path: "train.py", Data: []byte("print(1)")}, {Path: "data/a.txt", Mode: 0o600}},
		Restart: &pb.Restart{Policy: "on-failure", MaxRestarts: 2, ExitCodes: []int32{3}},
		Limits:  &pb.Limits{MemoryBytes: 1 << 30},
	}
}

func TestSpecRoundTripAndHash(t *testing.T) {
	s, err := EncodeSpec(validSpec())
	if err != nil {
		t.Fatal(err)
	}
	again, err := DecodeSpec(s.Raw)
	if err != nil {
		t.Fatal(err)
	}
	if again.Hash != sha256.Sum256(s.Raw) || again.Hash != s.Hash || again.ID() != strings.Repeat("07", 16) {
		t.Fatalf("hash or id differ: %x %x", again.Hash, s.Hash)
	}
	// The same spec encodes to the same bytes: the lease's hash is stable.
	s2, _ := EncodeSpec(validSpec())
	if !bytes.Equal(s.Raw, s2.Raw) {
		t.Fatal("encoding is not deterministic")
	}
}

func TestSpecRejects(t *testing.T) {
	cases := map[string]func(*pb.JobSpec){
		"no argv":           func(m *pb.JobSpec) { m.Argv = nil },
		"empty argv0":       func(m *pb.JobSpec) { m.Argv = []string{""} },
		"NUL in arg":        func(m *pb.JobSpec) { m.Argv = append(m.Argv, "a\x00b") },
		"short job id":      func(m *pb.JobSpec) { m.JobId = []byte{1} },
		"no gpus":           func(m *pb.JobSpec) { m.Gpus = 0 },
		"env with =":        func(m *pb.JobSpec) { m.Env = []*pb.EnvVar{{Name: "A=B", Value: "x"}} },
		"absolute file":     func(m *pb.JobSpec) { m.Files = []*pb.File{{Path: "/etc/passwd"}} },
		"escaping file":     func(m *pb.JobSpec) { m.Files = []*pb.File{{Path: "../x"}} },
		"unclean file":      func(m *pb.JobSpec) { m.Files = []*pb.File{{Path: "a/../b"}} },
		"repeated file":     func(m *pb.JobSpec) { m.Files = []*pb.File{{Path: "a"}, {Path: "a"}} },
		"setuid mode":       func(m *pb.JobSpec) { m.Files = []*pb.File{{Path: "a", Mode: 0o4755}} },
		"unknown runtime":   func(m *pb.JobSpec) { m.Runtime = "lxc" },
		"image w/o runtime": func(m *pb.JobSpec) { m.Image = "ubuntu" },
		"docker w/o image":  func(m *pb.JobSpec) { m.Runtime = "docker" },
		"bad policy":        func(m *pb.JobSpec) { m.Restart = &pb.Restart{Policy: "always"} },
		"negative limit":    func(m *pb.JobSpec) { m.Limits = &pb.Limits{CpuSeconds: -1} },
		"too many args":     func(m *pb.JobSpec) { m.Argv = make([]string, MaxArgs+1); m.Argv[0] = "x" },
		"port 0":            func(m *pb.JobSpec) { m.Ports = []*pb.Port{{Number: 0, Protocol: "tcp"}} },
		"port 65536":        func(m *pb.JobSpec) { m.Ports = []*pb.Port{{Number: 65536, Protocol: "tcp"}} },
		"udp port":          func(m *pb.JobSpec) { m.Ports = []*pb.Port{{Number: 53, Protocol: "udp"}} },
		"port w/o protocol": func(m *pb.JobSpec) { m.Ports = []*pb.Port{{Number: 80}} },
		"ports descending": func(m *pb.JobSpec) {
			m.Ports = []*pb.Port{{Number: 9000, Protocol: "tcp"}, {Number: 8000, Protocol: "tcp"}}
		},
		"port repeated": func(m *pb.JobSpec) {
			m.Ports = []*pb.Port{{Number: 8000, Protocol: "tcp"}, {Number: 8000, Protocol: "tcp"}}
		},
		"too many ports": func(m *pb.JobSpec) {
			for i := range MaxPorts + 1 {
				m.Ports = append(m.Ports, &pb.Port{Number: uint32(8000 + i), Protocol: "tcp"})
			}
		},
		"stdin in a container": func(m *pb.JobSpec) {
			m.Runtime, m.Image, m.Stdin = "docker", "alpine", &pb.Stdin{}
		},
		"terminal of no rows":     func(m *pb.JobSpec) { m.Stdin = &pb.Stdin{Tty: true, Cols: 80} },
		"terminal of 65536 cols":  func(m *pb.JobSpec) { m.Stdin = &pb.Stdin{Tty: true, Rows: 24, Cols: 65536} },
		"size without a terminal": func(m *pb.JobSpec) { m.Stdin = &pb.Stdin{Rows: 24, Cols: 80} },
	}
	for _, ok := range []*pb.Stdin{{}, {Tty: true, Rows: 24, Cols: 80}, {Tty: true, Rows: 65535, Cols: 1}} {
		m := validSpec()
		m.Stdin = ok
		if _, err := EncodeSpec(m); err != nil {
			t.Errorf("stdin %v: %v", ok, err)
		}
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			m := validSpec()
			mutate(m)
			if _, err := EncodeSpec(m); !errors.Is(err, p2p.ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
	if _, err := DecodeSpec(make([]byte, MaxSpecSize+1)); !errors.Is(err, p2p.ErrTooLarge) {
		t.Fatalf("oversized: %v", err)
	}
	if _, err := DecodeSpec([]byte{0xff, 0xff}); !errors.Is(err, p2p.ErrMalformed) {
		t.Fatalf("garbage: %v", err)
	}
	// A version other than the one this code knows.
	m := validSpec()
	m.Version = 9
	raw, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if _, err := DecodeSpec(raw); !errors.Is(err, p2p.ErrUnsupported) {
		t.Fatalf("version 9: %v", err)
	}
	// The same spec in a non-canonical encoding (a field repeated) would
	// hash differently: refused.
	s, _ := EncodeSpec(validSpec())
	dup := append(append([]byte(nil), s.Raw...), s.Raw[:2]...)
	if _, err := DecodeSpec(dup); err == nil {
		t.Fatal("a non-canonical encoding was accepted")
	}
}

// TestSpecPorts: declared ports are part of the spec's hash, and Serves
// answers for them only.
func TestSpecPorts(t *testing.T) {
	plain, err := EncodeSpec(validSpec())
	if err != nil {
		t.Fatal(err)
	}
	m := validSpec()
	m.Ports = []*pb.Port{{Number: 8000, Protocol: "tcp"}, {Number: 9000, Protocol: "tcp"}}
	s, err := EncodeSpec(m)
	if err != nil {
		t.Fatal(err)
	}
	if s.Hash == plain.Hash {
		t.Fatal("ports do not change the spec's hash")
	}
	for port, want := range map[uint16]bool{8000: true, 9000: true, 8080: false, 22: false} {
		if s.Serves(port) != want {
			t.Errorf("Serves(%d) = %v", port, !want)
		}
	}
	if plain.Serves(8000) {
		t.Error("a spec without ports serves 8000")
	}
}

func TestRetries(t *testing.T) {
	s, _ := EncodeSpec(validSpec())
	for _, c := range []struct {
		code, restarts int
		want           bool
	}{{3, 0, true}, {3, 1, true}, {3, 2, false}, {4, 0, false}, {0, 0, false}} {
		if got := s.Retries(c.code, c.restarts); got != c.want {
			t.Errorf("Retries(%d, %d) = %v, want %v", c.code, c.restarts, got, c.want)
		}
	}
	m := validSpec()
	m.Restart = nil
	never, _ := EncodeSpec(m)
	if never.Retries(1, 0) {
		t.Error("no policy retried a failure")
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "step"), []byte("12"), 0o644)
	os.WriteFile(filepath.Join(src, "sub", "weights.bin"), bytes.Repeat([]byte{9}, 100_000), 0o600)
	os.Symlink("/etc/passwd", filepath.Join(src, "link")) // not archived
	a, h, err := PackCheckpoint(src)
	if err != nil || len(a) == 0 {
		t.Fatalf("pack: %v", err)
	}
	a2, h2, _ := PackCheckpoint(src)
	if h != h2 || !bytes.Equal(a, a2) {
		t.Fatal("packing the same folder twice gave different archives")
	}
	if err := UnpackCheckpoint(a, h, dst); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "sub", "weights.bin")); len(b) != 100_000 {
		t.Fatalf("unpacked %d bytes", len(b))
	}
	if _, err := os.Lstat(filepath.Join(dst, "link")); !os.IsNotExist(err) {
		t.Fatal("a symlink was carried over")
	}
	if err := UnpackCheckpoint(a, [32]byte{1}, t.TempDir()); err == nil {
		t.Fatal("a wrong hash was accepted")
	}
	if a, h, err := PackCheckpoint(t.TempDir()); err != nil || a != nil || h != ([32]byte{}) {
		t.Fatalf("empty folder: %v %d", err, len(a))
	}
}

func TestCheckpointRejectsEscapes(t *testing.T) {
	for _, name := range []string{"../evil", "/abs", "a/../../b"} {
		a := tarWith(t, name, []byte("x"))
		dir := t.TempDir()
		if err := UnpackCheckpoint(a, sha256.Sum256(a), filepath.Join(dir, "in")); err == nil {
			t.Errorf("entry %q was unpacked", name)
		}
	}
	link := tarLink(t)
	if err := UnpackCheckpoint(link, sha256.Sum256(link), t.TempDir()); err == nil {
		t.Error("a symlink entry was unpacked")
	}
	big := make([]byte, MaxCheckpointSize+1)
	if err := UnpackCheckpoint(big, sha256.Sum256(big), t.TempDir()); !errors.Is(err, ErrCheckpointTooLarge) {
		t.Errorf("oversized archive: %v", err)
	}
}

func TestLogFileCap(t *testing.T) {
	lf, err := openLog(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	for i := 0; i < MaxLogSize/len(chunk)+3; i++ {
		if _, err := lf.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if s := lf.Size(); s < MaxLogSize || s > MaxLogSize+200 {
		t.Fatalf("log size %d, want about %d", s, MaxLogSize)
	}
	tail, _, err := lf.ReadAt(MaxLogSize-10, 1000)
	if err != nil || !bytes.Contains(tail, []byte("log limit")) {
		t.Fatalf("no note of the drop: %q %v", tail, err)
	}
}

// TestSpecCheckMessages pins each check's message, including the cases
// TestSpecRejects leaves out, and the order the checks run in: where a
// spec breaks two rules, the earlier check's message is the one given.
func TestSpecCheckMessages(t *testing.T) {
	long := strings.Repeat("x", MaxArgBytes+1)
	cases := []struct {
		name   string
		mutate func(*pb.JobSpec)
		want   string
	}{
		{"too many env", func(m *pb.JobSpec) { m.Env = make([]*pb.EnvVar, MaxEnv+1) }, "257 env vars, limit 256"},
		{"too many files", func(m *pb.JobSpec) { m.Files = make([]*pb.File, MaxFiles+1) }, "257 files, limit 256"},
		{"too many gpus", func(m *pb.JobSpec) { m.Gpus = 257 }, "gpus 257 outside 1..256"},
		{"long arg", func(m *pb.JobSpec) { m.Argv = append(m.Argv, long) }, "argv[2] is empty, too long or holds NUL"},
		{"empty env name", func(m *pb.JobSpec) { m.Env = []*pb.EnvVar{{Value: "x"}} }, `env var "" is not NAME=VALUE`},
		{"NUL in env value", func(m *pb.JobSpec) { m.Env = []*pb.EnvVar{{Name: "A", Value: "a\x00"}} }, `env var "A" is not NAME=VALUE`},
		{"long env", func(m *pb.JobSpec) { m.Env = []*pb.EnvVar{{Name: "A", Value: long}} }, `env var "A" is not NAME=VALUE`},
		{"setuid mode", func(m *pb.JobSpec) { m.Files = []*pb.File{{Path: "a", Mode: 0o4755}} }, `file "a": mode 4755 has bits other than permissions`},
		{"unclean checkpoint dir", func(m *pb.JobSpec) { m.CheckpointDir = "/ckpt" }, `checkpoint_dir "/ckpt" is not a clean relative path`},
		{"file in checkpoint dir", func(m *pb.JobSpec) { m.CheckpointDir = "data" }, `file "data/a.txt" lies in checkpoint_dir "data"`},
		{"file is checkpoint dir", func(m *pb.JobSpec) { m.CheckpointDir = "train.py" }, `file "train.py" lies in checkpoint_dir "train.py"`},
		{"podman w/o image", func(m *pb.JobSpec) { m.Runtime = "podman" }, "runtime podman needs an image"},
		{"too many restarts", func(m *pb.JobSpec) { m.Restart = &pb.Restart{Policy: "on-failure", MaxRestarts: 101} }, "max_restarts 101 above 100"},
		{"negative disk", func(m *pb.JobSpec) { m.Limits = &pb.Limits{DiskBytes: -1} }, "a limit is negative"},
		// Two rules broken: the bounds run before the contents, the
		// contents in the order of the spec's fields.
		{"bounds before argv", func(m *pb.JobSpec) { m.Argv = append(m.Argv, "a\x00"); m.Gpus = 0 }, "gpus 0 outside"},
		{"argv before env", func(m *pb.JobSpec) { m.Argv[1] = "a\x00"; m.Env[0].Name = "" }, "argv[1]"},
		{"files before checkpoint dir", func(m *pb.JobSpec) { m.Files[1].Mode = 0o4000; m.CheckpointDir = "/x" }, "mode 4000"},
		{"checkpoint dir before runtime", func(m *pb.JobSpec) { m.CheckpointDir = "/x"; m.Runtime = "lxc" }, "checkpoint_dir"},
		{"runtime before restart", func(m *pb.JobSpec) { m.Runtime = "lxc"; m.Restart.Policy = "always" }, `runtime "lxc"`},
		{"restart before limits", func(m *pb.JobSpec) { m.Restart.Policy = "always"; m.Limits.Procs = -1 }, "restart policy"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := validSpec()
			c.mutate(m)
			_, err := EncodeSpec(m)
			if !errors.Is(err, p2p.ErrMalformed) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrMalformed saying %q", err, c.want)
			}
		})
	}
	// With a valid spec, every check passes.
	if _, err := EncodeSpec(validSpec()); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
}
