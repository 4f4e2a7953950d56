package p2p

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gpumesh/gpumesh/p2p/pb"
)

// DirectoryProtocol is the stream protocol on which a full node answers a
// light client's search from the supplier profiles it already keeps: one
// round trip instead of a DHT walk per model and one per supplier. The
// asker checks every profile's signature and expiry itself, so a node can
// withhold profiles but cannot forge or alter one; the DHT stays the
// fallback and the cross-check (see docs/PROTOCOL.md §3.6).
const DirectoryProtocol protocol.ID = "/gpumesh/directory/1.0.0"

// Limits of the directory protocol.
const (
	// MaxDirectoryProfiles bounds the profiles of one answer.
	MaxDirectoryProfiles = 512
	// MaxDirectoryReply bounds one answer's bytes: a server stops adding
	// profiles before it would pass this.
	MaxDirectoryReply   = 4 << 20
	maxDirectoryRequest = 4 << 10
	// MaxDirectoryPeers bounds the peers one request names (so that it
	// fits maxDirectoryRequest).
	MaxDirectoryPeers = 64
	// directoryConcurrency bounds the answers a node builds at once, one
	// per asking peer, so that one peer cannot take every slot; a request
	// beyond either is reset, and the asker falls back to the DHT.
	directoryConcurrency = 8
)

// Directory is the newest valid profile of each supplier a node knows, in
// memory, for answering DirectoryProtocol. It is safe for concurrent use.
type Directory struct {
	mu sync.Mutex
	m  map[peer.ID]*Profile
}

// NewDirectory returns an empty directory.
func NewDirectory() *Directory { return &Directory{m: map[peer.ID]*Profile{}} }

// Put keeps p unless the directory holds a profile of the same peer that
// wins over it by §3.4 (higher seq, then later issue, then smaller bytes:
// newer, as the DHT validator selects).
func (d *Directory) Put(p *Profile) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if prev, ok := d.m[p.ID]; ok && !newer(p, prev) {
		return
	}
	d.m[p.ID] = p
}

// Len is how many profiles the directory holds, expired ones included
// until the next List.
func (d *Directory) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.m)
}

// List returns the profiles live at now that have a GPU of one of models
// (every profile when models is empty), by peer ID, at most limit of
// them and at most maxBytes of envelopes in all. Expired profiles are
// dropped from the directory.
func (d *Directory) List(models []string, limit, maxBytes int, now time.Time) []*Profile {
	d.mu.Lock()
	var all []*Profile
	for id, p := range d.m {
		if !now.Before(p.Expires()) {
			delete(d.m, id)
			continue
		}
		if len(models) == 0 || HasModel(p, models) {
			all = append(all, p)
		}
	}
	d.mu.Unlock()
	return capped(all, limit, maxBytes)
}

// capped sorts all by peer ID and returns its first profiles, at most
// limit of them and at most maxBytes of envelopes in all.
func capped(all []*Profile, limit, maxBytes int) []*Profile {
	slices.SortFunc(all, func(a, b *Profile) int { return cmp.Compare(a.ID, b.ID) })
	var out []*Profile
	size := 0
	for _, p := range all {
		if len(out) == limit || size+len(p.Raw)+8 > maxBytes {
			break
		}
		out = append(out, p)
		size += len(p.Raw) + 8
	}
	return out
}

// Of returns the profiles of ids that are live at now and have a GPU of
// one of models (any model when empty), by peer ID, at most maxBytes of
// envelopes in all.
func (d *Directory) Of(ids []peer.ID, models []string, maxBytes int, now time.Time) []*Profile {
	d.mu.Lock()
	var all []*Profile
	for _, id := range ids {
		if p, ok := d.m[id]; ok && now.Before(p.Expires()) && (len(models) == 0 || HasModel(p, models)) && !slices.Contains(all, p) {
			all = append(all, p)
		}
	}
	d.mu.Unlock()
	return capped(all, len(all), maxBytes)
}

// HasModel reports whether p lists a GPU of one of models.
func HasModel(p *Profile, models []string) bool {
	for _, g := range p.Gpus {
		if slices.Contains(models, g.Model) {
			return true
		}
	}
	return false
}

// ServeDirectory answers DirectoryProtocol on h from d: the live profiles
// of the models asked for, as their suppliers signed them.
func ServeDirectory(h host.Host, d *Directory, now func() time.Time) {
	sem := make(chan struct{}, directoryConcurrency)
	var (
		mu   sync.Mutex
		busy = map[peer.ID]bool{} // one answer at a time per peer
	)
	Serve(h, DirectoryProtocol, func(s network.Stream) error {
		from := s.Conn().RemotePeer()
		mu.Lock()
		if busy[from] {
			mu.Unlock()
			return fmt.Errorf("directory: %s already has an answer in progress", from)
		}
		busy[from] = true
		mu.Unlock()
		defer func() {
			mu.Lock()
			delete(busy, from)
			mu.Unlock()
		}()
		select {
		case sem <- struct{}{}:
			defer func() { <-sem }()
		default:
			return fmt.Errorf("directory: %d answers in progress", directoryConcurrency)
		}
		var req pb.DirectoryRequest
		if err := ReadMsg(s, maxDirectoryRequest, &req); err != nil {
			return err
		}
		limit := int(req.Limit)
		if limit <= 0 || limit > MaxDirectoryProfiles {
			limit = MaxDirectoryProfiles
		}
		var list []*Profile
		if len(req.Peers) > 0 {
			ids, err := directoryPeers(req.Peers)
			if err != nil {
				return err
			}
			list = d.Of(ids, req.Models, MaxDirectoryReply-1024, now())
		} else {
			list = d.List(req.Models, limit, MaxDirectoryReply-1024, now())
		}
		var resp pb.DirectoryResponse
		for _, p := range list {
			resp.Profiles = append(resp.Profiles, p.Raw)
		}
		return WriteMsg(s, &resp)
	})
}

