package p2p

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/p2p/pb"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newKey(t testing.TB) crypto.PrivKey {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// startNetwork starts a real libp2p host on loopback (TCP, random port).
func startNetwork(t testing.TB, mode Mode, pubsub bool, bootstrap []peer.AddrInfo) *Network {
	t.Helper()
	return startNetworkWith(t, Config{Key: newKey(t), Mode: mode, PubSub: pubsub, Bootstrap: bootstrap})
}

// startNetworkWith starts cfg's network (quiet; a server listens on
// loopback TCP, random port), closed when the test ends, and bootstraps it.
func startNetworkWith(t testing.TB, cfg Config) *Network {
	t.Helper()
	cfg.Logger = quietLogger()
	if cfg.Mode == ModeServer {
		cfg.ListenAddrs = []string{"/ip4/127.0.0.1/tcp/0"}
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatalf("start network: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Bootstrap(ctx, 5*time.Second); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	return n
}

func addrInfo(n *Network) peer.AddrInfo {
	return peer.AddrInfo{ID: n.Host.ID(), Addrs: n.Host.Addrs()}
}

// startCluster starts count server nodes, all bootstrapped from the first.
func startCluster(t testing.TB, count int, pubsub bool) []*Network {
	t.Helper()
	first := startNetwork(t, ModeServer, pubsub, nil)
	nodes := []*Network{first}
	for i := 1; i < count; i++ {
		nodes = append(nodes, startNetwork(t, ModeServer, pubsub, []peer.AddrInfo{addrInfo(first)}))
	}
	// Let every routing table learn the others before records are put.
	waitFor(t, 10*time.Second, "routing tables filled", func() bool {
		for _, n := range nodes {
			if n.DHT.RoutingTable().Size() < count-1 {
				<-n.DHT.RefreshRoutingTable()
				return false
			}
		}
		return true
	})
	return nodes
}

func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func testProfile(seq uint64, issued time.Time, ttl time.Duration, gpus ...*pb.GPU) *pb.Profile {
	return &pb.Profile{
		Seq:         seq,
		IssuedAtMs:  issued.UnixMilli(),
		ExpiresAtMs: issued.Add(ttl).UnixMilli(),
		Region:      "eu-west",
		Software:    "gpumesh/test",
		Gpus:        gpus,
	}
}

func testGPU(model, uuid string) *pb.GPU {
	return &pb.GPU{Model: model, Name: "test " + model, Uuid: uuid, MemoryBytes: 80 << 30, CcMajor: 9, Simulated: true}
}

// permissive accepts any value: an attacker's DHT uses it so that it sends
// forged records to its peers instead of refusing them locally.
type permissive struct{}

func (permissive) Validate(string, []byte) error        { return nil }
func (permissive) Select(string, [][]byte) (int, error) { return 0, nil }

// startAttacker starts a raw libp2p host and DHT that speak gpumesh's DHT
// protocol but validate nothing.
func startAttacker(t testing.TB, bootstrap peer.AddrInfo) (host.Host, *dht.IpfsDHT) {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics())
	if err != nil {
		t.Fatal(err)
	}
	d, err := dht.New(h, dht.Mode(dht.ModeServer), dht.ProtocolPrefix(ProtocolPrefix),
		dht.NamespacedValidator(ProfileNamespace, permissive{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); h.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.Connect(ctx, bootstrap); err != nil {
		t.Fatal(err)
	}
	<-d.RefreshRoutingTable()
	return h, d
}

func mustID(t testing.TB, k crypto.PrivKey) peer.ID {
	t.Helper()
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
