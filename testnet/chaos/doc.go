// Package chaos runs a testnet of real gpumesh node processes through
// faults under a steady stream of rents and jobs, and then checks, from
// every node's own store, what must hold whatever happened.
//
// # The run
//
// Run starts Options.Nodes nodes (package testnet, kernel-chosen ports),
// some of them with clocks off by Options.Skew (ahead and behind, through
// the node's hidden --clock-offset flag), and drives them through three
// phases in turn while the workload runs:
//
//   - calm: no fault, the baseline of the other two;
//   - flood: one peer of the run's own (flooder) publishes valid-signed
//     asks as fast as Options.FloodRate, both of a real model, undercutting
//     everyone, under a profile that claims 8 GPUs it does not serve, and
//     of made-up models; it answers no bid, and takes lease proposals
//     without answering them;
//   - kills: every Options.KillEvery a node that is not a bootstrap peer
//     is killed with SIGKILL, left down for Options.Downtime, and
//     restarted on its data dir (testnet.Restart): a random one, and every
//     other time a supplier running a job; the renters' own nodes are
//     among those killed.
//
// The workload: on each renter node, Options.JobLoops loops submit a job
// (a shell script that counts, checkpointing every second, with receipts
// every 500 ms) through the node's API and follow it to its end; and a
// cold light client (a new key each time, as a fresh `gpumesh rent`)
// rents one GPU of a random model every Options.RentEvery.
//
// # The checks (Report)
//
// After the phases the workload stops taking new work and the jobs still
// running are waited for; then every node is stopped and its Badger
// store opened again:
//
//   - nothing acknowledged lost: every receipt a renter keeps (a renter
//     keeps only the receipts it paid a voucher for) is kept, byte for
//     byte, by the supplier that signed it; the best voucher a supplier
//     keeps is kept by the renter; both sides' ledgers verify
//     (settle.Ledger.Verify);
//   - no double-booked GPU: on each supplier, no two leases' receipts
//     meter the same GPU over overlapping intervals (beyond
//     settle.MaxOverlap);
//   - every job ended succeeded, on its first supplier or after a
//     failover, and no job process outlived the run;
//   - the flooder leased nothing and each node's book held at most
//     market.MaxAsksPerSupplier of its asks;
//   - recovery: how long a restarted node took to be ready and found by
//     search, and how long a job whose supplier was killed took to run
//     again elsewhere.
//
// Rents and jobs are also counted per phase, so that the flood and kill
// phases can be read beside the calm one.
package chaos
