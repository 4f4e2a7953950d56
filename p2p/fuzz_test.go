package p2p

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/gpumesh/gpumesh/p2p/pb"
)

// fuzzNow is a fixed clock, so seeds stay valid whenever the fuzzer runs.
var fuzzNow = time.UnixMilli(1_800_000_000_000)

func FuzzOpenProfile(f *testing.F) {
	key := newKey(f)
	good, _ := SealProfile(testProfile(3, fuzzNow, time.Hour, testGPU("h100-sxm", "GPU-1"), testGPU("rtx4090", "GPU-2")), key)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte{})
	f.Add([]byte("\x0a\x24\x08\x01\x12\x20"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := OpenProfile(data, fuzzNow)
		if err != nil {
			if p != nil {
				t.Fatal("profile returned with an error")
			}
			return
		}
		// Whatever is accepted satisfies every documented invariant.
		if len(data) > MaxProfileSize || p.Seq == 0 || len(p.Gpus) > MaxGPUsPerProfile || !fuzzNow.Before(p.Expires()) {
			t.Fatalf("accepted an invalid profile: %+v", p.Profile)
		}
		if !bytes.Equal(p.Raw, data) || p.ID.Validate() != nil {
			t.Fatal("accepted profile does not carry its raw bytes and signer")
		}
		// The validator agrees with OpenProfile.
		if err := (ProfileValidator{Now: func() time.Time { return fuzzNow }}).Validate(ProfileKey(p.ID), data); err != nil {
			t.Fatalf("OpenProfile accepted what the validator refuses: %v", err)
		}
	})
}

func FuzzOpenHeartbeat(f *testing.F) {
	key := newKey(f)
	good, _ := SealHeartbeat(&pb.Heartbeat{Seq: 9, TimeMs: fuzzNow.UnixMilli(), GpusTotal: 4, GpusFree: 1, Software: "gpumesh/x"}, key)
	f.Add(good)
	f.Add(good[:10])
	f.Add(bytes.Repeat([]byte{0xff}, 64))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := OpenHeartbeat(data, fuzzNow)
		if err != nil {
			return
		}
		if len(data) > MaxHeartbeatSize || h.Seq == 0 || h.GpusFree > h.GpusTotal {
			t.Fatalf("accepted an invalid heartbeat: %+v", h.Heartbeat)
		}
		v := NewHeartbeatValidator(func() time.Time { return fuzzNow }, quietLogger())
		if _, err := v.Check(h.ID, data); err != nil {
			t.Fatalf("first delivery refused: %v", err)
		}
		if _, err := v.Check(h.ID, data); err == nil {
			t.Fatal("replay accepted")
		}
	})
}

func FuzzPeerFromProfileKey(f *testing.F) {
	f.Add(ProfileKey(mustID(f, newKey(f))))
	f.Add("/gpumesh-profile/")
	f.Add("/pk/abc")
	f.Fuzz(func(t *testing.T, key string) {
		id, err := PeerFromProfileKey(key)
		if err != nil {
			return
		}
		if ProfileKey(id) != key {
			t.Fatalf("key %q parsed to %s which derives %q", key, id, ProfileKey(id))
		}
	})
}

// FuzzCheckDirectory feeds arbitrary bytes as a directory answer: it
// never panics, and whatever it keeps is a valid profile of a model asked
// for, each peer once.
// FuzzDirectoryRequest: whatever a request carries, the server either
// refuses its peer list as malformed or answers only with profiles it
// holds of peers the request names.
func FuzzDirectoryRequest(f *testing.F) {
	key := newKey(f)
	good, _ := SealProfile(testProfile(3, fuzzNow, time.Hour, testGPU("h100-sxm", "GPU-1")), key)
	held, _ := OpenProfile(good, fuzzNow)
	d := NewDirectory()
	d.Put(held)
	seed, _ := proto.Marshal(&pb.DirectoryRequest{Peers: [][]byte{[]byte(held.ID), []byte("junk")}})
	f.Add(seed)
	ok, _ := proto.Marshal(&pb.DirectoryRequest{Peers: [][]byte{[]byte(held.ID)}, Models: []string{"h100-sxm"}})
	f.Add(ok)
	f.Fuzz(func(t *testing.T, data []byte) {
		var req pb.DirectoryRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		ids, err := directoryPeers(req.Peers)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("refused without ErrMalformed: %v", err)
			}
			return
		}
		if len(ids) != len(req.Peers) || len(ids) > MaxDirectoryPeers {
			t.Fatalf("%d peers decoded from %d", len(ids), len(req.Peers))
		}
		for _, p := range d.Of(ids, req.Models, MaxDirectoryReply, fuzzNow) {
			if !slices.Contains(ids, p.ID) {
				t.Fatalf("answered with %s, not asked for", p.ID)
			}
		}
	})
}

func FuzzCheckDirectory(f *testing.F) {
	key := newKey(f)
	good, _ := SealProfile(testProfile(3, fuzzNow, time.Hour, testGPU("h100-sxm", "GPU-1")), key)
	seed, _ := proto.Marshal(&pb.DirectoryResponse{Profiles: [][]byte{good, good, []byte("junk")}})
	f.Add(seed)
	f.Add([]byte{0x0a, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		var resp pb.DirectoryResponse
		if proto.Unmarshal(data, &resp) != nil {
			return
		}
		kept, left, err := CheckDirectory(&resp, []string{"h100-sxm"}, fuzzNow)
		if err != nil {
			return
		}
		if len(kept)+left != len(resp.Profiles) {
			t.Fatalf("%d kept + %d left out != %d listed", len(kept), left, len(resp.Profiles))
		}
		seen := map[peer.ID]bool{}
		for _, p := range kept {
			if _, err := OpenProfile(p.Raw, fuzzNow); err != nil || !HasModel(p, []string{"h100-sxm"}) || seen[p.ID] {
				t.Fatalf("kept %s: err %v, models %v, twice %v", p.ID, err, p.Gpus, seen[p.ID])
			}
			seen[p.ID] = true
		}
	})
}
