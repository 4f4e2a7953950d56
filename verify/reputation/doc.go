// Package reputation holds gpumesh's attestations — signed verdicts of an
// auditor about a supplier — and the reputation each node computes from
// them (SPEC §4.6).
//
// # Attestations
//
// An attestation (verify/pb.Attestation) is the payload of a libp2p signed
// envelope with domain AttestationDomain ("gpumesh-attestation-v1") and
// payload type AttestationPayloadType ("/gpumesh/attestation/1"), at most
// MaxAttestationSize (4 KiB), gossiped on AttestationTopic
// ("/gpumesh/attestations/2.0.0"). Its kind is "challenge" (the verdict of
// a benchmark challenge: passed, reason, GPUs and their UUIDs proven,
// measured and expected throughput in integer milli-ops, rows checked,
// duration, the 32-byte challenge ID) or "uptime" (a ping answered in time
// or not). OpenAttestation checks, in order: size, signature, payload type
// and Ed25519 key (p2p.Open); attester is the signer (p2p.ErrSignerMismatch);
// version 1 and a non-zero nonce; created_ms within [now − 24 h, now +
// p2p.ClockSkew] (p2p.ErrExpired, p2p.ErrFutureDated); subject a peer ID
// other than the attester, kind, at most 256 distinct UUIDs of 1..128
// bytes, challenge_id of 32 bytes (may be empty for uptime), reason at
// most 256 bytes, model empty or a slug, gpus at most 256, no negative
// figure (p2p.ErrMalformed). AttestationValidator also requires the pubsub
// author to be the attester, refuses an (attester, nonce) seen in the
// last 24 h (ErrReplayed) and keeps a token bucket per author
// (p2p.ErrRateLimited).
//
// # Reputation
//
// A Book keeps the attestations it is given (in keyspace "attestations",
// key the envelope's SHA-256, for Config.Retention, 7 days by default) and
// computes, as of now, for peers i (attesters) and j (subjects):
//
// Decay. An attestation a created at time c(a) weighs
//
//	w(a) = 2^(−max(0, now − c(a)) / H)
//
// with H = Config.HalfLife (24 h). For each pair (i, j), over challenge
// attestations of i about j: s_ij = Σ w(a) over passes, f_ij = Σ w(a) over
// failures.
//
// Local trust (EigenTrust). l_ij = max(0, s_ij − f_ij), and
//
//	c_ij = l_ij / Σ_k l_ik     when Σ_k l_ik > 0,
//	c_ij = p_j                 otherwise (i trusts nobody: it defers to
//	                           the pre-trusted),
//
// where p is uniform over Config.PreTrusted (the book's own peer when
// that is empty) and 0 elsewhere.
//
// Global trust. t⁽⁰⁾ = p, t⁽ᵏ⁺¹⁾ = (1 − α)·Cᵀ·t⁽ᵏ⁾ + α·p with α =
// Config.Alpha (0.15), iterated until ‖t⁽ᵏ⁺¹⁾ − t⁽ᵏ⁾‖₁ < 1e-9 (at most 200
// iterations). Σ t = 1. The weight of attester i is its scaled trust
// τ_i = t_i / max_k t_k ∈ [0, 1] (Score.Trust). An attester is trusted
// when τ_i > 1e-9: trust only flows along positive local trust from the
// pre-trusted peers, so a ring of attesters that praise each other and an
// impostor, but that no trusted peer has passed, has τ = 0 exactly and
// carries no weight, however many they are. An attester earns standing by
// being pre-trusted or by passing challenges of trusted attesters.
//
// Everything below counts trusted attesters only.
//
// Reputation. With S_j = Σ_i τ_i·s_ij and F_j = Σ_i τ_i·f_ij (a
// trust-weighted Beta(1, 1) estimate of the chance that j passes):
//
//	B_j = (1 + S_j) / (2 + S_j + F_j)
//	R_j = B_j / 2   if j is failing,   else R_j = B_j
//
// where j is failing when its latest failed challenge by a trusted
// attester is at least as recent as its latest passed one. So a supplier
// nothing is known about scores exactly 0.5, and a failing supplier always
// scores below DefaultFloor (0.5) until a trusted attester passes it again;
// its old failures then weigh less as they age.
//
// Verified. V_j holds when at least Config.MinAttesters (3) distinct
// trusted attesters' latest challenge of j passed, j is not failing, no
// GPU UUID of j is in conflict, and j is not proven on simulated GPUs
// alone while it claims real ones.
//
// Simulated GPUs. A pass whose attestation says simulated (the GPUs were
// simulated, challenged at simulated sizes) proves nothing about
// hardware. When j's latest pass by a trusted attester is one
// (Score.SimulatedOnly), j is neither verified nor proven unless its
// profile claims simulated GPUs only (ObserveGPUs with onlySimulated); a
// book that has not seen j's profile (a light client) takes it as
// claiming real GPUs.
//
// Conflicts. The GPU UUIDs j claims are those of its profile (ObserveGPUs)
// and those of its latest passed challenge by a trusted attester. A UUID
// claimed by two or more suppliers is a conflict (Conflicts); each of them
// has Score.Conflict set and is not verified until the claim goes away (a
// new profile, a newer challenge, or the attestation ageing out).
//
// Uptime. U_j = Σ_i τ_i·Σ_{pings passed} w(a) / Σ_i τ_i·Σ_{pings} w(a),
// over uptime attestations; 0 when there are none (Score.Pings = 0).
//
// Passes, Fails, Pings and Challengers count trusted attesters'
// attestations and distinct attesters without decay; LastChallenge is the
// latest trusted challenge's creation time.
//
// Scores are computed lazily: Add and ObserveGPUs invalidate them, and a
// computation serves reads for at most Config.Refresh (1 min) so that
// decay is applied as time passes. A computation costs O(A + k·E) for A
// attestations, E attester–subject pairs and k iterations.
//
// Proven. A renter leases by default only from proven suppliers
// (Score.Proven): verified, or passed by a trusted attester and above
// DefaultFloor, in no conflict, and not proven on simulated GPUs alone
// while claiming real ones. Book.Standing gives a supplier's
// reputation, verified status and uptime in the shape market takes.
//
// Known limits: a trusted attester that turns hostile can fail an honest
// supplier, which is then failing until another trusted attester passes
// it; and a profile that claims another supplier's UUID puts both in
// conflict, as SPEC §4.6 requires, until one of them is resolved.
//
// Package reputation imports p2p, store and verify/pb; never node or
// market.
package reputation
