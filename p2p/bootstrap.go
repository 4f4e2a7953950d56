package p2p

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// dhtMode is the DHT's mode for mode. A server serves the DHT unless
// AutoNAT finds it private (behind NAT): peers could not dial it to store
// or fetch records, and would wait on it for their timeouts; it then
// queries as a client until it is found public again. While reachability
// is unknown (loopback, a fresh node) it serves.
func dhtMode(mode Mode) dht.ModeOpt {
	if mode == ModeClient {
		return dht.ModeClient
	}
	return dht.ModeAutoServer
}

// dhtOptions are the DHT's options: gpumesh's protocol prefix, the
// profile record validator, the bootstrap peers and the record age.
func dhtOptions(cfg Config) []dht.Option {
	dopts := []dht.Option{
		dht.Mode(dhtMode(cfg.Mode)),
		dht.ProtocolPrefix(DHTPrefix(cfg.Network)),
		dht.NamespacedValidator(ProfileNamespace, ProfileValidator{Now: cfg.Now}),
		dht.BootstrapPeers(cfg.Bootstrap...),
	}
	if cfg.MaxRecordAge > 0 {
		dopts = append(dopts, dht.MaxRecordAge(cfg.MaxRecordAge))
	}
	return dopts
}

// Bootstrap connects to the configured bootstrap peers in parallel, each
// within timeout, and refreshes the routing table. It fails with
// ErrNoBootstrapPeers when peers were configured and none could be reached,
// or with ErrWrongNetwork when those reached are all gpumesh nodes of
// another network.
func (n *Network) Bootstrap(ctx context.Context, timeout time.Duration) error {
	if len(n.cfg.Bootstrap) == 0 {
		return nil
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		ok    int
		errs  []error
		wrong []error
	)
	for _, ai := range n.cfg.Bootstrap {
		if ai.ID == n.Host.ID() {
			continue
		}
		wg.Add(1)
		go func(ai peer.AddrInfo) {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			err := n.Host.Connect(cctx, ai)
			werr := n.peerNetworkErr(ai.ID)
			mu.Lock()
			defer mu.Unlock()
			if werr != nil {
				wrong = append(wrong, werr)
				return
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", ai.ID, err))
				return
			}
			ok++
		}(ai)
	}
	wg.Wait()
	if ok == 0 && len(wrong) > 0 {
		return fmt.Errorf("%w (check --bootstrap and --network)", errors.Join(wrong...))
	}
	if ok == 0 && len(errs) > 0 {
		return fmt.Errorf("%w (tried %d within %s): %w", ErrNoBootstrapPeers, len(errs), timeout, errors.Join(errs...))
	}
	for _, err := range errs {
		n.log.Warn("bootstrap peer unreachable", "err", err)
	}
	if err := n.waitRoutingTable(ctx, timeout); err != nil {
		return err
	}
	if n.cfg.Mode == ModeClient {
		// A light client lives for one command: a routing-table refresh
		// would only compete with its lookups, which find peers anyway.
		return nil
	}
	if err := n.DHT.Bootstrap(ctx); err != nil {
		return fmt.Errorf("p2p: dht bootstrap: %w", err)
	}
	return nil
}

// KeepBootstrapEvery is how often a node checks that it is connected to
// its bootstrap peers, and dials those it lost (a bootstrap node that
// restarted does not dial anyone back by itself) when it is connected to
// none of them (a partition). While it still has one, it redials the
// others only every KeepBootstrapSpare: on a large network a bootstrap
// node's connection manager trims the connections it cannot keep, and
// every node dialling it back within seconds would only be trimmed again.
const (
	KeepBootstrapEvery = 10 * time.Second
	KeepBootstrapSpare = time.Minute
)

// keepBootstrap redials lost bootstrap peers until ctx ends.
func (n *Network) keepBootstrap(ctx context.Context) {
	t := time.NewTicker(KeepBootstrapEvery)
	defer t.Stop()
	for tick := 1; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		spare := slices.ContainsFunc(n.cfg.Bootstrap, func(ai peer.AddrInfo) bool {
			return ai.ID != n.Host.ID() && n.Host.Network().Connectedness(ai.ID) == network.Connected
		})
		if spare && tick%int(KeepBootstrapSpare/KeepBootstrapEvery) != 0 {
			continue
		}
		for _, ai := range n.cfg.Bootstrap {
			if ai.ID == n.Host.ID() || n.Host.Network().Connectedness(ai.ID) == network.Connected {
				continue
			}
			if w, wrong := n.wrong.get(ai.ID); wrong && n.cfg.Now().Sub(w.Seen) < wrongPeerRetry {
				continue // on another network: said once, not redialled for a while
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			// Past the swarm's dial backoff, which after a long outage
			// (a partition between regions) grows to minutes: this dial
			// is already spaced KeepBootstrapEvery apart.
			cctx = network.WithForceDirectDial(cctx, "keep bootstrap peers")
			if err := n.Host.Connect(cctx, ai); err == nil {
				n.log.Info("reconnected to bootstrap peer", "peer", ai.ID)
			}
			cancel()
		}
	}
}

// waitRoutingTable waits until identify has told the DHT that at least one
// connected peer is a DHT server, so that the first lookup has somewhere to
// start. A lookup started earlier would find nothing.
func (n *Network) waitRoutingTable(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for n.DHT.RoutingTable().Size() == 0 {
		if err := n.allBootstrapWrong(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: connected, but no peer answered as a gpumesh DHT server within %s", ErrNoBootstrapPeers, timeout)
		case <-tick.C:
		}
	}
	return nil
}

// allBootstrapWrong fails with ErrWrongNetwork when every bootstrap peer
// has turned out to be on another network.
func (n *Network) allBootstrapWrong() error {
	var errs []error
	for _, ai := range n.cfg.Bootstrap {
		w, ok := n.wrong.get(ai.ID)
		if !ok {
			return nil
		}
		errs = append(errs, fmt.Errorf("%w: %s", ErrWrongNetwork, w.String(n.cfg.Network)))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w (check --bootstrap and --network)", errors.Join(errs...))
}
