package p2p

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ipfs/go-cid"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/routing"
)

// PublishProfile stores a sealed profile under this node's profile key and
// announces this node as a provider of every model slug given and, when
// there is one, of SupplierCID. It returns
// an error when the record could not reach any peer; the local copy is kept
// regardless, so a lone node becomes findable as soon as others join and
// the caller republishes.
func (n *Network) PublishProfile(ctx context.Context, sealed []byte, models []string) error {
	if err := n.DHT.PutValue(ctx, ProfileKey(n.Host.ID()), sealed); err != nil {
		return fmt.Errorf("p2p: put profile: %w", err)
	}
	var errs []error
	keys := map[string]cid.Cid{}
	for _, m := range models {
		keys[m] = ModelCID(m)
	}
	if len(models) > 0 {
		keys["every supplier"] = SupplierCID()
	}
	for name, c := range keys {
		if err := n.DHT.Provide(ctx, c, true); err != nil {
			errs = append(errs, fmt.Errorf("provide %s: %w", name, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("p2p: announce models: %w", errors.Join(errs...))
	}
	return nil
}

// FindSuppliers looks up the provider records of every model in models in
// parallel (of SupplierCID alone when models is nil) and returns the distinct peers found, with the addresses the
// DHT knows for them. It returns what it found when ctx ends.
func (n *Network) FindSuppliers(ctx context.Context, models []string) map[peer.ID]peer.AddrInfo {
	found := make(map[peer.ID]peer.AddrInfo)
	for ai := range n.FindSuppliersAsync(ctx, models) {
		found[ai.ID] = ai
	}
	return found
}

// FindSuppliersAsync is FindSuppliers as a stream: each supplier is sent
// once, as soon as the first lookup finds it, so that callers can fetch
// its profile while the other lookups are still running. The channel is
// closed when every lookup has finished or ctx ends.
func (n *Network) FindSuppliersAsync(ctx context.Context, models []string) <-chan peer.AddrInfo {
	var (
		mu   sync.Mutex
		seen = make(map[peer.ID]bool)
		wg   sync.WaitGroup
		out  = make(chan peer.AddrInfo)
		keys []cid.Cid
	)
	for _, m := range models {
		keys = append(keys, ModelCID(m))
	}
	if models == nil {
		keys = []cid.Cid{SupplierCID()}
	}
	for _, key := range keys {
		wg.Add(1)
		go func(key cid.Cid) {
			defer wg.Done()
			for ai := range n.DHT.FindProvidersAsync(ctx, key, 0) {
				mu.Lock()
				dup := seen[ai.ID] || ai.ID == n.Host.ID()
				seen[ai.ID] = true
				mu.Unlock()
				if dup {
					continue
				}
				select {
				case out <- ai:
				case <-ctx.Done():
				}
			}
		}(key)
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	return out
}

// FetchProfile gets and validates the newest profile of id from the DHT.
// quorum is how many peers must answer before the lookup may stop (0 runs
// the full lookup).
func (n *Network) FetchProfile(ctx context.Context, id peer.ID, quorum int) (*Profile, error) {
	var opts []routing.Option
	if quorum > 0 {
		opts = append(opts, dht.Quorum(quorum))
	}
	raw, err := n.DHT.GetValue(ctx, ProfileKey(id), opts...)
	if err != nil {
		return nil, fmt.Errorf("p2p: get profile of %s: %w", id, err)
	}
	p, err := OpenProfile(raw, n.cfg.Now())
	if err != nil {
		return nil, fmt.Errorf("p2p: profile of %s: %w", id, err)
	}
	if p.ID != id {
		return nil, fmt.Errorf("p2p: profile of %s: %w: signed by %s", id, ErrSignerMismatch, p.ID)
	}
	return p, nil
}
