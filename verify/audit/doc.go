// Package audit runs benchmark challenges over libp2p: the prover side
// that a supplier serves on ChallengeProtocol (/gpumesh/challenge/2.0.0),
// and the challenger side
// that any node (or a light client) uses to make a supplier prove every
// GPU of a model it claims. The math is package verify/challenge; the
// verdict is a signed attestation of package verify/reputation.
//
// One challenge, on one authenticated stream opened by the challenger:
//
//	→ ChallengeRequest  (challenge ID, model, the claimed GPU UUIDs, one
//	                     fresh seed per GPU, sizes n, T, k)
//	← Commit            (one Merkle root per GPU)      timed on the
//	                                                   challenger's clock
//	→ SweepRequest      (a seed for r, drawn after the commit)
//	← SweepResponse     (X_T·r mod p per GPU)
//	→ OpenRequest       (a seed for the rows, drawn after the sweep)
//	← OpenResponse      (k rows per GPU with Merkle proofs)
//	→ MemPrepare        (a seed: fill the claimed memory; not timed, its
//	                     deadline grows with the bytes to fill)
//	← MemReady
//	→ MemRequest        (σ0)
//	← MemDone           (a commitment to the digests)  timed
//	← MemResponse       (chained digests per GPU)
//
// Version 1 (/gpumesh/challenge/1.0.0), whose memory proof no real GPU
// could meet, is retired: a prover answers a version-1 request with a
// refusal marked busy that says "challenge protocol 1.0.0 is retired, use
// 2.0.0" (RetiredRefusal), and a challenger that finds a prover speaking
// only version 1 records OutcomeVersion, neither a failure nor down.
//
// The challenger judges the commit time against the device profile of the
// claimed model (real GPUs) or against its own run of the same work made
// at the same time (simulated GPUs, so that both meet the same load),
// checks every opened row by recomputing it, and checks the memory
// proof's digests and deadline. The verdict is signed and gossiped by the
// caller.
//
// The prover answers simulated GPUs with the CPU prover and real ones
// with a DeviceProver (package verify/cuda) made, per challenge, for
// exactly the GPUs it names, on their own devices; without one it refuses a
// challenge of real GPUs at once with the code "no-prover", which the
// challenger records as OutcomeNoProver: neither a failure nor down. A
// challenge of real GPUs that a lease holds (ProverConfig.Leased) is
// refused at once, before any work, as busy (CodeLeased) until the lease
// lapses, and a device without room for the memory proof's buffers
// (ErrDeviceMemory: a job holds its memory) refuses the memory proof as
// busy (CodeNoMemory): neither judges the GPUs. It refuses sizes other than those its own profile implies, and, as "busy"
// with a retry-after (BusyError: neither a pass nor a failure), more than
// one challenge at a time, a peer that challenges it again within its
// PeerGap, and strangers once their challenges took StrangerShare (a
// tenth) of its time over the last StrangerWindow (10 minutes); the
// challengers ProverConfig.Priority names (trusted peers, renters about
// to lease) are not held to that share. A stranger's challenge holds the
// prover no longer than what is left of the share when it is admitted
// (at least the longest challenge's time): past that its stream is
// reset, however slowly it answers, so strangers together never exceed
// the share. The work runs on a context that
// ends with the stream: a challenger that resets or closes it, or goes
// away, stops it.
package audit
