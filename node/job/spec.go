package job

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"path"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// Spec is a validated job spec with its encoding and hash.
type Spec struct {
	*pb.JobSpec
	Raw  []byte   // the deterministic encoding the hash covers
	Hash [32]byte // sha-256 of Raw: the lease's job_spec_hash
}

// ID is the job's ID in hex.
func (s *Spec) ID() string { return hex.EncodeToString(s.JobId) }

// NewJobID draws a random 16-byte job ID.
func NewJobID() []byte {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return b
}

// EncodeSpec validates m, sets its version, and encodes it.
func EncodeSpec(m *pb.JobSpec) (*Spec, error) {
	c := proto.Clone(m).(*pb.JobSpec)
	c.Version = SpecVersion
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("job spec: encode: %w", err)
	}
	return DecodeSpec(raw)
}

// DecodeSpec decodes and validates an encoded spec. Every error wraps
// p2p.ErrTooLarge, p2p.ErrUnsupported or p2p.ErrMalformed and says which
// field is wrong.
func DecodeSpec(raw []byte) (*Spec, error) {
	if len(raw) > MaxSpecSize {
		return nil, fmt.Errorf("job spec: %w: %d bytes, limit %d", p2p.ErrTooLarge, len(raw), MaxSpecSize)
	}
	m := &pb.JobSpec{}
	if err := proto.Unmarshal(raw, m); err != nil {
		return nil, fmt.Errorf("job spec: %w: %v", p2p.ErrMalformed, err)
	}
	if err := checkSpec(m); err != nil {
		return nil, fmt.Errorf("job spec: %w", err)
	}
	// The hash is over the canonical encoding, so a non-canonical
	// encoding of the same spec is refused rather than hashed twice.
	canon, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil || string(canon) != string(raw) {
		return nil, fmt.Errorf("job spec: %w: not in canonical encoding", p2p.ErrMalformed)
	}
	return &Spec{JobSpec: m, Raw: raw, Hash: sha256.Sum256(raw)}, nil
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", p2p.ErrMalformed, fmt.Sprintf(format, args...))
}

// checkSpec runs the checks of a spec in order: the version, then the
// bounds on counts and sizes, then each property's contents. The first
// failure is the one reported.
func checkSpec(m *pb.JobSpec) error {
	for _, check := range []func(*pb.JobSpec) error{
		checkVersion,
		checkBounds,
		checkArgv,
		checkEnv,
		checkFiles,
		checkCheckpointDir,
		checkRuntime,
		checkRestart,
		checkLimits,
		checkPorts,
		checkStdin,
		checkCluster,
	} {
		if err := check(m); err != nil {
			return err
		}
	}
	return nil
}

// checkVersion refuses a spec version this code does not know.
func checkVersion(m *pb.JobSpec) error {
	if m.Version != SpecVersion {
		return fmt.Errorf("%w: job spec version %d, want %d", p2p.ErrUnsupported, m.Version, SpecVersion)
	}
	return nil
}

// checkBounds checks the job ID's length, the number of args, env vars
// and files, and the number of GPUs: cheap checks before any content.
func checkBounds(m *pb.JobSpec) error {
	switch {
	case len(m.JobId) != 16:
		return malformed("job_id is %d bytes, want 16", len(m.JobId))
	case len(m.Argv) == 0:
		return malformed("argv is empty")
	case len(m.Argv) > MaxArgs:
		return malformed("%d args, limit %d", len(m.Argv), MaxArgs)
	case len(m.Env) > MaxEnv:
		return malformed("%d env vars, limit %d", len(m.Env), MaxEnv)
	case len(m.Files) > MaxFiles:
		return malformed("%d files, limit %d", len(m.Files), MaxFiles)
	case m.Gpus == 0 || m.Gpus > 256:
		return malformed("gpus %d outside 1..256", m.Gpus)
	}
	return nil
}

// checkArgv checks each arg: not too long, no NUL, and argv[0] not empty.
func checkArgv(m *pb.JobSpec) error {
	for i, a := range m.Argv {
		if len(a) > MaxArgBytes || strings.IndexByte(a, 0) >= 0 || (i == 0 && a == "") {
			return malformed("argv[%d] is empty, too long or holds NUL", i)
		}
	}
	return nil
}

// checkEnv checks each env var: a name without '=' or NUL, a value
// without NUL, and not too long together.
func checkEnv(m *pb.JobSpec) error {
	for _, e := range m.Env {
		if e.Name == "" || strings.ContainsAny(e.Name, "=\x00") || strings.IndexByte(e.Value, 0) >= 0 || len(e.Name)+len(e.Value) > MaxArgBytes {
			return malformed("env var %q is not NAME=VALUE without NUL, or too long", e.Name)
		}
	}
	return nil
}

