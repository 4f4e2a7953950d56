package light

import (
	"context"
	"crypto/rand"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/pb"
)

// serverNet is a DHT server on loopback joined through bootstrap (none:
// it is the first), closed at the test's end.
func serverNet(t *testing.T, bootstrap ...peer.AddrInfo) (*p2p.Network, crypto.PrivKey) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n, err := p2p.New(p2p.Config{Key: k, ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Mode: p2p.ModeServer, Bootstrap: bootstrap, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	if err := n.Bootstrap(t.Context(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	return n, k
}

// TestSearchDirectoryDHTAndCrossCheck: two suppliers put their profiles
// in the DHT through a bootstrap node. While that node serves no
// directory, a search walks the DHT and finds both. Once it serves a
// directory that withholds one of them, a plain search shows what the
// directory lists (one round trip, each profile checked), and a search
// WithCrossCheck walks the DHT too and finds both again.
func TestSearchDirectoryDHTAndCrossCheck(t *testing.T) {
	b, _ := serverNet(t)
	bi := peer.AddrInfo{ID: b.Host.ID(), Addrs: b.Host.Addrs()}
	now := time.Now()
	var profiles []*p2p.Profile
	for i, m := range []string{"h100-sxm", "rtx4090"} {
		s, key := serverNet(t, bi)
		raw, err := p2p.SealProfile(&pb.Profile{
			Seq: 1, IssuedAtMs: now.UnixMilli(), ExpiresAtMs: now.Add(time.Hour).UnixMilli(), Region: "eu-west", Software: "gpumesh/test",
			Gpus: []*pb.GPU{{Model: m, Name: m, Uuid: "GPU-" + string(rune('0'+i)), MemoryBytes: 24 << 30, CcMajor: 8, Simulated: true}},
		}, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.PublishProfile(t.Context(), raw, []string{m}); err != nil {
			t.Fatal(err)
		}
		p, err := p2p.OpenProfile(raw, now)
		if err != nil {
			t.Fatal(err)
		}
		profiles = append(profiles, p)
	}
	ids := func(offers []market.Offer) []string {
		var out []string
		for _, o := range offers {
			if !slices.Contains(out, o.PeerID) {
				out = append(out, o.PeerID)
			}
		}
		slices.Sort(out)
		return out
	}
	want := []string{profiles[0].ID.String(), profiles[1].ID.String()}
	slices.Sort(want)
	search := func(opts ...Option) []string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		c, err := New(ctx, append([]Option{WithBootstrap(bi), WithLogger(quiet())}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		offers, err := c.Search(ctx, market.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		return ids(offers)
	}
	if got := search(); !slices.Equal(got, want) {
		t.Fatalf("search through the DHT (no directory): %v, want %v", got, want)
	}
	dir := p2p.NewDirectory()
	dir.Put(profiles[0])
	p2p.ServeDirectory(b.Host, dir, time.Now)
	if got := search(); !slices.Equal(got, []string{profiles[0].ID.String()}) {
		t.Fatalf("search from the directory: %v, want only the profile it lists, %s", got, profiles[0].ID)
	}
	if got := search(WithCrossCheck()); !slices.Equal(got, want) {
		t.Fatalf("search with the DHT cross-check: %v, want %v", got, want)
	}
}
