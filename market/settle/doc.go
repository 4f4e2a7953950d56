// Package settle meters leases and settles them: the signed records that
// say what a job used and what was paid for it, their checks, the two
// state machines that exchange them, and their durable storage.
//
// # Records
//
// Each record is the protobuf payload (settle/pb) of a libp2p signed
// envelope with a domain string and a payload type of its own; its hash
// is the SHA-256 of the envelope. See docs/PROTOCOL.md for the fields.
//
//   - Receipt, signed by the supplier: one metered interval of a lease —
//     the attempt, seq (1, 2, 3 ... per lease, across attempts), the
//     interval, GPUs, GPU-milliseconds used, the cumulative usage and its
//     price (market.AmountMicros of the cumulative usage, so rounding
//     never accumulates), the previous receipt's hash (a hash chain), the
//     latest checkpoint's hash, and whether the attempt ended.
//   - Voucher, signed by the renter: acknowledges one receipt (by hash)
//     and pays the lease's cumulative amount up to it, so one voucher is
//     both the ack and the payment. Nonces strictly increase and amounts
//     never decrease; only the best voucher of a lease counts.
//   - Statement, signed by the renter when the lease ends: the last seq
//     acknowledged, the RFC 6962 root over the acknowledged receipts'
//     hashes, the totals, the last voucher's hash and the outcome.
//   - Settlement, signed by the supplier: embeds the statement, so one
//     envelope carries both signatures, like a market.Lease.
//   - Evidence, signed by whoever found it: one or two records that
//     prove their signer misbehaved, checkable by anyone from the records
//     alone (OpenEvidence), gossiped to feed reputation. Its kinds:
//     receipt-equivocation (two receipts for one seq), chain-fork (a
//     receipt whose prev_hash is not its predecessor's hash),
//     inflated-usage (more GPU time than the interval times the GPUs),
//     amount-mismatch (an amount that is not the price of the usage),
//     voucher-nonce-reuse (one nonce, two amounts) and voucher-decrease
//     (a later nonce paying less).
//
// # The exchange
//
// The supplier's Meter issues a receipt every receipt interval; the
// renter's Payer checks it (shape, signer, lease, attempt, seq, chain,
// usage, price, times) and answers with a voucher; the Meter accepts the
// voucher. The attempt is a fencing token: a Payer refuses receipts of
// any attempt but the current one (ErrStaleAttempt), so a supplier the
// job moved away from is not paid for what it meters afterwards. A
// receipt sent again gets the same voucher; a second, different receipt
// for a seq is evidence. At the end the Payer signs a Statement and the
// Meter countersigns it if it matches its own records.
//
// # Durability
//
// Every write the other side will rely on is stored, synced, before the
// call that makes it returns, and the caller answers only after that:
// Meter.Issue keeps a receipt before it is sent, so after a crash Issue
// continues after the last kept receipt and a (lease, seq) is never
// signed twice; Payer.Accept keeps the receipt and its voucher in one
// batch before the voucher is sent; Meter.Accept keeps the best voucher
// before the job goes on. Meters and Payers resume from the Ledger.
//
// # Credit
//
// The supplier runs ahead of payment by at most the lease's credit limit:
// when Meter.Owed (the last receipt's amount less the best voucher's)
// passes it, Meter.OverCredit is true, the supplier pauses or stops the
// job, and Issue refuses another receipt that adds usage (ErrOverCredit).
// The renter pays only for receipts it has checked. So neither side risks
// more than about one receipt interval plus the credit limit: the
// supplier the usage of the interval in which the renter stopped paying
// plus the credit, the renter one interval of usage it did not get.
//
// Audit: Ledger.Verify re-checks everything kept for a lease and says
// what is wrong and where (gpumesh receipts --verify).
//
// # Parts
//
//   - The records (receipts, vouchers, statements, settlements, evidence):
//     their parameters, Seal and Open with their checks, the named errors.
//   - The metering terms of a lease and the role a ledger plays in it
//     (market.Role).
//   - The supplier's and the renter's state machines (Meter, Payer).
//   - Durable storage of both, evidence included (Ledger), and the RFC
//     6962 root of a statement.
//   - The audit of one lease's records (Report).
//   - The evidence topic and its validator (EvidenceValidator).
//
// settle depends on market, p2p and store.
package settle
