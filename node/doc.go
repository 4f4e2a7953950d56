// Package node is gpumesh's composition root: it loads the configuration
// and the node's identity, opens the store, detects the GPUs, starts the
// libp2p network, and wires the parts (market, verify, the job runtime)
// together with their loops. It holds no market or verification logic of
// its own: each part lives in its package and node joins it to a topic,
// a loop or an API route.
//
// Where each concern is:
//
//   - node.go: New and Close, the options tests inject parts with (a
//     clock.Clock for the meter's and the supplier's timers among them),
//     the store's keyspaces, bootstrap addresses.
//   - config.go, joblimits.go: the effective configuration (defaults, file,
//     environment, flags) and the per-job limits it sets.
//   - identity.go: the node's key in its data dir.
//   - loops.go: the heartbeat, the profile advertisement and the profile
//     cache (KnownProfiles), and the peer table.
//   - market.go: the market's wiring: order book, price index, the orders
//     and trades topics, the supplier and its pricing.
//   - leases.go: leases as the CLI and the API show them (api.LeaseView),
//     built from market's lease persistence (market.Leases).
//   - trust.go: the node's market.Trust over its profiles and reputation.
//   - verify.go, audit.go: the reputation book and the attestation topic;
//     the audit loop that challenges suppliers.
//   - jobs.go: the settlement ledger, the evidence topic (validated by
//     settle.EvidenceValidator), the job executor and controller;
//     jobnet.go: the controller's job.Dialer over the node's host
//     (connect, streams, the renter's own liveness).
//   - api.go, apibackend.go: the local HTTP API: its routes, types, handler
//     and client live in package node/api; apibackend.go is the node as
//     the handler sees it (an api.Backend), offers (market.MatchOffers
//     over the known profiles, the book and the reputation) included.
//   - metrics.go: the node's own metrics (internal/metrics) beside
//     libp2p's in its registry: why a gossip record was refused, whichever
//     validator refused it, and the gauges of jobs and the store read at
//     scrape time; the parts count the rest through their configs.
//   - version.go: the version and the software string.
//
// Sub-packages: api (the HTTP API), job (a renter's workload on leased
// GPUs), runtime (how a supplier runs one), and light, the light client
// that search, rent and challenge run on without a node (light imports no
// part of node).
//
// Configuration: config_keys.go is the one table of configuration keys
// (name, flag, environment variable, TOML type, default, help, and a
// setter that parses the value into Config); config.go loads a Config
// from it (defaults < file < environment < flags), and cmd/gpumesh
// registers its flags and README.md its table from the same keys.
//
// Long-lived parts take a context or have Close; nothing here is global.
package node
