package p2p

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/peer"
	yamux "github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/gpumesh/gpumesh/p2p/pb"
)

func publish(t *testing.T, n *Network, p *pb.Profile, models ...string) {
	t.Helper()
	for _, a := range n.Host.Addrs() {
		p.Addrs = append(p.Addrs, a.Bytes())
	}
	sealed, err := SealProfile(p, n.cfg.Key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.PublishProfile(ctx, sealed, models); err != nil {
		t.Fatalf("publish profile: %v", err)
	}
}

func TestAdvertiseAndDiscoverByModel(t *testing.T) {
	nodes := startCluster(t, 6, false)
	now := time.Now()
	// Nodes 1-3 supply h100-sxm, node 4 supplies rtx4090; 0 and 5 supply nothing.
	for i, n := range nodes[1:4] {
		publish(t, n, testProfile(1, now, time.Hour, testGPU("h100-sxm", "GPU-h-"+string(rune('a'+i)))), "h100-sxm")
	}
	publish(t, nodes[4], testProfile(1, now, time.Hour, testGPU("rtx4090", "GPU-r")), "rtx4090")

	// A light client (DHT client mode, no listen address) joins through node 0.
	lc := startNetwork(t, ModeClient, false, []peer.AddrInfo{addrInfo(nodes[0])})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	got := lc.FindSuppliers(ctx, []string{"h100-sxm"})
	want := []peer.ID{nodes[1].Host.ID(), nodes[2].Host.ID(), nodes[3].Host.ID()}
	if ids := sortedIDs(got); !equalIDs(ids, sortIDs(want)) {
		t.Fatalf("h100-sxm suppliers = %v, want %v", ids, want)
	}
	got = lc.FindSuppliers(ctx, []string{"rtx4090", "a10"})
	if ids := sortedIDs(got); !equalIDs(ids, []peer.ID{nodes[4].Host.ID()}) {
		t.Fatalf("rtx4090|a10 suppliers = %v, want [%s]", ids, nodes[4].Host.ID())
	}
	for _, n := range nodes[1:4] {
		p, err := lc.FetchProfile(ctx, n.Host.ID(), 2)
		if err != nil {
			t.Fatalf("fetch profile of %s: %v", n.Host.ID(), err)
		}
		if p.ID != n.Host.ID() || len(p.Gpus) != 1 || p.Gpus[0].Model != "h100-sxm" || p.Region != "eu-west" {
			t.Fatalf("profile = %+v", p.Profile)
		}
		if len(p.Addrs) == 0 || !hasAddr(n.Host.Addrs(), p.Addrs[0]) {
			t.Fatalf("profile addrs %v not among host addrs %v", p.Addrs, n.Host.Addrs())
		}
	}
}

func TestNewerProfileReplacesOlder(t *testing.T) {
	nodes := startCluster(t, 5, false)
	now := time.Now()
	sup := nodes[1]
	publish(t, sup, testProfile(1, now, time.Hour, testGPU("a10", "GPU-1")), "a10")
	publish(t, sup, testProfile(2, now, time.Hour, testGPU("a10", "GPU-1"), testGPU("a10", "GPU-2")), "a10")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, n := range []*Network{nodes[0], nodes[3], nodes[4]} {
		p, err := n.FetchProfile(ctx, sup.Host.ID(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if p.Seq != 2 || len(p.Gpus) != 2 {
			t.Fatalf("node %s sees seq %d with %d gpus, want seq 2 with 2", n.Host.ID(), p.Seq, len(p.Gpus))
		}
	}
	// Publishing an older seq afterwards is refused locally and changes nothing.
	old, _ := SealProfile(testProfile(1, now, time.Hour), sup.cfg.Key)
	if err := sup.PublishProfile(ctx, old, nil); err == nil {
		t.Fatal("publishing an older profile succeeded")
	}
	p, err := nodes[2].FetchProfile(ctx, sup.Host.ID(), 0)
	if err != nil || p.Seq != 2 {
		t.Fatalf("after stale put: seq %v, err %v; want 2", p, err)
	}
}

func TestForgedAndExpiredProfilesAreNotStored(t *testing.T) {
	nodes := startCluster(t, 5, false)
	now := time.Now()
	victim := nodes[1]
	publish(t, victim, testProfile(5, now, time.Hour, testGPU("t4", "GPU-v")), "t4")

	attackerHost, attackerDHT := startAttacker(t, addrInfo(nodes[0]))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	// 1. A profile naming the victim, with a higher seq, signed by the attacker.
	forgedRec := &pb.Profile{Version: RecordVersion, Seq: 99, PeerId: []byte(victim.Host.ID()),
		IssuedAtMs: now.UnixMilli(), ExpiresAtMs: now.Add(time.Hour).UnixMilli(),
		Gpus: []*pb.GPU{testGPU("h200", "GPU-fake")}}
	forged, err := Seal(ProfileType, forgedRec, attackerHost.Peerstore().PrivKey(attackerHost.ID()))
	if err != nil {
		t.Fatal(err)
	}
	_ = attackerDHT.PutValue(ctx, ProfileKey(victim.Host.ID()), forged)

	// 2. An expired profile of the attacker's own.
	expired, err := SealProfile(testProfile(1, now.Add(-3*time.Hour), time.Hour, testGPU("h200", "GPU-x")), attackerHost.Peerstore().PrivKey(attackerHost.ID()))
	if err != nil {
		t.Fatal(err)
	}
	_ = attackerDHT.PutValue(ctx, ProfileKey(attackerHost.ID()), expired)

	// 3. Garbage under a fresh peer's key.
	_ = attackerDHT.PutValue(ctx, ProfileKey(attackerHost.ID())+"x", []byte("garbage"))

	for _, n := range nodes {
		p, err := n.FetchProfile(ctx, victim.Host.ID(), 0)
		if err != nil {
			t.Fatalf("node %s: fetch victim: %v", n.Host.ID(), err)
		}
		if p.Seq != 5 || p.Gpus[0].Model != "t4" {
			t.Fatalf("node %s returns a forged profile: seq %d model %s", n.Host.ID(), p.Seq, p.Gpus[0].Model)
		}
		if _, err := n.FetchProfile(ctx, attackerHost.ID(), 0); err == nil {
			t.Fatalf("node %s returns the attacker's expired profile", n.Host.ID())
		}
	}
}

func TestHeartbeatGossip(t *testing.T) {
	nodes := startCluster(t, 5, true)
	hbs := make([]*Heartbeats, len(nodes))
	for i, n := range nodes {
		h, err := JoinHeartbeats(n.PubSub, n.cfg.Key, nil, quietLogger())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		hbs[i] = h
	}
	waitFor(t, 10*time.Second, "heartbeat mesh", func() bool {
		for _, h := range hbs {
			if len(h.Peers()) == 0 {
				return false
			}
		}
		return true
	})

	// A forger publishes, under its own pubsub identity, a heartbeat signed
	// by another key: every receiver's validator must drop it.
	forger := startNetwork(t, ModeServer, true, []peer.AddrInfo{addrInfo(nodes[0])})
	ftopic, err := forger.PubSub.Join(HeartbeatTopic)
	if err != nil {
		t.Fatal(err)
	}
	victimKey := nodes[4].cfg.Key
	forged, _ := SealHeartbeat(&pb.Heartbeat{Seq: 1, TimeMs: time.Now().UnixMilli(), GpusTotal: 8, GpusFree: 8}, victimKey)
	waitFor(t, 10*time.Second, "forger in mesh", func() bool { return len(ftopic.ListPeers()) > 0 })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ftopic.Publish(ctx, forged); err != nil {
		t.Fatal(err)
	}
	// Heartbeats are periodic: publish every 200 ms, as a node would (only
	// faster), until node 0 has heard from everyone. A single publish can
	// miss a mesh that is still forming.
	pubCtx, stopPub := context.WithCancel(ctx)
	defer stopPub()
	for i, h := range hbs {
		go func() {
			for pubCtx.Err() == nil {
				_ = h.Publish(pubCtx, &pb.Heartbeat{GpusTotal: uint32(i), GpusFree: 0, Software: "gpumesh/test"})
				select {
				case <-pubCtx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
	}
	// Node 0 must hear from all four others, with their own figures, and
	// never the forged heartbeat (which claims 8 GPUs).
	seen := map[peer.ID]uint32{}
	for len(seen) < 4 {
		hb, err := hbs[0].Next(ctx)
		if err != nil {
			t.Fatalf("heard from %d of 4 peers: %v", len(seen), err)
		}
		if hb.GpusTotal == 8 {
			t.Fatalf("forged heartbeat delivered: %+v", hb.Heartbeat)
		}
		seen[hb.ID] = hb.GpusTotal
	}
	for i, n := range nodes[1:] {
		if got := seen[n.Host.ID()]; got != uint32(i+1) {
			t.Fatalf("node %d heartbeat says %d gpus, want %d", i+1, got, i+1)
		}
	}
	// The forger is penalised: its score on the node it sent the forged
	// heartbeat to turns negative, while honest peers stay at or above zero.
	// A forger, like any peer, keeps publishing: one forged message can
	// reach node 0 before the forger is in its view of the topic (under
	// load), so fresh forgeries follow until node 0 has judged one.
	seq := uint64(1)
	waitFor(t, 20*time.Second, "forger penalised", func() bool {
		if nodes[0].PeerScores()[forger.Host.ID()] < 0 {
			return true
		}
		seq++
		f, _ := SealHeartbeat(&pb.Heartbeat{Seq: seq, TimeMs: time.Now().UnixMilli(), GpusTotal: 8, GpusFree: 8}, victimKey)
		_ = ftopic.Publish(ctx, f)
		return false
	})
	for id, s := range nodes[0].PeerScores() {
		if id != forger.Host.ID() && s < 0 {
			t.Fatalf("honest peer %s has score %f", id, s)
		}
	}
}

func TestBootstrapUnreachable(t *testing.T) {
	key := newKey(t)
	id, _ := peer.IDFromPrivateKey(newKey(t))
	addr, _ := ma.NewMultiaddr("/ip4/127.0.0.1/tcp/1")
	n, err := New(Config{Key: key, Mode: ModeClient, Logger: quietLogger(),
		Bootstrap: []peer.AddrInfo{{ID: id, Addrs: []ma.Multiaddr{addr}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	start := time.Now()
	err = n.Bootstrap(context.Background(), 2*time.Second)
	if !errors.Is(err, ErrNoBootstrapPeers) {
		t.Fatalf("err = %v, want ErrNoBootstrapPeers", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("bootstrap took %s, want bounded by its timeout", el)
	}
}

func TestBanRefusesPeer(t *testing.T) {
	a := startNetwork(t, ModeServer, false, nil)
	b := startNetwork(t, ModeServer, false, []peer.AddrInfo{addrInfo(a)})
	if err := a.Ban(b.Host.ID()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b.Host.Peerstore().RemovePeer(a.Host.ID())
	if err := b.Host.Connect(ctx, addrInfo(a)); err == nil {
		// The dial may complete at the transport level; the gater must then
		// have closed it on a's side.
		waitFor(t, 5*time.Second, "banned connection closed", func() bool {
			return len(a.Host.Network().ConnsToPeer(b.Host.ID())) == 0
		})
	}
	if got := a.Banned(); len(got) != 1 || got[0] != b.Host.ID() {
		t.Fatalf("Banned() = %v", got)
	}
}

func sortedIDs(m map[peer.ID]peer.AddrInfo) []peer.ID {
	ids := make([]peer.ID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	return sortIDs(ids)
}

func sortIDs(ids []peer.ID) []peer.ID {
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func equalIDs(a, b []peer.ID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func hasAddr(list []ma.Multiaddr, a ma.Multiaddr) bool {
	for _, x := range list {
		if x.Equal(a) {
			return true
		}
	}
	return false
}

// TestTransports checks that nodes speak both transports of SPEC §4.2:
// TCP secured by TLS (or Noise, with a peer that offers only Noise) and
// multiplexed by yamux, and QUIC v1.
func TestTransports(t *testing.T) {
	for _, tc := range []struct {
		name, listen, transport, security, muxer string
	}{
		{"tcp", "/ip4/127.0.0.1/tcp/0", "tcp", "/tls/1.0.0", "/yamux/1.0.0"},
		{"quic", "/ip4/127.0.0.1/udp/0/quic-v1", "quic-v1", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := func() *Network {
				n, err := New(Config{Key: newKey(t), ListenAddrs: []string{tc.listen}, Logger: quietLogger()})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { n.Close() })
				return n
			}
			a, b := start(), start()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := b.Host.Connect(ctx, addrInfo(a)); err != nil {
				t.Fatal(err)
			}
			conns := b.Host.Network().ConnsToPeer(a.Host.ID())
			if len(conns) == 0 {
				t.Fatal("no connection")
			}
			st := conns[0].ConnState()
			if st.Transport != tc.transport || string(st.Security) != tc.security || string(st.StreamMultiplexer) != tc.muxer {
				t.Fatalf("connection state %+v, want transport %s security %q muxer %q", st, tc.transport, tc.security, tc.muxer)
			}
		})
	}
}

// TestNoiseOnlyPeer: a peer whose libp2p offers only Noise over TCP
// connects to a node, and a node to it, secured by Noise.
func TestNoiseOnlyPeer(t *testing.T) {
	n, err := New(Config{Key: newKey(t), ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	for _, dir := range []string{"peer dials node", "node dials peer"} {
		t.Run(dir, func(t *testing.T) {
			h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics(),
				libp2p.Security(noise.ID, noise.New), libp2p.Muxer(yamux.ID, yamux.DefaultTransport))
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if dir == "peer dials node" {
				err = h.Connect(ctx, addrInfo(n))
			} else {
				err = n.Host.Connect(ctx, peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()})
			}
			if err != nil {
				t.Fatal(err)
			}
			conns := n.Host.Network().ConnsToPeer(h.ID())
			if len(conns) == 0 {
				t.Fatal("no connection")
			}
			if sec := conns[0].ConnState().Security; sec != noise.ID {
				t.Fatalf("security %q, want %q", sec, noise.ID)
			}
		})
	}
}

// TestListenPortInUseIsRefused: a second host asked to listen on a TCP or
// UDP port the first holds fails with an error that says so, instead of
// sharing the port through SO_REUSEPORT.
func TestListenPortInUseIsRefused(t *testing.T) {
	first, err := New(Config{Key: newKey(t), ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	for _, a := range first.Host.Addrs() {
		_, err := New(Config{Key: newKey(t), ListenAddrs: []string{a.String()}, Logger: quietLogger()})
		if err == nil || !strings.Contains(err.Error(), "is another node using this port?") {
			t.Fatalf("second host on %s: err = %v, want the port refused", a, err)
		}
	}
}

// TestPublishAloneSaysSo: a node that knows no peer cannot put its profile
// or announce a model, and its error says that it is alone (so the daemon
// retries when a peer joins, and on its backoff otherwise); a failure of
// any other kind does not.
func TestPublishAloneSaysSo(t *testing.T) {
	n := startNetwork(t, ModeServer, false, nil)
	p := testProfile(1, time.Now(), time.Hour, testGPU("a10", "GPU-1"))
	sealed, err := SealProfile(p, n.cfg.Key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = n.PutProfile(ctx, sealed)
	if err == nil || !IsAlone(err) {
		t.Fatalf("put profile alone: err %v, want one IsAlone reports", err)
	}
	if err := n.Provide(ctx, ProviderKeys([]string{"a10"}), nil); err == nil || !IsAlone(err) {
		t.Fatalf("provide alone: err %v, want one IsAlone reports", err)
	}
	if IsAlone(context.DeadlineExceeded) || IsAlone(nil) {
		t.Fatal("IsAlone reports a timeout or no error as being alone")
	}
}

// TestSoleServerPublishes: the only DHT server of a small network (its
// peers are DHT clients, as nodes behind NAT are) keeps its profile and
// provider records itself, says so by succeeding, and its peers find them.
func TestSoleServerPublishes(t *testing.T) {
	server := startNetwork(t, ModeServer, false, nil)
	client := startNetwork(t, ModeClient, false, []peer.AddrInfo{addrInfo(server)})
	p := testProfile(1, time.Now(), time.Hour, testGPU("a10", "GPU-1"))
	sealed, err := SealProfile(p, server.cfg.Key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := server.PutProfile(ctx, sealed); err != nil {
		t.Fatalf("the sole server's put: %v", err)
	}
	if err := server.Provide(ctx, ProviderKeys([]string{"a10"}), nil); err != nil {
		t.Fatalf("the sole server's provide: %v", err)
	}
	got, err := client.FetchProfile(ctx, server.Host.ID(), 1)
	if err != nil {
		t.Fatalf("the client fetches the sole server's profile: %v", err)
	}
	if got.Seq != 1 {
		t.Fatalf("fetched profile seq %d, want 1", got.Seq)
	}
	if found := client.FindSuppliers(ctx, []string{"a10"}); len(found) != 1 {
		t.Fatalf("the client finds %d a10 suppliers, want the sole server", len(found))
	}
}
