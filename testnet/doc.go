// Package testnet runs a local gpumesh network: N real `gpumesh node`
// processes on 127.0.0.1, each with simulated GPUs and a region, for
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
// Node i listens for libp2p on tcp and udp (QUIC) port BasePort+i and serves
// its HTTP API on 127.0.0.1:BasePort+1000+i. [Up] checks that every port is
// free before it starts anything. Node i gets the simulated hardware and
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
package testnet
