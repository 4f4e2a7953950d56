package node

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/internal/metrics"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/p2p"
	"github.com/gpumesh/gpumesh/p2p/pb"
	"github.com/gpumesh/gpumesh/store"
)

// advertiseLoop publishes the node's profile and provider records, then
// republishes them at half the profile's lifetime, and at once (at most
// every advertiseGap) when what the profile states of the node's
// reachability changes: its reach verdict or its addresses (a node behind
// NAT gains relay addresses after it starts, and renters dial it at
// those). A failed publish (e.g. no peers yet) is retried with backoff,
// from 1 s up to the republish interval.
func (n *Node) advertiseLoop(ctx context.Context) {
	if len(n.gpus) == 0 {
		n.log.Info("no GPUs: not advertising a supplier profile")
		return
	}
	republish := n.cfg.ProfileTTL / 2
	backoff := time.Second
	first := true
	// A node alone (the first of a network) cannot publish until a peer
	// joins: it retries as soon as one is identified, not a backoff later.
	// Both event subscriptions are read at all times, whatever this loop
	// is doing: an event bus subscriber that stops reading blocks the
	// emitter, and identify emits for every new connection, so a full
	// subscription would stall identify, and with it pubsub, for every
	// peer that connects after it.
	peerJoined := n.watch(ctx, new(event.EvtPeerIdentificationCompleted), "watch for peers")
	addrsChanged := n.watch(ctx, new(event.EvtLocalAddressesUpdated), "watch own addresses")
	var published string // reachKey of the last published profile
	// asked is the reachKey the supplier's asks were last re-posted for.
	// Its first asks go out when the market starts, before this loop and
	// often before a node behind NAT holds its relay reservation: their
	// addresses are whatever the host had then, and renters dial those.
	asked := n.market.startKey
	for {
		// Peers identified before this attempt are in the routing table
		// it uses; only one identified after it starts calls for a retry.
		drain(peerJoined)
		key := n.reachKey()
		err := n.publishProfile(ctx)
		if key != asked {
			// The asks carry the addresses the profile states (gossip
			// reaches renters even when the DHT put failed).
			n.market.addrsChanged()
			asked = key
		}
		wait := republish
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			level := slog.LevelWarn
			if len(n.net.Host.Network().Peers()) == 0 {
				level = slog.LevelInfo // alone: expected until a peer joins
			}
			n.log.Log(ctx, level, "publish profile failed; will retry", "err", err, "in", backoff)
			wait, backoff = backoff, min(backoff*2, republish)
		} else {
			backoff = time.Second
			published = key
			if first {
				close(n.advertOK)
				first = false
			}
		}
		// Only a node that could not look anything up for want of peers
		// retries when one joins. Any other failure waits its backoff:
		// in a network that is starting, peers join every moment, and a
		// node that retried a timed-out publish on each would walk the
		// DHT again and again while everyone else is trying to as well.
		var retryOnPeer <-chan struct{}
		if err != nil && (p2p.IsAlone(err) || len(n.net.Host.Network().Peers()) == 0) {
			retryOnPeer = peerJoined
		}
		if !n.waitToAdvertise(ctx, wait, retryOnPeer, addrsChanged, published) {
			return
		}
	}
}

// advertiseGap is the least time between two profile publishes caused by
// changes of reachability or addresses, which come in bursts while a node
// behind NAT finds its relays.
const advertiseGap = 2 * time.Second

// waitToAdvertise waits until the next publish is due: wait has passed, a
// peer joined (peerJoined, after a failed publish), or the node's reach or
// addresses differ from the published profile's (then at least
// advertiseGap after the last publish). It reports false when ctx ended.
func (n *Node) waitToAdvertise(ctx context.Context, wait time.Duration, peerJoined, addrsChanged <-chan struct{}, published string) bool {
	due := time.NewTimer(wait)
	defer due.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-due.C:
			return true
		case <-peerJoined:
			return true
		case <-addrsChanged:
		case <-n.net.ReachChanged():
		}
		if published == "" || n.reachKey() == published {
			continue
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(advertiseGap):
		}
		n.log.Info("reachability or addresses changed; republishing the profile and re-posting the asks", "reach", n.net.Reach().Reach)
		return true
	}
}

