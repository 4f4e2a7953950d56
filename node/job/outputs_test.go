package job

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/job/pb"
	"github.com/gpumesh/gpumesh/p2p"
)

// TestOutputsOfSucceededAttempt: the attempt that succeeds (the second:
// the first fails and is restarted) has its $OUTPUT_DIR brought back to
// the renter's node, files and folders, never a symlink; the failed
// attempt's outputs are not taken.
func TestOutputsOfSucceededAttempt(t *testing.T) {
	m := newMesh(t, 1, nil)
	script := `echo "$JOB_ATTEMPT" > "$OUTPUT_DIR/out.txt"; mkdir "$OUTPUT_DIR/sub"; echo deep > "$OUTPUT_DIR/sub/y"
ln -s /etc/passwd "$OUTPUT_DIR/link"; [ "$JOB_ATTEMPT" -ge 2 ] || exit 3`
	v := m.submit(shJob(script, func(s *pb.JobSpec) { s.Restart = &pb.Restart{Policy: "on-failure", MaxRestarts: 2} }))
	v = m.waitJob(v.JobID, StateSucceeded)
	if len(v.Attempts) != 2 {
		t.Fatalf("want two attempts: %s", describe(v))
	}
	if v.Outputs == "" || v.OutputsRefused != "" {
		t.Fatalf("outputs %q, refused %q", v.Outputs, v.OutputsRefused)
	}
	if got, err := os.ReadFile(filepath.Join(v.Outputs, "out.txt")); err != nil || string(got) != "2\n" {
		t.Fatalf("out.txt %q, %v; want the succeeding attempt's", got, err)
	}
	if got, err := os.ReadFile(filepath.Join(v.Outputs, "sub", "y")); err != nil || string(got) != "deep\n" {
		t.Fatalf("sub/y %q, %v", got, err)
	}
	if _, err := os.Lstat(filepath.Join(v.Outputs, "link")); !os.IsNotExist(err) {
		t.Fatalf("a symlink came back: %v", err)
	}
}

// TestOutputsOfFailedJobNotTaken: a job that fails for good brings no
// outputs back.
func TestOutputsOfFailedJobNotTaken(t *testing.T) {
	m := newMesh(t, 1, nil)
	v := m.submit(shJob(`echo bad > "$OUTPUT_DIR/out.txt"; exit 4`, nil))
	v = m.waitJob(v.JobID, StateFailed)
	if v.Outputs != "" {
		t.Fatalf("a failed job's outputs were taken: %s", v.Outputs)
	}
	if _, err := os.Lstat(m.ctrl.outputsDir(&jobRecord{ID: v.JobID})); !os.IsNotExist(err) {
		t.Fatalf("outputs folder of a failed job: %v", err)
	}
}

// TestOutputsHostileArchiveRefused: an archive with a path escape, a
// symlink, a device, or not matching its hash, or too large, is refused
// with a reason and leaves nothing behind.
func TestOutputsHostileArchiveRefused(t *testing.T) {
	entry := func(h *tar.Header, data string) func(*tar.Writer) {
		return func(tw *tar.Writer) {
			h.Size = int64(len(data))
			if h.Mode == 0 {
				h.Mode = 0o644
			}
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			_, _ = tw.Write([]byte(data))
		}
	}
	build := func(entries ...func(*tar.Writer)) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, e := range entries {
			e(tw)
		}
		_ = tw.Close()
		return b.Bytes()
	}
	ok := entry(&tar.Header{Name: "a.txt", Typeflag: tar.TypeReg}, "fine")
	for _, tc := range []struct {
		name    string
		archive []byte
		hash    func([]byte) [32]byte
		want    string
	}{
		{"path escape", build(ok, entry(&tar.Header{Name: "../../evil", Typeflag: tar.TypeReg}, "x")), nil, "escapes"},
		{"absolute path", build(ok, entry(&tar.Header{Name: "/tmp/evil", Typeflag: tar.TypeReg}, "x")), nil, "escapes"},
		{"symlink", build(ok, entry(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}, "")), nil, "not a file or folder"},
		{"device", build(ok, entry(&tar.Header{Name: "d", Typeflag: tar.TypeChar}, "")), nil, "not a file or folder"},
		{"file over a folder's symlink", build(entry(&tar.Header{Name: "a/b", Typeflag: tar.TypeReg}, "x"), entry(&tar.Header{Name: "a/b/c", Typeflag: tar.TypeReg}, "x")), nil, ""},
		{"hash mismatch", build(ok), func([]byte) [32]byte { return [32]byte{1} }, "does not match"},
		{"too large", make([]byte, MaxOutputSize+1), nil, "too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			dst := filepath.Join(parent, "outputs")
			h := sha256.Sum256(tc.archive)
			if tc.hash != nil {
				h = tc.hash(tc.archive)
			}
			err := unpackFresh(tc.archive, h, dst)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
			left, _ := os.ReadDir(parent)
			if len(left) != 0 {
				t.Fatalf("left behind: %v", left)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(parent), "evil")); err == nil {
				t.Fatal("an entry escaped")
			}
		})
	}
}

