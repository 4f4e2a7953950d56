// Package market is gpumesh's marketplace: offers and the filter language,
// signed orders (asks, bids, cancels), quotes, dual-signed leases, trade
// prints, the order book, the supplier's capacity ledger, pricing
// strategies and the price index, and the two sides of matching.
//
// # Parts
//
//   - The records (IDs, asks, bids, cancels, quotes, proposals, leases,
//     trade prints), their Seal and Open, the protocol IDs and limits,
//     lease terms, and the named errors.
//   - The gossip validators of the orders and trades topics.
//   - The order book and the protocol that serves it (ServeBook).
//   - Offers (one supplier's GPUs of one model, built from its profile and
//     matched against a filter: MatchOffers) and the filter language.
//   - The two sides of a lease (Renter, Supplier), and the supplier's
//     release of leases on which no job starts.
//   - Gang leases (Renter.RentGang): leases on several distinct
//     suppliers, all or nothing, for a cluster job.
//   - What a renter asks for (RentTerms: count, duration, max price),
//     parsed and checked once for the CLI, the API and the node.
//   - The one owner of a supplier's leases (LeaseBook): granting,
//     claiming and releasing them, over the capacity ledger
//     (reservations).
//   - Lease persistence, both sides (LeaseRecord, Leases, GetLease), with
//     typed LeaseState and Role.
//   - Pricing strategies, and the price index with the Trust it counts
//     trade prints by.
//
// # Matching without a central matcher
//
// Suppliers post asks and renters post bids on the orders topic; every
// node keeps an order book of both. A renter first connects to the
// suppliers whose asks could match its bid (auction ones even above its
// maximum, since they quote down to a floor) and sends them the bid
// straight (BidProtocol) as well as by gossip, without waiting for the
// gossip, which a loaded node's GossipSub can hold for seconds (Renter.Close
// waits for it); a supplier that can serve a
// bid sends a signed Quote straight to the bidder (QuoteProtocol) over
// that connection, never dialling the bidder, and at most QuotesPerBidder
// in a burst to any one; one that has the model but cannot serve it sends
// a decline saying why. The renter ranks
// the quotes (price, then reputation, then round-trip time) and sends a
// signed LeaseProposal that embeds the chosen quote (LeaseProtocol). The
// supplier reserves capacity atomically in its Ledger, countersigns a Lease
// that embeds the proposal (so one envelope carries both signatures), and
// holds the reservation for ConfirmWindow until the renter confirms; then
// it publishes a TradePrint, from which every node builds a price index.
// A lease is paid for through the job that runs on it, billed from the
// lease's start; one on which no job starts within its claim window is
// released, and a renter's leases with no job on them are capped (see
// Lease.ClaimWindow).
// When nothing matches, the renter explains why from the declines, its own
// checks and an order book (see Renter.Rent).
//
// The exchange has two phases on one stream, reserve and then confirm or
// release (LeaseConfirm.release_id, which frees the GPUs at once and,
// unlike a lapse, bars nobody), so a renter can hold several reservations
// at once and commit to all or none: a gang lease reserves Nodes plus a
// few spares in parallel, confirms the best Nodes and releases the rest.
// Reservations never wait (a supplier too busy refuses at once), so
// contending gangs cannot deadlock.
//
// # Trust
//
// A valid signature proves only that a key signed: anyone can make keys.
// So what a node shows and counts depends on a Trust the node injects
// (market cannot read profiles or attestations): the book lists an ask
// only while its supplier's profile has those GPUs, and is capped per
// model, relay and author (see Book); the price index counts a trade
// print only from a supplier whose profile lists the leased GPUs and
// whose reputation is not below the floor, once per supplier–renter pair
// an hour, with a median over suppliers (see PriceIndex); and a renter
// leases only from proven suppliers unless told otherwise (see
// RentRequest.Proven).
//
// # Filters
//
// A filter is a list of space-separated terms KEY OP VALUE with no spaces
// inside a term, shared by search, rent and the HTTP API:
//
//	model=h100-sxm|a100-80gb count>=8 cc>=9.0 price<=2.10 verified=true
//
// OP is one of = != < <= > >=; "|" separates alternatives of a value and is
// allowed only with = (any alternative matches) and != (none matches). All
// terms must hold; the empty filter matches everything. See ParseFilter.
//
// Money is integer micro-units (10⁻⁶ of the price currency) per GPU-hour,
// parsed exactly, never through a float. The wire formats are in
// docs/PROTOCOL.md. market depends on p2p, store and the leaves catalog
// and money, never on node or verify: what it needs of verification
// (reputation) is passed in (Trust, ScoreFunc, OfferInputs).
package market
