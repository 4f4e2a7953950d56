package p2p

import (
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	ma "github.com/multiformats/go-multiaddr"
)

// QUICAfterTCP is how long a dial to a peer that listens on TCP and QUIC
// gives TCP before it dials QUIC too (tcpFirst). A TCP dial that fails
// (refused, unreachable) starts the QUIC dial at once; one that hangs
// costs this long.
const QUICAfterTCP = 250 * time.Millisecond

// tcpFirst ranks a peer's addresses for a dial as go-libp2p's default
// ranker does, but with TCP before QUIC: where a peer listens on both,
// the TCP addresses are dialled when the default would have dialled QUIC,
// and QUIC QUICAfterTCP later (or as long as the default made TCP wait,
// when that is more), so that QUIC still connects a peer whose TCP is
// blocked. The default's 30 ms on private addresses is too short a start:
// TCP's handshake, then TLS's and yamux's, take more round trips than
// QUIC's one, and on a busy machine QUIC would often win anyway. Relay
// addresses keep their place after both.
//
// A node spends its idle CPU on gossip copies, a few small messages a
// second on each of dozens of connections; over QUIC each costs user-space
// acknowledgements, pacing and timers that the kernel's TCP does for the
// node (a 20-node testnet idled at about 0.98% of a core per node with
// QUIC connections and 0.68% with TCP ones; bench/RESULTS.md). QUIC
// stays for the peers TCP cannot reach and for hole punching, which
// dials every address at once and does not rank them.
func tcpFirst(addrs []ma.Multiaddr) []network.AddrDelay {
	ranked := swarm.DefaultDialRanker(addrs)
	const never = time.Duration(1<<63 - 1)
	tcpAt, quicAt := never, never
	for _, r := range ranked {
		switch transportOf(r.Addr) {
		case "tcp":
			tcpAt = min(tcpAt, r.Delay)
		case "quic":
			quicAt = min(quicAt, r.Delay)
		}
	}
	if tcpAt == never || quicAt == never || tcpAt <= quicAt {
		return ranked
	}
	forward := tcpAt - quicAt
	back := max(forward, QUICAfterTCP)
	for i := range ranked {
		if transportOf(ranked[i].Addr) == "tcp" {
			ranked[i].Delay -= forward
		} else {
			ranked[i].Delay += back
		}
	}
	slices.SortStableFunc(ranked, func(a, b network.AddrDelay) int { return int(a.Delay - b.Delay) })
	return ranked
}

// transportOf is "tcp" or "quic" for a direct address of either, else ""
// (a relay address, websockets, webtransport ...).
func transportOf(a ma.Multiaddr) string {
	tcp, quic := false, false
	for _, c := range a {
		switch c.Protocol().Code {
		case ma.P_CIRCUIT, ma.P_WS, ma.P_WSS, ma.P_WEBTRANSPORT, ma.P_WEBRTC_DIRECT:
			return ""
		case ma.P_TCP:
			tcp = true
		case ma.P_QUIC_V1:
			quic = true
		}
	}
	switch {
	case quic:
		return "quic"
	case tcp:
		return "tcp"
	}
	return ""
}
