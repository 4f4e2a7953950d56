package p2p

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/p2p/pb"
)

// sealedProfile is key's profile, opened as of now.
func sealedProfile(t testing.TB, key crypto.PrivKey, seq uint64, issued time.Time, ttl time.Duration, models ...string) *Profile {
	t.Helper()
	var gpus []*pb.GPU
	for i, m := range models {
		gpus = append(gpus, testGPU(m, "GPU-"+m+string(rune('a'+i))))
	}
	raw, err := SealProfile(testProfile(seq, issued, ttl, gpus...), key)
	if err != nil {
		t.Fatal(err)
	}
	p, err := OpenProfile(raw, issued)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDirectoryKeepsTheWinningLiveProfile: a newer seq replaces an older
// one and never the reverse; List filters by model, drops what expired,
// and stops at its count and byte limits.
func TestDirectoryKeepsTheWinningLiveProfile(t *testing.T) {
	now := time.Now()
	d := NewDirectory()
	k1, k2, k3 := newKey(t), newKey(t), newKey(t)
	d.Put(sealedProfile(t, k1, 5, now, time.Hour, "h100-sxm"))
	d.Put(sealedProfile(t, k1, 4, now, time.Hour, "rtx4090")) // older: ignored
	d.Put(sealedProfile(t, k2, 1, now, time.Hour, "rtx4090", "a10"))
	d.Put(sealedProfile(t, k3, 1, now.Add(-2*time.Hour), time.Hour+time.Minute, "h100-sxm"))
	if got := d.Len(); got != 3 {
		t.Fatalf("Len = %d, want 3", got)
	}
	models := func(ps []*Profile) (out []string) {
		for _, p := range ps {
			out = append(out, p.Gpus[0].Model)
		}
		slices.Sort(out)
		return out
	}
	if got := models(d.List([]string{"h100-sxm"}, 10, 1<<20, now)); !slices.Equal(got, []string{"h100-sxm"}) {
		t.Fatalf("h100-sxm: %v, want k1's only (k3's expired, k1's older rtx4090 profile lost)", got)
	}
	if d.Len() != 2 {
		t.Fatalf("the expired profile is still held: Len = %d", d.Len())
	}
	if got := d.List(nil, 10, 1<<20, now); len(got) != 2 {
		t.Fatalf("every model: %d profiles, want 2", len(got))
	}
	if got := d.List(nil, 1, 1<<20, now); len(got) != 1 {
		t.Fatalf("limit 1: %d profiles", len(got))
	}
	if got := d.List(nil, 10, 10, now); len(got) != 0 {
		t.Fatalf("10 bytes: %d profiles", len(got))
	}
}

// TestDirectoryProtocol: a light host asks a node's directory over a real
// libp2p connection. What the node holds comes back; a forged envelope
// is left out and counted, and CheckDirectory (what QueryDirectory
// applies) leaves out what a hostile node might send besides: a profile
// of a model not asked for, an expired one, a duplicate, too many.
func TestDirectoryProtocol(t *testing.T) {
	now := time.Now()
	server := startNetwork(t, ModeServer, false, nil)
	client := startNetwork(t, ModeClient, false, []peer.AddrInfo{addrInfo(server)})
	if err := client.Bootstrap(t.Context(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	good := sealedProfile(t, newKey(t), 1, now, time.Hour, "h100-sxm")
	other := sealedProfile(t, newKey(t), 1, now, time.Hour, "rtx4090")
	expired := sealedProfile(t, newKey(t), 1, now.Add(-time.Hour), time.Hour-time.Second, "h100-sxm")
	forged := sealedProfile(t, newKey(t), 1, now, time.Hour, "h100-sxm")
	forged.Raw = slices.Clone(forged.Raw)
	forged.Raw[len(forged.Raw)-1] ^= 1 // the signature no longer checks

	d := NewDirectory()
	for _, p := range []*Profile{good, other, forged} {
		d.Put(p)
	}
	ServeDirectory(server.Host, d, time.Now)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got, rejected, err := QueryDirectory(ctx, client.Host, server.Host.ID(), nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || rejected != 1 {
		t.Fatalf("every model: %d profiles, %d rejected; want good and other, the forged one rejected", len(got), rejected)
	}
	got, rejected, err = QueryDirectory(ctx, client.Host, server.Host.ID(), []string{"h100-sxm"}, time.Now())
	if err != nil || len(got) != 1 || got[0].ID != good.ID || rejected != 1 {
		t.Fatalf("h100-sxm: %d profiles, %d rejected, err %v; want the good one only", len(got), rejected, err)
	}

	// What a server cannot be trusted to filter, the asker checks.
	resp := &pb.DirectoryResponse{Profiles: [][]byte{good.Raw, other.Raw, expired.Raw, forged.Raw, good.Raw}}
	kept, left, err := CheckDirectory(resp, []string{"h100-sxm"}, time.Now())
	if err != nil || len(kept) != 1 || kept[0].ID != good.ID || left != 4 {
		t.Fatalf("checked answer: %d kept, %d left out, err %v; want the good one kept once", len(kept), left, err)
	}
	resp.Profiles = make([][]byte, MaxDirectoryProfiles+1)
	if _, _, err := CheckDirectory(resp, nil, time.Now()); !errors.Is(err, ErrMalformed) {
		t.Fatalf("an oversized answer: %v, want ErrMalformed", err)
	}
}

// TestDirectoryOneAnswerPerPeer: a peer holding a directory stream open
// without asking gets no second answer meanwhile, and takes no slot from
// another peer.
func TestDirectoryOneAnswerPerPeer(t *testing.T) {
	server := startNetwork(t, ModeServer, false, nil)
	ServeDirectory(server.Host, NewDirectory(), time.Now)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	greedy := startNetwork(t, ModeClient, false, []peer.AddrInfo{addrInfo(server)})
	other := startNetwork(t, ModeClient, false, []peer.AddrInfo{addrInfo(server)})
	for _, c := range []*Network{greedy, other} {
		if err := c.Bootstrap(ctx, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	held, err := greedy.Host.NewStream(ctx, server.Host.ID(), DirectoryProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Reset()
	// The server learns of the stream once its first bytes arrive.
	if _, err := held.Write([]byte{0x80}); err != nil {
		t.Fatal(err)
	}
	// A condition, not a deadline: on a loaded machine the held stream's
	// negotiation can take seconds to reach the server's handler.
	waitFor(t, 45*time.Second, "the held stream to refuse a second answer", func() bool {
		_, _, err := QueryDirectory(ctx, greedy.Host, server.Host.ID(), nil, time.Now())
		return err != nil
	})
	if _, _, err := QueryDirectory(ctx, other.Host, server.Host.ID(), nil, time.Now()); err != nil {
		t.Fatalf("another peer's query while the first holds a stream: %v", err)
	}
}

// TestDirectoryProfilesOfPeers: asked for named peers, a server answers
// with their live profiles only (none it does not hold); the asker leaves
// out, and counts, a profile of a peer it did not ask for (an older
// server ignores the peer list and answers with every profile it keeps),
// and refuses a request naming more than MaxDirectoryPeers peers.
func TestDirectoryProfilesOfPeers(t *testing.T) {
	now := time.Now()
	server := startNetwork(t, ModeServer, false, nil)
	client := startNetwork(t, ModeClient, false, []peer.AddrInfo{addrInfo(server)})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := client.Bootstrap(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	a := sealedProfile(t, newKey(t), 3, now, time.Hour, "h100-sxm")
	b := sealedProfile(t, newKey(t), 1, now, time.Hour, "rtx4090")
	c := sealedProfile(t, newKey(t), 1, now, time.Hour, "l40s")
	expired := sealedProfile(t, newKey(t), 1, now.Add(-time.Hour), time.Hour-time.Second, "h100-sxm")
	unknown, err := peer.IDFromPrivateKey(newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	d := NewDirectory()
	for _, p := range []*Profile{a, b, c, expired} {
		d.Put(p)
	}
	ServeDirectory(server.Host, d, time.Now)

	got, rejected, err := QueryProfiles(ctx, client.Host, server.Host.ID(), []peer.ID{c.ID, a.ID, unknown, expired.ID}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ids := func(ps []*Profile) (out []peer.ID) {
		for _, p := range ps {
			out = append(out, p.ID)
		}
		return out
	}
	want := []peer.ID{a.ID, c.ID}
	slices.Sort(want)
	if !slices.Equal(ids(got), want) || rejected != 0 || got[slices.Index(ids(got), a.ID)].Seq != 3 {
		t.Fatalf("profiles of a, c, an unknown and an expired peer: %v (%d rejected), want a's and c's", ids(got), rejected)
	}

	// An older server: every profile it keeps, whatever was asked.
	old := startNetwork(t, ModeServer, false, nil)
	Serve(old.Host, DirectoryProtocol, func(s network.Stream) error {
		var req pb.DirectoryRequest
		if err := ReadMsg(s, maxDirectoryRequest, &req); err != nil {
			return err
		}
		return WriteMsg(s, &pb.DirectoryResponse{Profiles: [][]byte{a.Raw, b.Raw, c.Raw}})
	})
	client.Host.Peerstore().AddAddrs(old.Host.ID(), old.Host.Addrs(), time.Hour)
	got, rejected, err = QueryProfiles(ctx, client.Host, old.Host.ID(), []peer.ID{b.ID}, time.Now())
	if err != nil || !slices.Equal(ids(got), []peer.ID{b.ID}) || rejected != 2 {
		t.Fatalf("an answer with profiles not asked for: %v (%d rejected), err %v; want b's, 2 left out", ids(got), rejected, err)
	}

	many := make([]peer.ID, MaxDirectoryPeers+1)
	if _, _, err := QueryProfiles(ctx, client.Host, server.Host.ID(), many, time.Now()); err == nil {
		t.Fatal("a query naming more than MaxDirectoryPeers peers was sent")
	}
	if _, err := directoryPeers([][]byte{[]byte("not a peer ID")}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a request naming a malformed peer ID: %v, want ErrMalformed", err)
	}
	if _, err := directoryPeers(make([][]byte, MaxDirectoryPeers+1)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a request naming too many peers: %v, want ErrMalformed", err)
	}
}
