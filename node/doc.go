// Package node is gpumesh's composition root: it loads the configuration
// and the node's identity, opens the store, detects the GPUs, starts the
// libp2p network, and wires the parts together with their loops: the
// heartbeat, the profile advertisement, and the profile cache. It also
// serves the node's local HTTP API, whose routes, types, handler and
// client live in package node/api (apibackend.go is the node as the
// handler sees it, an api.Backend), and holds the light client used by
// `gpumesh search`.
//
// Configuration: config_keys.go is the one table of configuration keys
// (name, flag, environment variable, TOML type, default, help, and a
// setter that parses the value into Config); config.go loads a Config
// from it (defaults < file < environment < flags), and cmd/gpumesh
// registers its flags and README.md its table from the same keys.
//
// Long-lived parts take a context or have Close; nothing here is global.
package node