// TestOutputsHostileSupplierRefused: over the wire, a supplier whose
// outputs do not match its announcement, claim more than the limit, or
// hold an escaping path or a symlink, is refused with a reason, and the
// renter's node keeps nothing of them.
func TestOutputsHostileSupplierRefused(t *testing.T) {
	m, l := outputsLease(t)
	sup := m.sups[0]
	good := tarWith(t, "out.txt", []byte("ok"))
	escape := tarWith(t, "../../evil", []byte("x"))
	link := tarLink(t)
	for _, tc := range []struct {
		name     string
		header   *pb.CheckpointHeader // nil: the archive's true hash and size
		archive  []byte
		announce []byte // the archive the announcement names
		want     string
	}{
		{"hash mismatch", nil, good, tarWith(t, "out.txt", []byte("other")), "does not match its announcement"},
		{"header lies", &pb.CheckpointHeader{Hash: make([]byte, 32), Size: uint64(len(good))}, good, good, "does not match its header"},
		{"too large", &pb.CheckpointHeader{Hash: make([]byte, 32), Size: MaxOutputSize + 1}, nil, good, "archive header"},
		{"path escape", nil, escape, escape, "escapes"},
		{"symlink", nil, link, link, "not a file or folder"},
		{"refused", &pb.CheckpointHeader{Refused: "no outputs"}, nil, good, "no outputs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			serveOutputs(sup.host, tc.header, tc.archive)
			id := hex.EncodeToString(NewJobID())
			js := &jobState{rec: jobRecord{ID: id}, changed: make(chan struct{})}
			sum := sha256.Sum256(tc.announce)
			ann := &pb.Outputs{Attempt: 1, Hash: sum[:], Size: uint64(len(tc.announce))}
			err := m.ctrl.takeOutputs(context.Background(), js, &attemptCtx{attempt: 1, lease: l}, ann)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
			parent := filepath.Dir(m.ctrl.outputsDir(&js.rec))
			if left, _ := os.ReadDir(parent); len(left) != 0 {
				t.Fatalf("left behind in %s: %v", parent, left)
			}
			if js.rec.Outputs != "" {
				t.Fatal("refused outputs recorded")
			}
		})
	}
}

// TestOutputsUnfetchedRunAgain: when the supplier of a succeeded attempt
// cannot be asked for its outputs (it died right after its final
// receipt), the outputs are not recorded as refused and the caller is
// told to run the attempt again; an archive that arrives but is refused
// stays refused.
func TestOutputsUnfetchedRunAgain(t *testing.T) {
	m, l := outputsLease(t)
	sup := m.sups[0]
	good := tarWith(t, "out.txt", []byte("ok"))
	sum := sha256.Sum256(good)
	ann := &pb.Outputs{Attempt: 1, Hash: sum[:], Size: uint64(len(good))}
	take := func() (*jobState, bool) {
		js := &jobState{rec: jobRecord{ID: hex.EncodeToString(NewJobID())}, changed: make(chan struct{})}
		return js, m.ctrl.takeOutputsOrNote(context.Background(), js, &attemptCtx{attempt: 1, lease: l}, ann)
	}
	sup.host.SetStreamHandler(CheckpointProtocol, func(st network.Stream) { st.Reset() })
	js, unfetched := take()
	if !unfetched || js.rec.OutputsRefused != "" || js.rec.Outputs != "" {
		t.Fatalf("a supplier that resets: unfetched %v, refused %q, outputs %q; want unfetched and nothing recorded", unfetched, js.rec.OutputsRefused, js.rec.Outputs)
	}
	escape := tarWith(t, "../../evil", []byte("x"))
	esum := sha256.Sum256(escape)
	ann = &pb.Outputs{Attempt: 1, Hash: esum[:], Size: uint64(len(escape))}
	serveOutputs(sup.host, nil, escape)
	js, unfetched = take()
	if unfetched || !strings.Contains(js.rec.OutputsRefused, "escapes") {
		t.Fatalf("a hostile archive: unfetched %v, refused %q; want refused", unfetched, js.rec.OutputsRefused)
	}
}

// outputsLease is a mesh of one supplier and a lease on it, for the
// outputs tests.
func outputsLease(t *testing.T) (*mesh, *market.Lease) {
	t.Helper()
	m := newMesh(t, 1, nil)
	l, err := m.lease(m.sups[0], 99, market.Terms{ReceiptInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return m, l
}

// serveOutputs makes h answer an outputs request with header (nil: the
// archive's true hash and size) and archive.
func serveOutputs(h host.Host, header *pb.CheckpointHeader, archive []byte) {
	h.SetStreamHandler(CheckpointProtocol, func(st network.Stream) {
		defer st.Close()
		var req pb.CheckpointRequest
		if err := p2p.ReadMsg(st, 1024, &req); err != nil || !req.Outputs {
			st.Reset()
			return
		}
		if header == nil {
			sum := sha256.Sum256(archive)
			header = &pb.CheckpointHeader{Hash: sum[:], Size: uint64(len(archive))}
		}
		_ = p2p.WriteMsg(st, header)
		if archive != nil {
			_ = p2p.WriteRaw(st, archive)
		}
	})
}
