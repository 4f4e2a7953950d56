package p2p

import (
	"bytes"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/p2p/pb"
)

func TestOpenProfile(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	key, other := newKey(t), newKey(t)
	id, _ := peer.IDFromPrivateKey(key)
	seal := func(p *pb.Profile, k crypto.PrivKey) []byte {
		t.Helper()
		b, err := SealProfile(p, k)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := testProfile(7, now, time.Hour, testGPU("h100-sxm", "GPU-1"), testGPU("h100-sxm", "GPU-2"))
	// A record naming id but signed by another key: built by hand, since
	// SealProfile always names the signer.
	forged := func() []byte {
		p := &pb.Profile{Seq: 1, Version: RecordVersion, PeerId: []byte(id), IssuedAtMs: now.UnixMilli(), ExpiresAtMs: now.Add(time.Hour).UnixMilli()}
		b, err := Seal(ProfileType, p, other)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}()
	tampered := seal(good, key)
	tampered[len(tampered)-70] ^= 1 // inside the payload, before the signature

	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"good", seal(good, key), nil},
		{"too large", make([]byte, MaxProfileSize+1), ErrTooLarge},
		{"garbage", []byte("not an envelope"), ErrBadEnvelope},
		{"empty", nil, ErrBadEnvelope},
		{"tampered", tampered, ErrBadEnvelope},
		{"forged signer", forged, ErrSignerMismatch},
		{"expired", seal(testProfile(7, now.Add(-2*time.Hour), time.Hour), key), ErrExpired},
		{"future", seal(testProfile(7, now.Add(time.Hour), time.Hour), key), ErrFutureDated},
		{"seq zero", seal(testProfile(0, now, time.Hour), key), ErrMalformed},
		{"lifetime too long", seal(testProfile(1, now, 49*time.Hour), key), ErrMalformed},
		{"bad slug", seal(testProfile(1, now, time.Hour, testGPU("H100 SXM", "GPU-1")), key), ErrMalformed},
		{"repeated uuid", seal(testProfile(1, now, time.Hour, testGPU("h100-sxm", "GPU-1"), testGPU("h100-sxm", "GPU-1")), key), ErrMalformed},
		{"long region", seal(&pb.Profile{Seq: 1, IssuedAtMs: now.UnixMilli(), ExpiresAtMs: now.Add(time.Hour).UnixMilli(), Region: strings.Repeat("x", MaxTextField+1)}, key), ErrMalformed},
		{"pcie generation out of range", seal(testProfile(1, now, time.Hour, withGPU(testGPU("h100-sxm", "GPU-1"), func(g *pb.GPU) { g.PcieGen = 17 })), key), ErrMalformed},
		{"too many nvlinks", seal(testProfile(1, now, time.Hour, withGPU(testGPU("h100-sxm", "GPU-1"), func(g *pb.GPU) { n := uint32(MaxNVLinks + 1); g.NvlinkLinks = &n })), key), ErrMalformed},
		{"long cuda version", seal(testProfile(1, now, time.Hour, withGPU(testGPU("h100-sxm", "GPU-1"), func(g *pb.GPU) { g.CudaVersion = strings.Repeat("1", 33) })), key), ErrMalformed},
		{"unknown reach", seal(&pb.Profile{Seq: 1, IssuedAtMs: now.UnixMilli(), ExpiresAtMs: now.Add(time.Hour).UnixMilli(), Reach: "behind-nat"}, key), ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := OpenProfile(tt.data, now)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("OpenProfile: %v", err)
				}
				if p.ID != id || p.Seq != 7 || len(p.Gpus) != 2 {
					t.Fatalf("got id=%s seq=%d gpus=%d, want %s 7 2", p.ID, p.Seq, len(p.Gpus), id)
				}
				if p.ReachOf() != ReachUnknown {
					t.Fatalf("a profile stating no reach reads as %q, want unknown", p.ReachOf())
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestHeartbeatEnvelopeChecks(t *testing.T) {
	now := time.Now()
	key := newKey(t)
	// A heartbeat that declares the profile payload type.
	wrongType := RecordType{HeartbeatDomain, string(profilePayloadType), MaxHeartbeatSize}
	hb := &pb.Heartbeat{Version: RecordVersion, Seq: 1, TimeMs: now.UnixMilli(), PeerId: []byte(mustID(t, key))}
	b, err := Seal(wrongType, hb, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenHeartbeat(b, now); !errors.Is(err, ErrBadEnvelope) {
		t.Fatalf("wrong payload type: err = %v, want ErrBadEnvelope", err)
	}
	// A valid heartbeat signed with a non-Ed25519 key is refused.
	sk, _, err := crypto.GenerateSecp256k1Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err = SealHeartbeat(&pb.Heartbeat{Seq: 1, TimeMs: now.UnixMilli()}, sk)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenHeartbeat(b, now); !errors.Is(err, ErrBadEnvelope) {
		t.Fatalf("secp256k1 signer: err = %v, want ErrBadEnvelope", err)
	}
}

func TestSealProfileRejectsOversize(t *testing.T) {
	now := time.Now()
	var gpus []*pb.GPU
	for i := range 200 {
		g := testGPU("h100-sxm", strings.Repeat("u", 100)+string(rune('a'+i%26))+strings.Repeat("v", i))
		gpus = append(gpus, g)
	}
	_, err := SealProfile(testProfile(1, now, time.Hour, gpus...), newKey(t))
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
}

func TestProfileValidator(t *testing.T) {
	now := time.Now()
	v := ProfileValidator{Now: func() time.Time { return now }}
	key := newKey(t)
	id, _ := peer.IDFromPrivateKey(key)
	older, _ := SealProfile(testProfile(1, now, time.Hour), key)
	newer, _ := SealProfile(testProfile(2, now, time.Hour), key)
	expired, _ := SealProfile(testProfile(3, now.Add(-3*time.Hour), time.Hour), key)

	if err := v.Validate(ProfileKey(id), older); err != nil {
		t.Fatalf("valid record refused: %v", err)
	}
	otherID, _ := peer.IDFromPrivateKey(newKey(t))
	if err := v.Validate(ProfileKey(otherID), older); !errors.Is(err, ErrSignerMismatch) {
		t.Fatalf("record under another peer's key: err = %v, want ErrSignerMismatch", err)
	}
	if err := v.Validate("/gpumesh-profile/notapeer", older); !errors.Is(err, ErrBadKey) {
		t.Fatalf("bad key: err = %v, want ErrBadKey", err)
	}
	if err := v.Validate("/pk/"+string(id), older); !errors.Is(err, ErrBadKey) {
		t.Fatalf("other namespace: err = %v, want ErrBadKey", err)
	}
	i, err := v.Select(ProfileKey(id), [][]byte{older, expired, newer, []byte("junk")})
	if err != nil || i != 2 {
		t.Fatalf("Select = %d, %v; want 2 (highest valid seq)", i, err)
	}
	if _, err := v.Select(ProfileKey(id), [][]byte{expired, []byte("junk")}); err == nil {
		t.Fatal("Select with no valid value succeeded")
	}
}

func TestOpenHeartbeatAndReplay(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	key := newKey(t)
	id, _ := peer.IDFromPrivateKey(key)
	hb := func(seq uint64, at time.Time, free, total uint32) []byte {
		b, err := SealHeartbeat(&pb.Heartbeat{Seq: seq, TimeMs: at.UnixMilli(), GpusFree: free, GpusTotal: total, Software: "gpumesh/test"}, key)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	v := NewHeartbeatValidator(clock, quietLogger())
	if _, err := v.Check(id, hb(10, now, 1, 2)); err != nil {
		t.Fatalf("good heartbeat refused: %v", err)
	}
	cases := []struct {
		name   string
		author peer.ID
		data   []byte
		want   error
	}{
		{"replayed seq", id, hb(10, now, 1, 2), ErrStale},
		{"older seq", id, hb(9, now, 1, 2), ErrStale},
		{"expired", id, hb(11, now.Add(-MaxHeartbeatAge-time.Second), 1, 2), ErrExpired},
		{"future", id, hb(12, now.Add(ClockSkew+time.Second), 1, 2), ErrFutureDated},
		{"more free than total", id, hb(13, now, 3, 2), ErrMalformed},
		{"oversized", id, bytes.Repeat([]byte{1}, MaxHeartbeatSize+1), ErrTooLarge},
		{"garbage", id, []byte{0x0a, 0xff}, ErrBadEnvelope},
		{"relayed under another author", peer.ID("someone-else"), hb(14, now, 1, 2), ErrSignerMismatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := v.Check(c.author, c.data); !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
	if _, err := v.Check(id, hb(20, now, 0, 2)); err != nil {
		t.Fatalf("next heartbeat refused: %v", err)
	}
}

func TestProfileKeyRoundTrip(t *testing.T) {
	id, _ := peer.IDFromPrivateKey(newKey(t))
	got, err := PeerFromProfileKey(ProfileKey(id))
	if err != nil || got != id {
		t.Fatalf("PeerFromProfileKey(ProfileKey(%s)) = %s, %v", id, got, err)
	}
	if ModelCID("h100-sxm").Equals(ModelCID("h100-pcie")) {
		t.Fatal("distinct models share a CID")
	}
	// Pinned so that the derivation documented in docs/PROTOCOL.md cannot drift.
	if got, want := ModelCID("h100-sxm").String(), "bafkreibczwxwr33fxhkuj4wsknh44rajfllvrrksgrrn2rdwzwoggsjziu"; got != want {
		t.Fatalf("ModelCID(h100-sxm) = %s, want %s", got, want)
	}
	if got, want := SupplierCID().String(), "bafkreie75dj5gi26pwswiusg25hvy3jzul4ri4igc2yo4y5lm4t662qk4a"; got != want {
		t.Fatalf("SupplierCID = %s, want %s", got, want)
	}
	if SupplierCID().Equals(ModelCID("supplier")) {
		t.Fatal("the supplier key is a model key")
	}
}

// TestOpenRefusesNonCanonicalEnvelopes: the signature covers only the
// payload, so bytes added to the envelope around it (an unknown field)
// must not make a second, differently-hashed copy of the same record.
func TestOpenRefusesNonCanonicalEnvelopes(t *testing.T) {
	now := time.Now()
	raw, err := SealHeartbeat(&pb.Heartbeat{Seq: 1, TimeMs: now.UnixMilli(), ProfileSeq: 1}, newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenHeartbeat(raw, now); err != nil {
		t.Fatalf("canonical envelope: %v", err)
	}
	padded := append(append([]byte(nil), raw...), 0x78, 0x00) // field 15 = 0
	if _, err := OpenHeartbeat(padded, now); !errors.Is(err, ErrBadEnvelope) {
		t.Fatalf("re-wrapped envelope: err = %v, want ErrBadEnvelope", err)
	}
}

// withGPU is g changed by f.
func withGPU(g *pb.GPU, f func(*pb.GPU)) *pb.GPU {
	f(g)
	return g
}
