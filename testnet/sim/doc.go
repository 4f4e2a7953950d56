// Package sim is a market simulation: many gpumesh nodes on go-libp2p's
// in-memory network, running the real market code against a seeded order
// flow, measured beside an optimal central matcher given the same orders.
package sim
