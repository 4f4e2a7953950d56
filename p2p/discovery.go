package p2p

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/ipfs/go-cid"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/core/routing"
)

// PublishProfile stores a sealed profile under this node's profile key and
// announces this node as a provider of every model slug given and, when
// there is one, of SupplierCID. It returns
// an error when the record could not reach any peer; the local copy is kept
// regardless, so a lone node becomes findable as soon as others join and
// the caller republishes. A daemon that republishes calls PutProfile and
// Provide itself, to announce again only the provider records that are due.
func (n *Network) PublishProfile(ctx context.Context, sealed []byte, models []string) error {
	if err := n.PutProfile(ctx, sealed); err != nil {
		return err
	}
	return n.Provide(ctx, ProviderKeys(models), nil)
}

// PutProfile stores a sealed profile under this node's profile key in the
// DHT (and in the node's own copy of it, kept even when no peer took it).
func (n *Network) PutProfile(ctx context.Context, sealed []byte) error {
	if err := n.DHT.PutValue(ctx, ProfileKey(n.Host.ID()), sealed); err != nil && !n.soleServer(err) {
		return fmt.Errorf("p2p: put profile: %w", err)
	}
	return nil
}

// soleServer reports whether err is a DHT lookup that found no other DHT
// server while this node is one and has peers: the only public node of a
// small network, whose peers behind NAT are DHT clients. PutValue and
// Provide keep their record in the node's own store before they look for
// peers, and that store is then the whole DHT's: peers that ask find it.
func (n *Network) soleServer(err error) bool {
	return IsAlone(err) && n.dhtServing() && len(n.Host.Network().Peers()) > 0
}

// dhtServing reports whether the DHT answers queries now: a server, or a
// node in auto mode that has not found itself behind NAT. The DHT then
// handles its Kademlia protocol.
func (n *Network) dhtServing() bool {
	return slices.ContainsFunc(n.Host.Mux().Protocols(), func(p protocol.ID) bool {
		return strings.HasSuffix(string(p), "/kad/1.0.0")
	})
}

// EverySupplier names SupplierCID among ProviderKeys.
const EverySupplier = "every supplier"

// ProviderKeys are the provider records a supplier of models announces:
// one per model slug (named by the slug) and, when models is not empty,
// SupplierCID (named EverySupplier).
func ProviderKeys(models []string) map[string]cid.Cid {
	keys := make(map[string]cid.Cid, len(models)+1)
	for _, m := range models {
		keys[m] = ModelCID(m)
	}
	if len(models) > 0 {
		keys[EverySupplier] = SupplierCID()
	}
	return keys
}

// Provide announces this node in the DHT as a provider of each of keys
// (named as ProviderKeys names them), one after the other, calling done
// (unless nil) with the name of each one announced. It returns the
// failures, joined, naming each key.
func (n *Network) Provide(ctx context.Context, keys map[string]cid.Cid, done func(name string)) error {
	var errs []error
	for name, c := range keys {
		if err := n.DHT.Provide(ctx, c, true); err != nil && !n.soleServer(err) {
			errs = append(errs, fmt.Errorf("provide %s: %w", name, err))
			continue
		}
		if done != nil {
			done(name)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("p2p: announce models: %w", errors.Join(errs...))
	}
	return nil
}

// IsAlone reports whether err is the DHT's refusal to look anything up
// because its routing table is empty: the node knows no peer yet, and a
// retry is worth it as soon as one is identified.
func IsAlone(err error) bool { return errors.Is(err, kb.ErrLookupFailure) }

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
