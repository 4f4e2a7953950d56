package job

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"os"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/node/job/pb"
)

func tarWith(t testing.TB, name string, data []byte) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write(data)
	tw.Close()
	return b.Bytes()
}

func tarLink(t testing.TB) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: "l", Linkname: "/etc/shadow", Typeflag: tar.TypeSymlink}); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	return b.Bytes()
}

// FuzzDecodeSpec: any bytes decode to a valid spec or a clear error, and
// a decoded spec re-encodes to the same bytes.
func FuzzDecodeSpec(f *testing.F) {
	s, _ := EncodeSpec(validSpec())
	f.Add(s.Raw)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0xff})
	f.Fuzz(func(t *testing.T, raw []byte) {
		spec, err := DecodeSpec(raw)
		if err != nil {
			return
		}
		again, err := EncodeSpec(spec.JobSpec)
		if err != nil || !bytes.Equal(again.Raw, raw) {
			t.Fatalf("decoded spec does not re-encode to itself: %v", err)
		}
	})
}

// FuzzUnpackCheckpoint: no archive writes outside its folder or panics.
func FuzzUnpackCheckpoint(f *testing.F) {
	f.Add(tarWith(f, "step", []byte("3")))
	f.Add(tarWith(f, "../x", []byte("3")))
	f.Add(tarLink(f))
	twice := append(tarWith(f, "a", []byte("1"))[:1024], tarWith(f, "a/b", []byte("2"))...)
	f.Add(twice)
	f.Fuzz(func(t *testing.T, archive []byte) {
		root := t.TempDir()
		dir := root + "/in"
		_ = UnpackCheckpoint(archive, sha256.Sum256(archive), dir)
		// Nothing may appear beside the folder.
		entries, _ := readDirNames(root)
		for _, e := range entries {
			if e != "in" {
				t.Fatalf("archive wrote %q outside its folder", e)
			}
		}
	})
}

// FuzzSessionFrames: the session's messages decode or fail cleanly; a
// Hello's announced sizes go through the supplier's checks before any
// body is read, and a body goes through readBody and DecodeSpec.
func FuzzSessionFrames(f *testing.F) {
	s, _ := EncodeSpec(validSpec())
	hello, _ := proto.Marshal(&pb.Hello{Lease: []byte{1}, Attempt: 1, SpecSize: uint32(len(s.Raw))})
	huge, _ := proto.Marshal(&pb.Hello{Lease: []byte{1}, Attempt: 1, SpecSize: MaxSpecSize + 1, CheckpointSize: 1 << 40})
	sf, _ := proto.Marshal(&pb.ServerFrame{Body: &pb.ServerFrame_Log{Log: &pb.Log{Attempt: 1, Offset: 9, Data: []byte("hi")}}})
	cf, _ := proto.Marshal(&pb.ClientFrame{Body: &pb.ClientFrame_Stop{Stop: "why"}})
	w, _ := proto.Marshal(&pb.Welcome{SendBody: true})
	of, _ := proto.Marshal(&pb.ServerFrame{Body: &pb.ServerFrame_Outputs{Outputs: &pb.Outputs{Attempt: 1, Hash: make([]byte, 32), Size: 9}}})
	for _, b := range [][]byte{hello, huge, sf, cf, w, of, {}} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var h pb.Hello
		if proto.Unmarshal(raw, &h) == nil && checkStartSizes(&h) == "" {
			// An admitted size is one the supplier may allocate; the body
			// here is the fuzz input itself, as a peer would send it.
			if h.SpecSize > MaxSpecSize || h.CheckpointSize > MaxCheckpointSize {
				t.Fatalf("sizes %d + %d admitted", h.SpecSize, h.CheckpointSize)
			}
			if int(h.SpecSize)+int(h.CheckpointSize) > len(raw) {
				return // it could not arrive: keep each run small
			}
			if spec, _, err := readBody(bytes.NewReader(raw), &h); err == nil {
				_, _ = DecodeSpec(spec)
			}
		}
		var wel pb.Welcome
		_ = proto.Unmarshal(raw, &wel)
		var s pb.ServerFrame
		_ = proto.Unmarshal(raw, &s)
		var c pb.ClientFrame
		_ = proto.Unmarshal(raw, &c)
		var req pb.CheckpointRequest
		_ = proto.Unmarshal(raw, &req)
	})
}

func readDirNames(dir string) ([]string, error) {
	es, err := os.ReadDir(dir)
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out, err
}

// FuzzUnpackOutputs: an outputs archive from a supplier either lands
// whole in its folder or leaves nothing at all, and never writes beside
// it.
func FuzzUnpackOutputs(f *testing.F) {
	f.Add(tarWith(f, "out.txt", []byte("3 1\n")))
	f.Add(tarWith(f, "../x", []byte("3")))
	f.Add(tarLink(f))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, archive []byte) {
		root := t.TempDir()
		err := unpackFresh(archive, sha256.Sum256(archive), root+"/outputs")
		entries, _ := readDirNames(root)
		switch {
		case err != nil && len(entries) != 0:
			t.Fatalf("a refused archive left %q", entries)
		case err == nil && (len(entries) != 1 || entries[0] != "outputs"):
			t.Fatalf("archive wrote %q beside its folder", entries)
		}
	})
}
