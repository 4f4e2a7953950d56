// Package node is gpumesh's composition root: it loads the configuration
// and the node's identity, opens the store, detects the GPUs, starts the
// libp2p network, and wires the parts (market, verify, the job runtime)
// together with their loops. It holds no market or verification logic of
// its own: each part lives in its package and node joins it to a topic,
// a loop or an API route.
//
// What it does, part by part:
//
//   - Construction and shutdown: New and Close, the options tests inject
//     parts with (a clock.Clock for the meter's and the supplier's timers
//     among them), the store's keyspaces, the bootstrap addresses.
//   - Configuration and identity: the effective configuration (defaults,
//     file, environment, flags), the per-job limits it sets, and the
//     node's key in its data dir.
//   - Presence: the heartbeat, the profile advertisement, the profile
//     cache (KnownProfiles) and the peer table.
//   - The market's wiring: order book, price index, the orders and trades
//     topics, the supplier and its pricing; leases as the CLI and the API
//     show them (api.LeaseView), built from market's lease persistence;
//     the node's market.Trust over its profiles and reputation.
//   - Verification: the reputation book and the attestation topic, and the
//     audit loop that challenges suppliers.
//   - Jobs: the settlement ledger, the evidence topic (validated by
//     settle.EvidenceValidator), the job executor and controller, and the
//     controller's job.Dialer over the node's host (connect, streams, the
//     renter's own liveness).
//   - The local HTTP API's backend: the node as the handler of package
//     node/api sees it (an api.Backend), offers (market.MatchOffers over
//     the known profiles, the book and the reputation) included.
//   - Metrics: the node's own (internal/metrics) beside libp2p's in its
//     registry: why a gossip record was refused, whichever validator
//     refused it, and the gauges of jobs and the store read at scrape
//     time; the parts count the rest through their configs.
//   - The version and the software string.
//
// Sub-packages: api (the HTTP API), job (a renter's workload on leased
// GPUs), runtime (how a supplier runs one), and light, the light client
// that search, rent and challenge run on without a node (light imports no
// part of node).
//
// Configuration: ConfigKeys is the one table of configuration keys (name,
// flag, environment variable, TOML type, default, help, and a setter that
// parses the value into Config); a Config is loaded from it (defaults <
// file < environment < flags), cmd/gpumesh registers its flags from the
// same keys, and docs/suppliers.md carries its table (KeysMarkdown).
//
// Long-lived parts take a context or have Close; nothing here is global.
package node
