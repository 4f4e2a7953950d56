// Package sim is a market simulation: many gpumesh nodes on go-libp2p's
// in-memory network (mocknet), running the real market code against a
// seeded order flow, measured beside an optimal central matcher given
// the same orders. TestMarket runs it with 100 nodes, and with more when
// asked (SIM_NODES; `make sim` runs 1000 and writes bench/SIM.md).
//
// # What runs
//
// Every node's market is built by market/assembly, the code that builds a
// daemon's (package node); an architecture test (TestMarketWiredOnce)
// forbids a copy here. That is: an order book and a price index that
// believe what the simulation's market.Trust does, the orders and trades
// topics joined with the market's validators and the book's caps, the
// book served to peers, a market.Renter, and on selling nodes a
// market.Supplier with its capacity ledger, pricing strategy (fixed,
// auction or dynamic, market.Pricer), claims and bid answerers (of
// gossiped bids and of those renters send straight, BidProtocol). The
// network is a p2p.Network with GossipSub on a mocknet host
// (p2p.Config.Host), a light DHT client that stays idle, and a real
// connection manager with a daemon's watermarks. The store is in memory.
// Left out: the DHT (profiles come from one table of what each supplier
// claims, which is what every node would fetch), the attestations topic
// (one reputation book, reputation.Book, holds the auditors' verdicts
// for all nodes), jobs (a lease's job "starts", a claim, as soon
// as it is made) and the HTTP API.
//
// The fabric (fabric, simHost) lets any two nodes connect, as the
// internet does, linking a pair on its first dial with a one-way latency
// of 5 ms within a region and 40 to 100 ms between them. At start each
// node dials Config.Degree random others; renters then connect to the
// suppliers they rent from, as Renter.Rent does.
//
// # Order flow
//
// NewWorkload draws it from a PCG seeded with Config.Seed: each node's
// region (eu-west, us-east, ap-south); honest suppliers (30% of nodes)
// with one model (h100-sxm, a100-80gb, l40s, rtx4090 by share), 1 to 8
// GPUs, a pricing mode and a list price around the model's reference;
// impostors (4%) that claim 8 GPUs they do not have and undercut the
// market, half of them failed by the auditors' challenges and half
// never challenged; suppliers that leave mid-run (10% of the honest
// ones, half without withdrawing their asks); and renters' requests:
// Poisson arrivals (exponential gaps) at a rate that offers Config.Load
// of the honest GPUs, Pareto job lengths (shape 1.5, at least 3 slots,
// at most 240), a model by share, half of them pinned to the renter's
// region, a maximum price of 0.8 to 1.6 times the reference, and
// Config.Patience slots of retries. Every request is for one GPU, so
// that the central matcher's optimum is an exact flow.
//
// # Warm start
//
// A market that starts empty fills up for about a mean job length (some
// 9 slots) before it is contended; a run of a few slots then measures
// whether renters got answers in time, not how well the market
// allocates scarce GPUs. Config.Warm starts it in its steady state
// instead: before the first slot, each honest GPU is already leased with
// probability Warm, for a remaining length drawn from the residual life
// of the job lengths (P(R = r) = P(L ≥ r) / E[L]). The warm leases are
// real: a renter node takes each from its supplier's posted ask
// (Renter.TakeAsk, the lease protocol) and its job starts; the central
// matcher starts with the same GPUs busy for the same slots (a warm lease
// not made in time, its supplier busy or unreachable, is left out of
// both starts; more than a tenth fails the run). They are not requests,
// and no fill counts them. With Config.Load above 1 (make
// sim: 1.2, warm 0.9) the offered load exceeds what the honest GPUs can
// hold, the central matcher fills well under 90% of the requests, and
// the fill ratio measures allocation under contention; the utilisation
// of the honest GPUs (the share of their GPU-slots that leases held,
// warm ones included, counting each slot's present suppliers) is
// reported for both.
//
// # Time
//
// Time runs in slots on a clocktest.Clock shared by every node
// (records, validators, ledgers, the suppliers' timers), which runs with
// real time and jumps. The slots lie on a grid of that clock, each
// Config.Slot long (2 min; 7 min at 1000 nodes). A slot's requests rent
// at their offsets within Config.RealSlot of real time (2 s: arrivals
// 60 times denser than in simulated time); once all are done the clock
// jumps to the next slot's boundary, firing lease ends, ask renewals
// and reposts, and gossip gets Config.Settle before that slot's renting
// (a jump is at most 4 min, so no live supplier's ask lapses in one).
// Every lease asks for the duration that ends it, once countersigned,
// within 30 s (a rent's time limit) before the boundary of the slot its
// length names: a lease made in slot k for d slots holds its GPU
// through slot k+d-1's renting and frees it before slot k+d's, as the
// central matcher counts it, however long the slots' renting took in
// real time. A warm start's leases end on the boundaries after the
// first slot, which begins two slots after their making begins. A slot
// whose renting ran to within 30 s of its end, or a lease that could
// not be sized so (shorter than the market's 1 min minimum), is counted
// off the grid: TestMarket fails a run with any.
//
// # The central matcher
//
// RunCentral sees every order as it arrives and knows every honest
// supplier's free GPUs and pricing rules; it clears each slot with an
// exact maximum matching of the slot's open requests (new and retrying)
// to free GPUs, a min-cost max flow (flowNet) that among maximum
// matchings fills first the requests about to give up and then the
// cheapest. It is optimal slot by slot, not in hindsight (that problem,
// fixed intervals on machines with eligibility, is NP-hard), and
// impostors give it nothing.
//
// # Figures (Result, Table)
//
//   - fill: requests filled by the market (leases from honest
//     suppliers) over the central matcher's;
//   - price convergence per model: the median and relative spread
//     ((p90 - p10) / median) of trade prices in the first and last third
//     of the slots, and the spread of the nodes' price-index medians at
//     the end;
//   - messages per node per second: gossip messages (orders and trades)
//     each node's validator was handed, which pubsub does once per
//     message and node, per simulated and per real second; streams
//     opened or accepted per node per simulated second;
//   - gossip delivery p50 and p99: from the publish (the author's own
//     validation) to each other node's, by the real monotonic clock, and
//     the mean share of nodes each message reached;
//   - the rules: leases from impostors, GPUs leased twice at once, and
//     leases that fail a third party's check (both signatures, terms,
//     kept as confirmed by both sides);
//   - why the market missed what the central matcher filled: how many
//     misses ran out of time (a supplier that did not answer within
//     Config.Wait, a publish or rent past its deadline, a lease released
//     before its job started) against those no supplier would serve;
//     and how many leases their supplier released, unclaimed, before the
//     simulation started their job. A job starts (Supplier.Claim) as
//     soon as Renter.Rent returns its lease, as a node's job controller
//     starts one, but on a saturated machine the real seconds in between
//     can pass the lease's claim window (30 s to 1 min by the clock,
//     which runs with real time within a slot): the supplier then rightly
//     frees the GPU, the request is not filled, and it tries again while
//     it is patient.
//
// Gossip costs every node a check of every order, so the work grows with
// the square of the nodes: on a small machine a large run is CPU-bound,
// and its real-time figures (delivery delays, messages per real second)
// say as much about the machine as about the protocol. TestMarket's large
// run so spreads each slot over real time in proportion to the square of
// its nodes (largeRun: at 1000 nodes 2 minutes of renting and 1 of
// settling a slot); spread in proportion to the nodes only, a 1000-node
// run on 2 cores backed its nodes' validation queues up to pubsub's
// limit and measured the machine, not the market.
package sim
