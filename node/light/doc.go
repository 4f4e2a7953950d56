// Package light is gpumesh's light client: a short-lived peer that joins
// the network through bootstrap peers in DHT client mode, serves nothing,
// and leaves when its command is done. `gpumesh search`, `rent` and
// `challenge` run on it, and so can any program that only buys.
//
// One Client type does it all; its options say what it needs:
//
//   - New and Close: joining through the bootstrap peers, on WithNetwork's
//     network (failing with p2p.ErrWrongNetwork when they are all on
//     another), and, WithRenting, the orders topic and an ephemeral listen
//     address (a bid must list one; suppliers answer over connections the
//     renter opens).
//   - Search: suppliers' signed profiles from the bootstrap nodes'
//     directories (p2p.DirectoryProtocol, one round trip), or, when none
//     answers or WithCrossCheck, through their DHT provider records, each
//     profile checked here, priced from a bootstrap node's order book and
//     scored by reputation, then matched (market.MatchOffers).
//   - Rent and TakeAsk, which lease GPUs (market.Renter) screened by that
//     reputation; WithStore keeps the leases made.
//   - What every command reads from the first bootstrap peer that answers:
//     its order book and the attestations a reputation book is built from
//     (checked here, the bootstrap peers pre-trusted).
//
// light sits beside node, not under it: it imports market, catalog,
// verify, p2p and store, never node, so node (and cmd) may import it.
package light
