package sim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	bconnmgr "github.com/libp2p/go-libp2p/p2p/net/connmgr"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
)

// A node's connection manager keeps what a gpumesh node's does (the
// defaults of p2p.Config): trimmed to connLow once over connHigh.
const (
	connLow, connHigh = 32, 96
	connGrace         = 30 * time.Second
)

// Network is the network ID of a simulation's nodes: a simulation never
// mixes with the mainnet or a testnet, whatever it is connected to.
const Network = "sim"

// errGone is the dial error to a node that has left.
var errGone = errors.New("peer has left the simulation")

// latency is the one-way delay between two regions: a few milliseconds
// within one, tens to a hundred between continents.
func latency(a, b string) time.Duration {
	if a == b {
		return 5 * time.Millisecond
	}
	switch {
	case a == "ap-south" || b == "ap-south":
		if a == "us-east" || b == "us-east" {
			return 100 * time.Millisecond
		}
		return 70 * time.Millisecond
	default:
		return 40 * time.Millisecond
	}
}

// fabric is the simulated internet: a mocknet in which any two nodes can
// connect, linked lazily on the first dial (a mocknet link per pair of
// 1000 nodes would be half a million), with the latency of their regions.
type fabric struct {
	mn     mocknet.Mocknet
	mu     sync.Mutex
	region map[peer.ID]string
	gone   map[peer.ID]bool
}

func newFabric() *fabric {
	return &fabric{mn: mocknet.New(), region: map[peer.ID]string{}, gone: map[peer.ID]bool{}}
}

// addHost adds node index's host, in region, with key.
func (f *fabric) addHost(key crypto.PrivKey, index int, region string) (*simHost, error) {
	// An IPv4 address of its own: GossipSub counts peers per IPv6 /64
	// toward its IP colocation penalty, and mocknet's default addresses
	// all share one.
	addr, err := ma.NewMultiaddr(fmt.Sprintf("/ip4/10.%d.%d.%d/tcp/4242", index>>16&255, index>>8&255, index&255))
	if err != nil {
		return nil, err
	}
	h, err := f.mn.AddPeer(key, addr)
	if err != nil {
		return nil, fmt.Errorf("mocknet host: %w", err)
	}
	f.mu.Lock()
	f.region[h.ID()] = region
	f.mu.Unlock()
	return newSimHost(f, h)
}

// link makes sure a and b can connect; it fails when either has left.
func (f *fabric) link(a, b peer.ID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone[a] || f.gone[b] {
		return fmt.Errorf("dial %s: %w", b, errGone)
	}
	if len(f.mn.LinksBetweenPeers(a, b)) > 0 {
		return nil
	}
	l, err := f.mn.LinkPeers(a, b)
	if err != nil {
		return fmt.Errorf("link %s and %s: %w", a, b, err)
	}
	l.SetOptions(mocknet.LinkOptions{Latency: latency(f.region[a], f.region[b])})
	return nil
}

// leave marks p gone: nobody can dial it from now on.
func (f *fabric) leave(p peer.ID) {
	f.mu.Lock()
	f.gone[p] = true
	f.mu.Unlock()
}

func (f *fabric) isGone(p peer.ID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gone[p]
}

func (f *fabric) Close() error { return f.mn.Close() }

// simHost is a node's mocknet host as its node sees it: dials link the
// pair first, every stream opened or accepted is counted, and a real
// connection manager (with a gpumesh node's watermarks) trims
// connections and keeps the peers pubsub tags.
type simHost struct {
	host.Host
	fab     *fabric
	cm      *bconnmgr.BasicConnMgr
	streams atomic.Int64
}

func newSimHost(fab *fabric, h host.Host) (*simHost, error) {
	cm, err := bconnmgr.NewConnManager(connLow, connHigh, bconnmgr.WithGracePeriod(connGrace))
	if err != nil {
		return nil, fmt.Errorf("connection manager: %w", err)
	}
	h.Network().Notify(cm.Notifee())
	return &simHost{Host: h, fab: fab, cm: cm}, nil
}

func (h *simHost) ConnManager() connmgr.ConnManager { return h.cm }

func (h *simHost) Connect(ctx context.Context, ai peer.AddrInfo) error {
	if h.Network().Connectedness(ai.ID) != network.Connected {
		if err := h.fab.link(h.ID(), ai.ID); err != nil {
			return err
		}
	}
	return h.Host.Connect(ctx, ai)
}

func (h *simHost) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
	if h.Network().Connectedness(p) != network.Connected {
		if err := h.fab.link(h.ID(), p); err != nil {
			return nil, err
		}
	}
	h.streams.Add(1)
	return h.Host.NewStream(ctx, p, pids...)
}

func (h *simHost) SetStreamHandler(pid protocol.ID, handler network.StreamHandler) {
	h.Host.SetStreamHandler(pid, func(s network.Stream) {
		h.streams.Add(1)
		handler(s)
	})
}

func (h *simHost) Close() error {
	return errors.Join(h.Host.Close(), h.cm.Close())
}