// QueryDirectory asks node p for the profiles it keeps of suppliers of
// models (every model when empty) and checks each one as of now: its
// signature, its validity and expiry, and that it has a GPU of models.
// What fails a check is dropped, and so is all but the winning profile
// (§3.4) of a peer listed twice; rejected counts them.
func QueryDirectory(ctx context.Context, h host.Host, p peer.ID, models []string, now time.Time) (profiles []*Profile, rejected int, err error) {
	var resp pb.DirectoryResponse
	req := &pb.DirectoryRequest{Models: models, Limit: MaxDirectoryProfiles}
	if err := Request(ctx, h, p, DirectoryProtocol, req, &resp, MaxDirectoryReply); err != nil {
		return nil, 0, fmt.Errorf("directory of %s: %w", p, err)
	}
	out, rejected, err := CheckDirectory(&resp, models, now)
	if err != nil {
		return nil, rejected, fmt.Errorf("directory of %s: %w", p, err)
	}
	return out, rejected, nil
}

// directoryPeers decodes a request's peer IDs: at most MaxDirectoryPeers,
// each a valid binary peer ID.
func directoryPeers(raw [][]byte) ([]peer.ID, error) {
	if len(raw) > MaxDirectoryPeers {
		return nil, fmt.Errorf("directory: %w: %d peers asked for, the limit is %d", ErrMalformed, len(raw), MaxDirectoryPeers)
	}
	ids := make([]peer.ID, 0, len(raw))
	for _, b := range raw {
		id, err := peer.IDFromBytes(b)
		if err != nil {
			return nil, fmt.Errorf("directory: %w: peer ID: %w", ErrMalformed, err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// QueryProfiles asks node server for the profiles it keeps of ids (at
// most MaxDirectoryPeers of them) and checks each one as QueryDirectory
// does; a profile of a peer not asked for is left out and counted in
// rejected. A peer may be missing from the answer (the server does not
// know it, or withholds it), and a profile may be older than one the
// asker has heard announced: the caller falls back to the DHT for those.
func QueryProfiles(ctx context.Context, h host.Host, server peer.ID, ids []peer.ID, now time.Time) (profiles []*Profile, rejected int, err error) {
	if len(ids) == 0 || len(ids) > MaxDirectoryPeers {
		return nil, 0, fmt.Errorf("directory of %s: %d peers to ask for, want 1 to %d", server, len(ids), MaxDirectoryPeers)
	}
	req := &pb.DirectoryRequest{Limit: uint32(len(ids))}
	for _, id := range ids {
		req.Peers = append(req.Peers, []byte(id))
	}
	var resp pb.DirectoryResponse
	if err := Request(ctx, h, server, DirectoryProtocol, req, &resp, MaxDirectoryReply); err != nil {
		return nil, 0, fmt.Errorf("directory of %s: %w", server, err)
	}
	out, rejected, err := CheckDirectory(&resp, nil, now)
	if err != nil {
		return nil, rejected, fmt.Errorf("directory of %s: %w", server, err)
	}
	kept := slices.DeleteFunc(out, func(p *Profile) bool { return !slices.Contains(ids, p.ID) })
	return kept, rejected + len(out) - len(kept), nil
}

// CheckDirectory is what QueryDirectory checks of an answer: at most
// MaxDirectoryProfiles profiles, each valid as of now and with a GPU of
// models (any model when empty), the winning one (§3.4) of a peer listed
// twice. It returns the profiles kept, by peer ID, and how many it left
// out.
func CheckDirectory(resp *pb.DirectoryResponse, models []string, now time.Time) ([]*Profile, int, error) {
	if len(resp.Profiles) > MaxDirectoryProfiles {
		return nil, len(resp.Profiles), fmt.Errorf("%w: %d profiles, the limit is %d", ErrMalformed, len(resp.Profiles), MaxDirectoryProfiles)
	}
	d := NewDirectory()
	for _, raw := range resp.Profiles {
		if pr, err := OpenProfile(raw, now); err == nil && (len(models) == 0 || HasModel(pr, models)) {
			d.Put(pr)
		}
	}
	out := d.List(nil, MaxDirectoryProfiles, math.MaxInt, now)
	return out, len(resp.Profiles) - len(out), nil
}