// reachKey is what the profile states of how peers reach this node: its
// reach verdict and its advertised addresses, as one comparable string.
func (n *Node) reachKey() string {
	var b strings.Builder
	b.WriteString(string(n.net.Reach().Reach))
	addrs := n.net.Host.Addrs()
	strs := make([]string, 0, len(addrs))
	for _, a := range addrs {
		strs = append(strs, a.String())
	}
	sort.Strings(strs)
	for _, a := range strs {
		b.WriteString(" ")
		b.WriteString(a)
	}
	return b.String()
}

// watch subscribes to events of type evtType and returns a channel that
// is signalled (coalesced: it holds at most one signal) after each, read
// until ctx ends; nil, which never fires, when the subscription fails.
func (n *Node) watch(ctx context.Context, evtType any, what string) <-chan struct{} {
	sub, err := n.net.Host.EventBus().Subscribe(evtType)
	if err != nil {
		n.log.Warn(what, "err", err)
		return nil
	}
	sig := make(chan struct{}, 1)
	n.goLoop(func() {
		defer sub.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case <-sub.Out():
				select {
				case sig <- struct{}{}:
				default:
				}
			}
		}
	})
	return sig
}

// drain empties c of what is queued in it now.
func drain(c <-chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// publishProfile seals a fresh profile with the next sequence number and
// puts it in the DHT. The sequence number is persisted before use, so it
// keeps increasing across restarts even if the clock steps back.
func (n *Node) publishProfile(ctx context.Context) error {
	now := n.now()
	seq, err := n.nextProfileSeq(now)
	if err != nil {
		return err
	}
	gpus, models := profileGPUs(n.gpus)
	p := &pb.Profile{
		Seq:         seq,
		IssuedAtMs:  now.UnixMilli(),
		ExpiresAtMs: now.Add(n.cfg.ProfileTTL).UnixMilli(),
		Region:      n.cfg.Region,
		Software:    Software(),
		Gpus:        gpus,
		Reach:       string(n.net.Reach().Reach),
	}
	if len(n.gpus) > 0 {
		// Renters see what their jobs would run under before they rent.
		if l, err := n.jobLimits(); err == nil {
			p.JobLimitsDefault, p.JobLimitsMax = profileLimits(l)
		}
	}
	for _, a := range p2p.RankAddrs(n.net.Host.Addrs()) {
		if len(p.Addrs) < p2p.MaxAddrsPerProfile {
			p.Addrs = append(p.Addrs, a.Bytes())
		}
	}
	sealed, err := p2p.SealProfile(p, n.key)
	if err != nil {
		return err
	}
	// Keep our own profile beside those of others, so the node's API
	// shows its own offers too.
	own, err := p2p.OpenProfile(sealed, now)
	if err != nil {
		return err
	}
	if err := n.keepProfile(own); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := n.net.PutProfile(ctx, sealed); err != nil {
		return err
	}
	due := n.provided.due(models, n.reachKey(), now)
	if err := n.net.Provide(ctx, due, func(name string) { n.provided.done(name, now) }); err != nil {
		return err
	}
	n.log.Debug("profile published", "seq", seq, "models", models)
	return nil
}

// provideEvery is how often a supplier announces its provider records
// again while nothing they depend on changed: well within the 48 h for
// which DHT nodes keep them, and far less often than the profile is
// republished (every half ProfileTTL, 30 min by default).
const provideEvery = 12 * time.Hour

// provided records which provider records (p2p.ProviderKeys) were
// announced and when, and the reachability (Node.reachKey) they were
// announced with: a provider record carries the node's addresses. Each
// profile republish puts the profile again, but a provider record is one
// more DHT walk and twenty stores for every key: announcing them all
// again every 30 min, or all again when one of them failed, is what made
// start-up of a large network on one machine a storm of walks.
type provided struct {
	mu    sync.Mutex
	at    map[string]time.Time
	reach string
}

// due returns the provider records of models to announce now: those never
// announced, whose last announcement failed or is provideEvery old, and
// all of them when reach differs from what they were announced with.
func (p *provided) due(models []string, reach string, now time.Time) map[string]cid.Cid {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at == nil || reach != p.reach {
		p.at, p.reach = map[string]time.Time{}, reach
	}
	keys := p2p.ProviderKeys(models)
	for name := range keys {
		if at, ok := p.at[name]; ok && now.Sub(at) < provideEvery {
			delete(keys, name)
		}
	}
	return keys
}

// done records that the provider record name was announced at now.
func (p *provided) done(name string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.at[name] = now
}

func (n *Node) nextProfileSeq(now time.Time) (uint64, error) {
	var last uint64
	b, err := n.store.Get(ksSelf, keyProfileSeq)
	switch {
	case err == nil && len(b) == 8:
		last = binary.BigEndian.Uint64(b)
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return 0, err
	}
	seq := max(uint64(now.UnixMilli()), last+1)
	if err := n.store.Put(ksSelf, keyProfileSeq, binary.BigEndian.AppendUint64(nil, seq)); err != nil {
		return 0, err
	}
	return seq, nil
}

// currentProfileSeq is the last sequence number published (0 if none).
func (n *Node) currentProfileSeq() uint64 {
	b, err := n.store.Get(ksSelf, keyProfileSeq)
	if err != nil || len(b) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

// heartbeatLoop gossips a signed heartbeat every HeartbeatInterval, or
// less often in a large network (heartbeatEvery).
func (n *Node) heartbeatLoop(ctx context.Context) {
	t := time.NewTimer(n.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		hb := &pb.Heartbeat{
			GpusTotal:  uint32(len(n.gpus)),
			GpusFree:   n.freeGPUs(),
			Software:   Software(),
			ProfileSeq: n.currentProfileSeq(),
			Region:     n.cfg.Region,
		}
		if err := n.hbs.Publish(ctx, hb); err != nil && ctx.Err() == nil {
			n.log.Warn("publish heartbeat", "err", err)
		}
		t.Reset(heartbeatEvery(n.cfg.HeartbeatInterval, n.peers.heard(n.now())+1))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readHeartbeats records every validated heartbeat and queues a profile
// fetch when a peer announces a profile newer than the one we keep.
func (n *Node) readHeartbeats(ctx context.Context) {
	for {
		hb, err := n.hbs.Next(ctx)
		if err != nil {
			return
		}
		now := n.now()
		n.skew.Add(hb.ID, hb.Time(), now)
		known := n.peers.update(hb, now)
		if hb.ProfileSeq > known && n.fetching.add(hb.ID) {
			select {
			case n.fetchQ <- hb.ID:
			default: // queue full: the next heartbeat will ask again
				n.fetching.done(hb.ID)
			}
		}
	}
}

// profileFetchers is how many profile fetches run at once, so that one
// slow DHT lookup (up to its 10 s timeout, e.g. for a profile not yet
// stored) does not hold up the others.
const profileFetchers = 4

// fetchSet is the set of peers whose profile is queued or being fetched:
// a peer is queued once however many heartbeats announce it meanwhile.
type fetchSet struct {
	mu sync.Mutex
	m  map[peer.ID]bool
}

// add marks id as queued and reports whether it was not already.
func (f *fetchSet) add(id peer.ID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[peer.ID]bool{}
	}
	if f.m[id] {
		return false
	}
	f.m[id] = true
	return true
}

// done unmarks id: the next heartbeat that announces a newer profile
// queues it again.
func (f *fetchSet) done(id peer.ID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, id)
}

// fetchProfiles fetches queued profiles and keeps them, as their signed
// envelopes, in the store; profileFetchers of it run. It takes what is
// queued at once as one batch (fetchBatch).
func (n *Node) fetchProfiles(ctx context.Context) {
	for {
		var batch []peer.ID
		select {
		case <-ctx.Done():
			return
		case id := <-n.fetchQ:
			batch = append(batch, id)
		}
	more:
		for len(batch) < p2p.MaxDirectoryPeers {
			select {
			case id := <-n.fetchQ:
				batch = append(batch, id)
			default:
				break more
			}
		}
		n.fetchBatch(ctx, batch)
		for _, id := range batch {
			n.fetching.done(id)
		}
	}
}

// fetchBatch fetches the profiles of ids not yet held as new as their
// heartbeats announce. It asks first, in one round trip, the directory
// (p2p.QueryProfiles) of a connected peer among ids: every heartbeat's
// author is a full node that holds its own profile, newest of all, and
// most others. Only what that answer lacks, or holds older than announced,
// is read from the DHT, one walk each. The directory is trusted for
// nothing: every profile is checked against its supplier's signature and
// expiry, and against the sequence number the supplier's own heartbeat
// announced. When a network of a hundred nodes starts, this is one
// request where each node walked the DHT for each of its peers.
func (n *Node) fetchBatch(ctx context.Context, ids []peer.ID) {
	need := slices.DeleteFunc(slices.Clone(ids), func(id peer.ID) bool {
		announced, held := n.peers.seqs(id)
		return held >= announced
	})
	if len(need) == 0 {
		return
	}
	if server, ok := n.directoryServer(need); ok {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ps, rejected, err := p2p.QueryProfiles(fctx, n.net.Host, server, need, n.now())
		cancel()
		if err != nil || rejected > 0 {
			n.log.Debug("profiles from a directory", "server", server, "asked", len(need), "got", len(ps), "rejected", rejected, "err", err)
		}
		for _, p := range ps {
			if announced, _ := n.peers.seqs(p.ID); p.Seq >= announced {
				n.keepFetched(p, metrics.FromDirectory)
			}
		}
	}
	for _, id := range need {
		n.fetchProfile(ctx, id)
	}
}

// directoryServer picks the peer whose directory fetchBatch asks: one of
// ids this node is connected to.
func (n *Node) directoryServer(ids []peer.ID) (peer.ID, bool) {
	for _, id := range ids {
		if n.net.Host.Network().Connectedness(id) == network.Connected {
			return id, true
		}
	}
	return "", false
}

// fetchProfile fetches and keeps id's profile unless one as new as its
// heartbeats announce is already held.
func (n *Node) fetchProfile(ctx context.Context, id peer.ID) {
	if announced, held := n.peers.seqs(id); held >= announced {
		return // already fetched by an earlier request
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	p, err := n.net.FetchProfile(fctx, id, 1)
	cancel()
	if err != nil {
		n.log.Debug("fetch profile", "of", id, "err", err)
		return
	}
	n.keepFetched(p, metrics.FromDHT)
}

// keepFetched keeps p, a profile fetched from src and checked, and
// records its sequence number as held.
func (n *Node) keepFetched(p *p2p.Profile, src metrics.Source) {
	if err := n.keepProfile(p); err != nil {
		n.log.Warn("keep profile", "of", p.ID, "err", err)
		return
	}
	n.peers.setProfile(p.ID, p)
	n.metrics.Profiles.Fetched(src)
}

// keepProfile stores p's signed envelope until p expires, unless the store
// already holds a newer profile of the same peer (a DHT read may return
// an older copy than one fetched before). The GPU UUIDs it claims feed
// the reputation book's conflict detection.
func (n *Node) keepProfile(p *p2p.Profile) error {
	if n.verify.rep != nil {
		uuids := make([]string, 0, len(p.Gpus))
		simOnly := true
		for _, g := range p.Gpus {
			uuids = append(uuids, g.Uuid)
			simOnly = simOnly && g.Simulated
		}
		n.verify.rep.ObserveGPUs(p.ID, uuids, simOnly)
	}
	if n.market.trust != nil {
		n.market.trust.observe(p)
	}
	if n.dir != nil {
		n.dir.Put(p)
	}
	if prev, ok := n.keptProfile(p.ID); ok && prev.Seq > p.Seq {
		return nil
	}
	ttl := p.Expires().Sub(n.now())
	if ttl <= 0 {
		return nil
	}
	return n.store.PutTTL(ksProfiles, []byte(p.ID), p.Raw, ttl)
}

// keptProfile is the valid profile of id this node keeps, if any: one
// store read and one signature check, for paths that need one supplier's
// (KnownProfiles opens every profile held).
func (n *Node) keptProfile(id peer.ID) (*p2p.Profile, bool) {
	raw, err := n.store.Get(ksProfiles, []byte(id))
	if err != nil {
		return nil, false
	}
	p, err := p2p.OpenProfile(raw, n.now())
	return p, err == nil
}

// KnownProfiles returns the valid profiles the node keeps, newest seq per
// peer, re-validated against the current time (expired ones are skipped).
func (n *Node) KnownProfiles() ([]*p2p.Profile, error) {
	var out []*p2p.Profile
	now := n.now()
	err := n.store.Iterate(ksProfiles, nil, func(_, v []byte) error {
		p, err := p2p.OpenProfile(append([]byte(nil), v...), now)
		if err == nil {
			out = append(out, p)
		}
		return nil
	})
	return out, err
}

// PeerState is what the node knows of one peer from its heartbeats: the
// API's view of it, and what the table tracks of its profile.
type PeerState struct {
	api.Peer
	announced   uint64
	profileSeen uint64
}

// peerTable is the node's view of its peers, fed by heartbeats.
type peerTable struct {
	mu sync.Mutex
	m  map[peer.ID]*PeerState
}

func newPeerTable() *peerTable { return &peerTable{m: map[peer.ID]*PeerState{}} }

// update records hb and returns the profile seq we already hold for it.
func (t *peerTable) update(hb *p2p.Heartbeat, now time.Time) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.m[hb.ID]
	if s == nil {
		s = &PeerState{Peer: api.Peer{ID: hb.ID}}
		t.m[hb.ID] = s
	}
	s.LastSeen, s.Heartbeats = now, s.Heartbeats+1
	s.GPUsTotal, s.GPUsFree = hb.GpusTotal, hb.GpusFree
	s.Region, s.Software, s.announced = hb.Region, hb.Software, hb.ProfileSeq
	return s.profileSeen
}

// seqs returns the profile seq id last announced and the one we hold.
func (t *peerTable) seqs(id peer.ID) (announced, held uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.m[id]; s != nil {
		return s.announced, s.profileSeen
	}
	return 0, 0
}

func (t *peerTable) setProfile(id peer.ID, p *p2p.Profile) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.m[id]; s != nil && p.Seq > s.profileSeen {
		s.profileSeen, s.ProfileSeq = p.Seq, p.Seq
	}
}

// Every node receives every heartbeat, about seven times over (flood
// publish and the mesh), so a network's heartbeats cost each node in
// proportion to the network's size: on a 20-node network with 10 s
// heartbeats they were half of an idle node's CPU (0.95% of a core
// against 0.43% with 60 s heartbeats, in a build that dialled TCP
// first). A node in a network of more than
// heartbeatSpreadNodes nodes so sends its heartbeat at most every
// nodes/heartbeatRate seconds, so that each node receives about
// heartbeatRate heartbeats a second however many nodes there are, up to
// maxHeartbeatSpread (half of p2p.MaxHeartbeatAge, so that a heartbeat
// still lands before the last one is too old to compare with). Past
// heartbeatRate × maxHeartbeatSpread nodes (120) the load grows again.
const (
	heartbeatSpreadNodes = 20
	heartbeatRate        = 2 // heartbeats a node receives a second
	maxHeartbeatSpread   = time.Minute
)

// heartbeatEvery is the time to the next heartbeat of a node configured
// with interval in a network of nodes nodes (the peers it has heard by
// heartbeat, and itself).
func heartbeatEvery(interval time.Duration, nodes int) time.Duration {
	if nodes <= heartbeatSpreadNodes {
		return interval
	}
	spread := min(time.Duration(nodes)*time.Second/heartbeatRate, maxHeartbeatSpread)
	return max(interval, spread)
}

// heard is how many peers the table lists (heard by heartbeat within
// peerForget).
func (t *peerTable) heard(now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := 0
	for _, s := range t.m {
		if !s.forgotten(now) {
			k++
		}
	}
	return k
}

// peerForget is how long a silent peer stays in the table.
const peerForget = 10 * time.Minute

// forgotten reports whether s has been silent for longer than peerForget.
func (s *PeerState) forgotten(now time.Time) bool { return now.Sub(s.LastSeen) > peerForget }

// list returns the peers heard from recently and forgets the others.
func (t *peerTable) list(now time.Time) []PeerState {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]PeerState, 0, len(t.m))
	for id, s := range t.m {
		if s.forgotten(now) {
			delete(t.m, id)
			continue
		}
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
