// Package challenge is the arithmetic of gpumesh's benchmark challenge
// (SPEC §4.6): the work a prover does for each claimed GPU, the
// commitment it sends, and the checks a challenger makes. It does no
// networking and keeps no global state; a stream protocol carries its
// values and measures time on the challenger's own clock.
//
// # Derivation
//
// Every value is derived from 32-byte seeds with SHA-256 and ChaCha8
// (math/rand/v2, the C2SP chacha8rand generator). The prefix is that of
// challenge protocol v2 (v1, whose memory proof hashed each window, is
// retired), so nothing derived under v1 verifies under v2:
//
//	subSeed(seed, label, i) = SHA-256("gpumesh/challenge/v2/" || label || 0x00 || seed || uint32 BE i)
//	stream(key)             = the Uint64 outputs of ChaCha8(key), each as 8 little-endian bytes
//
// For a GPU's seed and size n (a multiple of 8), row i of A is the first n
// bytes of stream(subSeed(seed, "A", i)) and row k of B the first n bytes
// of stream(subSeed(seed, "B", k)). Rows are derived independently so
// that a verifier can derive one row of A without the rest.
//
// # Work
//
// X_0 = A and, for t < T,
//
//	X_{t+1} = mix((X_t · B) mod 256),   mix(y) = y XOR (y >> 4) on each byte,
//
// all exact: each entry's products are summed in integers and reduced
// mod 256. The mix step is an addition to the plain chain
// X_{t+1} = X_t·B mod 256: that chain is linear over Z/256, so
// X_T = A·B^T, and a prover could compute B^T by repeated squaring in
// about log2 T products instead of T. The byte-wise mix is not linear
// over Z/256, so the chain has no such shortcut; on a GPU it is a free
// epilogue of the INT8 GEMM. Row i of X_{t+1} depends only on row i of
// X_t, which is what makes a single row cheap to recompute.
//
// # Phases (per claimed GPU, all GPUs of a supplier at once)
//
//  1. Challenge: the challenger sends a fresh seed per GPU and Params
//     {N, T, K} (RealParams for a real device, SimParams for a simulated
//     one).
//  2. Commit: the prover returns the Merkle root over the rows of X_T.
//     Leaves are SHA-256(0x00 || uint32 BE row index || row), inner nodes
//     SHA-256(0x01 || left || right); at a level with an odd number of
//     nodes the last one is promoted unchanged: RFC 6962's tree, package
//     merkle's, the one receipts_root uses too. The time to the commit,
//     on the challenger's clock, is judged by a TimeBound.
//  3. Sweep: the challenger then draws r = DrawVector(fresh seed, N) in
//     F_p^N, p = 2^61 − 1 (ChaCha8 Uint64 values masked to 61 bits, the
//     value p itself skipped); the prover returns s = X_T·r mod p.
//  4. Open: the challenger then draws K distinct rows with DrawRows
//     (fresh seed; unbiased indices by rejection, repeats skipped); the
//     prover returns each row with its Merkle proof (sibling hashes from
//     the leaf up, promoted levels skipped, at most MaxProofLen).
//  5. Verify: for each opened row i the challenger checks the proof
//     against the root (ErrBadProof), s_i = row·r mod p
//     (ErrSweepMismatch), and the row against row i of A chained through
//     T row-times-matrix products (ErrWrongRow): T·N² instead of the
//     prover's T·N³. See VerifyRow and Verifier.
//
// A prover that leaves out or corrupts a fraction f of rows passes with
// probability about (1−f)^K; K = RealK = 66 makes that < 0.1% for
// f = 0.1. The verifier's work over the prover's (CostRatio) is about
// K/N: 0.2% at real sizes, 26% at the default simulated size N = 256.
//
// # Sizes
//
// Real devices use N = RealN (32768) and choose T so that the chain takes
// TargetSeconds at Efficiency of the profile's dense INT8 peak
// (ExpectedSeconds); a time below the full peak is impossible
// (ErrTooFast), above SlowTolerance times the expectation too slow
// (ErrTooSlow). Simulated devices are scaled down by one factor,
// DefaultSimScale: N by it, memory by its square; T and K stay those of
// the real device (T at least SimMinT), and the checks are the same. A
// simulated device's time is judged against the challenger's own
// measurement of the same work on the same backend (SimTimeBound).
//
// # Memory proof
//
// Seed-derived data can be regenerated, so the memory proof rests on a
// deadline. The prover fills Buffers buffers of BufferBytes (MemFill of
// the claimed memory, scaled by scale² when simulated), buffer j being
// stream(subSeed(seed, "mem-buffer", j)) (FillMemBuffer). From the
// challenger's chain key σ_0 it answers Rounds chained rounds. In round s,
// buffer j's window of WindowBytes starts at offset 64·u_j, the u_j drawn
// by unbiased rejection from ChaCha8(subSeed(σ_s, "mem-offsets", s)); its
// fold point ρ_{s,j} is the j-th value of ChaCha8(subSeed(σ_s, "mem-rho",
// s)) masked to 61 bits, drawn again while it is 0, 1 or P; the window is
// folded,
//
//	F_{s,j} = MemFold(window, ρ_{s,j}) = Σ_k (w_k mod P)·ρ^k mod P   (w_k its little-endian words)
//
// and its digest is the first 8 bytes of SHA-256("gpumesh/challenge/v2/
// mem-fold" || 0x00 || σ_s || uint32 BE s || uint32 BE j || uint64 BE F);
// σ_{s+1} = SHA-256("gpumesh/challenge/v2/mem-round" || 0x00 || σ_s ||
// uint32 BE s || the digests as uint64 BE). Each round's offsets and
// points depend on the previous round's answer, so the rounds cannot be
// worked ahead or in parallel. Every term of a fold is independent of the
// others, so a GPU folds a window at the speed it reads it: the deadline
// is set by memory bandwidth, not by the latency of a hash chain (v1's
// SHA-256 of each window was 65,536 dependent compressions). The answer
// is every digest. The challenger replays the chain from the digests,
// spot-checks Checks of them (chosen from a seed it draws after the
// answer) by regenerating and folding the windows, and compares the time
// it measured with a deadline: from the claimed bandwidth for a real
// device (MemRealDeadline: MemEfficiency of the datasheet bandwidth plus
// per-round allowances; rounds enough for MemTargetSeconds), from its own
// honest run (MemCalibrate, MemSimDeadline) for a simulated one.
//
// MemProver draws the offsets and points and hashes the digests; a
// MemBackend holds the buffers and folds the windows: NewCPUMemBackend
// in host memory (simulated devices), a GPU prover's in device memory
// (NewMemProverOn).
//
// What it proves: a prover that keeps only a fraction F of whole buffers,
// and nothing of the others, must, every round, regenerate each dropped
// buffer's stream up to the window (generating one stream from its start
// is sequential: no number of cores does it faster), on average (BufferBytes −
// WindowBytes)/2 + WindowBytes bytes: 144 MiB, 36 ms at 4 GB/s, against
// a real deadline of 5 to 12 ms a round; or it keeps the rest in host
// memory, read at host bandwidth instead of the card's; or it makes
// digests up and passes the spot checks with probability at most
// F^Checks (0.8^32 < 0.1%). A card of half the claimed bandwidth needs
// twice the datasheet time, more than the deadline (1/MemEfficiency of
// it plus allowances). What it does not prove: a prover that stores
// ChaCha8 states at intervals (a few percent of the memory) regenerates
// any window cheaply, on a GPU in parallel; defeating that needs a
// memory-hard labelling (future work). The efficiency figure is an
// assumption to be measured on known-good hardware.
//
// # Backends and cheats
//
// CPUProver is the pure-Go Prover for simulated devices and tests.
// NewCheatProver wraps it with a Cheat (ParseCheat reads
// `slow=F,skip=F,wrong=F,mem=F,replay`) to simulate impostors in
// testnets; NewMemProver (and NewCPUMemBackend) take Cheat.MemKept.
package challenge