// checkFiles checks each file: a clean relative path, not repeated, and
// a mode of permission bits only.
func checkFiles(m *pb.JobSpec) error {
	seen := map[string]bool{}
	for _, f := range m.Files {
		if !localPath(f.Path) || seen[f.Path] {
			return malformed("file path %q is not a clean relative path, or repeats", f.Path)
		}
		if f.Mode&^0o777 != 0 {
			return malformed("file %q: mode %o has bits other than permissions", f.Path, f.Mode)
		}
		seen[f.Path] = true
	}
	return nil
}

// checkCheckpointDir checks that the checkpoint dir, if any, is a clean
// relative path and that no file lies in it.
func checkCheckpointDir(m *pb.JobSpec) error {
	if m.CheckpointDir == "" {
		return nil
	}
	if !localPath(m.CheckpointDir) {
		return malformed("checkpoint_dir %q is not a clean relative path", m.CheckpointDir)
	}
	for _, f := range m.Files {
		if f.Path == m.CheckpointDir || strings.HasPrefix(f.Path, m.CheckpointDir+"/") {
			return malformed("file %q lies in checkpoint_dir %q", f.Path, m.CheckpointDir)
		}
	}
	return nil
}

// checkStdin checks a standard input: for the process runtime, and a
// terminal's size within 1..65535.
func checkStdin(m *pb.JobSpec) error {
	in := m.Stdin
	switch {
	case in == nil:
		return nil
	case m.Runtime != "" && m.Runtime != "process":
		return malformed("stdin needs the process runtime, not %s", m.Runtime)
	case in.Tty && (in.Rows == 0 || in.Cols == 0 || in.Rows > math.MaxUint16 || in.Cols > math.MaxUint16):
		return malformed("terminal size %dx%d outside 1..65535", in.Cols, in.Rows)
	case !in.Tty && (in.Rows != 0 || in.Cols != 0):
		return malformed("a terminal size without a terminal")
	}
	return nil
}

// checkRuntime checks the runtime and that an image comes with, and only
// with, a container runtime.
func checkRuntime(m *pb.JobSpec) error {
	switch m.Runtime {
	case "", "process":
		if m.Image != "" {
			return malformed("image %q needs runtime docker or podman", m.Image)
		}
	case "docker", "podman":
		if m.Image == "" {
			return malformed("runtime %s needs an image", m.Runtime)
		}
	default:
		return malformed("runtime %q: want process, docker or podman", m.Runtime)
	}
	return nil
}

// checkRestart checks the restart policy, if any.
func checkRestart(m *pb.JobSpec) error {
	r := m.Restart
	if r == nil {
		return nil
	}
	if !slices.Contains([]string{"", "never", "on-failure"}, r.Policy) {
		return malformed("restart policy %q: want never or on-failure", r.Policy)
	}
	if r.MaxRestarts > 100 {
		return malformed("max_restarts %d above 100", r.MaxRestarts)
	}
	return nil
}

// checkLimits refuses a negative limit.
func checkLimits(m *pb.JobSpec) error {
	if l := m.Limits; l != nil && (l.MemoryBytes < 0 || l.CpuSeconds < 0 || l.Procs < 0 || l.FileBytes < 0 || l.OpenFiles < 0 || l.DiskBytes < 0) {
		return malformed("a limit is negative")
	}
	return nil
}

// checkPorts checks the declared ports: at most MaxPorts, each a TCP
// port in 1..65535, in ascending order without repeats (so that one set
// of ports has one encoding and one hash).
func checkPorts(m *pb.JobSpec) error {
	if len(m.Ports) > MaxPorts {
		return malformed("%d ports, limit %d", len(m.Ports), MaxPorts)
	}
	for i, p := range m.Ports {
		switch {
		case p.Number == 0 || p.Number > 65535:
			return malformed("port %d outside 1..65535", p.Number)
		case p.Protocol != "tcp":
			return malformed("port %d: protocol %q, want tcp", p.Number, p.Protocol)
		case i > 0 && p.Number <= m.Ports[i-1].Number:
			return malformed("ports not in ascending order without repeats (%d after %d)", p.Number, m.Ports[i-1].Number)
		}
	}
	return nil
}

// Serves reports whether the spec declares TCP port n.
func (s *Spec) Serves(n uint16) bool {
	return slices.ContainsFunc(s.Ports, func(p *pb.Port) bool { return p.Number == uint32(n) && p.Protocol == "tcp" })
}

// localPath reports whether p is a clean relative path inside its root.
func localPath(p string) bool {
	return p != "" && p != "." && len(p) <= 255 && !strings.HasPrefix(p, "/") &&
		path.Clean(p) == p && p != ".." && !strings.HasPrefix(p, "../") && strings.IndexByte(p, 0) < 0
}

// Retries reports whether the spec's restart policy retries an attempt
// that exited with code after restarts earlier restarts.
func (s *Spec) Retries(code int, restarts int) bool {
	r := s.Restart
	if r == nil || r.Policy != "on-failure" || code == 0 || restarts >= int(r.MaxRestarts) {
		return false
	}
	return len(r.ExitCodes) == 0 || slices.Contains(r.ExitCodes, int32(code))
}
