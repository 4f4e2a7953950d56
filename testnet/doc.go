// Package testnet runs a local gpumesh network: N real `gpumesh node`
// processes on 127.0.0.1, or in network namespaces behind NAT routers
// (see Namespaces below), each with simulated GPUs and a region, for
// trying the CLI by hand, for end-to-end tests and for scenarios.
//
// # Layout
//
// Everything lives under one state directory (by default testnet/.run,
// which git ignores):
//
//	node-0/ ... node-N-1/   each node's data dir (identity key, store)
//	node-0.log ...          each node's stdout and stderr
//	state.json              the running network: PIDs, peer IDs, addresses
//	bootstrap.txt           bootstrap multiaddrs, one a line
//
// Data dirs and logs outlive [Down], so a later [Up] in the same directory
// brings back the same peer IDs.
//
// # Ports and hardware
//
// By default every node listens on ports the kernel chooses (port 0), for
// libp2p on tcp and udp (QUIC) and for its HTTP API on 127.0.0.1, and the
// testnet reads back what each got (state.json and `testnet status` show
// them); a restarted node asks for the same ports again. With
// [Options].BasePort (--base-port) set, node i listens on BasePort+i and
// serves its API on 127.0.0.1:BasePort+1000+i instead, and [Up] checks
// that every port is free before it starts anything. Node i gets the simulated hardware and
// region of [ProfileFor](i), a fixed rotation of five:
//
//	0  sim:h100-sxm:8              eu-west
//	1  sim:rtx4090:2               us-east
//	2  sim:a100-80gb:4             eu-west
//	3  sim:l40s:2                  ap-south
//	4  sim:h100-sxm:2,rtx4090:1    us-east
//
// # Start-up
//
// Node 0 starts alone; node 1 bootstraps from node 0; every later node
// bootstraps from nodes 0 and 1. [Up] waits until each node's /healthz
// reports a peer and an advertised profile, and then until a light client
// (`gpumesh search --json`) finds a fresh profile of every node. If anything
// fails, Up stops the nodes it started and names the failing node and its
// log file.
//
// # Processes
//
// Nodes run in their own process groups so that they outlive the `testnet
// up` command. [Down] and [Status] act only on a recorded PID whose
// /proc/PID/cmdline is still `gpumesh node --data DIR` for that node's data
// dir, so a PID reused by an unrelated process is never signalled. This
// package therefore needs Linux (/proc).
//
// The state directory is not locked: run one Up, Down or Restart at a time
// per directory.
//
// # Namespaces (--netns)
//
// With [Options.Netns] the nodes run in a lab of network namespaces
// (package netlab) instead of on 127.0.0.1, 12 by default: node i is
// behind a cone NAT, public, or behind a symmetric NAT as i%3 is 0, 1 or 2
// ([NetnsKind]; node 0, the demo's renter, is behind a cone NAT), in the
// region of [ProfileFor](i). Every node listens on tcp and udp/quic-v1
// port 4001 ([NetnsP2PPort]) and serves its API on 127.0.0.1:5001
// ([NetnsAPI]) inside its own namespace; the testnet reaches the APIs
// through the lab's in-namespace dialer and runs light clients and the
// demo's commands with `ip netns exec`. Public nodes start first, one at a
// time, and are the bootstrap peers (their 11.x addresses).
//
// The lab's WAN (a user-space forwarder: this kernel has no netem) must
// outlive `testnet up`, as the nodes do, so Up starts it in a detached
// process, the hidden `testnet wan --dir DIR` command ([RunWAN];
// [Options.WANBinary]), records its PID in state.json and its log in
// wan.log. [Down] stops the nodes, then the WAN process (only if its
// cmdline is still `wan --dir DIR`), then removes the namespaces and
// whatever still runs in them; [CleanupNetns] does the last part for a
// killed run whose state is gone.
package testnet
