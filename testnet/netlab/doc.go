// Package netlab builds a laboratory internet out of Linux network
// namespaces: public hosts, hosts behind NAT routers of two kinds, and a WAN
// between them with per-region delay, jitter, loss and partitions. The
// testnet runs gpumesh nodes in it to see NAT traversal for real; its tests
// check the lab itself.
//
// # Namespaces
//
// Every host gets a namespace <prefix>-<host>; a host behind NAT also gets
// one for its home router, <prefix>-<host>-nat. Nothing is ever created in
// the root namespace: links are made inside the lab's namespaces (`ip -n`),
// so the lab has no link to the machine's own network and no route out.
// [Lab.Close] and, after a killed run, [Cleanup] remove the namespaces
// carrying the prefix and the processes inside them, and nothing else.
//
// # Addressing
//
// The lab's "internet" is 11.0.0.0/8. go-libp2p ignores the documentation
// ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24) and private ranges
// for hole punching, AutoNAT and observed addresses (manet.IsPublicAddr is
// false for them), so a lab using them could never show NAT traversal. 11/8
// is a public range; it is safe here only because the lab's namespaces have
// no link to the root namespace and no route out: nothing sent to 11/8 can
// leave the lab.
//
//	region r (1-based, in Spec.Regions order)   11.r.0.0/16
//	public host or NAT router k of region r      11.r.0.k/32 on wan0
//	home network of the n-th NAT'd host          10.n.0.0/24
//	  its router (lan0)                          10.n.0.1
//	  the host (eth0)                            10.n.0.2, route 11/8 via 10.n.0.1
//
// A host behind NAT has no default route, only 11.0.0.0/8 via its router.
//
// # NAT routers
//
// A router forwards (ip_forward=1) and filters with nftables as a home
// router does: input and forward policy drop, `ct state
// established,related accept`, LAN to WAN accepted. It masquerades what
// leaves wan0: plain `masquerade` for a [Cone] NAT (Linux keeps the source
// port per local socket, an endpoint-independent mapping in practice, so hole
// punching can work) or `masquerade fully-random` for a [Symmetric] NAT (a
// new random port per destination: hole punching fails). Rules carry
// `counter`s.
//
// # The WAN
//
// This kernel has no netem (CONFIG_NET_SCH_NETEM is not set), so the lab's
// WAN is a user-space forwarder that applies per-region delay, jitter, loss
// and partitions. Each public host and each router has a TUN device wan0
// holding its public address and a route for 11/8. The forwarder ([Wan])
// reads IPv4 packets from every TUN, looks up the TUN that owns the
// destination, and writes the packet there after the one-way delay of
// (source region, destination region) plus a uniform random extra of up to
// the link's jitter, dropping it with the link's loss probability, or always
// while the two regions are partitioned. Packets to one destination are
// delivered in order (jitter never reorders them). The TUNs are not
// persistent: when the forwarder stops, the WAN vanishes with it and the
// lab is cut into islands until a new forwarder starts ([StartWAN]).
//
// # Sockets and processes
//
// [Lab.Dialer], [Lab.Listen] and [Lab.ListenPacket] make sockets inside a
// host's namespace from this process (a socket stays in the namespace it
// was created in), e.g. to reach a node's API on 127.0.0.1 in its own
// namespace. [Lab.Command] runs a program in a host's namespace with `ip
// netns exec`.
//
// The package needs Linux, root, iproute2 (`ip`), nftables (`nft`) and
// /dev/net/tun; [Check] says what is missing.
package netlab
