package challenge

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gpumesh/gpumesh/catalog"
)

// Memory-proof sizing and deadlines (documented assumptions; see
// TestMemMargins for what they give per catalog model).
const (
	// MemFill is the fraction of the claimed memory the buffers fill.
	MemFill = 0.9
	// RealMemBuffer is a real device's buffer size.
	RealMemBuffer = 256 << 20
	// RealMemWindow is a real device's window: an eighth of each buffer
	// is folded per round, large enough that reading, not the per-round
	// overhead, sets a round's time, small enough that a prover that
	// dropped a buffer and kept nothing of it takes several rounds' time
	// to regenerate its stream up to a window. One that kept the ChaCha8
	// key at every 992-byte re-key (about 3% of the memory) enters the
	// stream at any of them and regenerates a window quickly, in
	// parallel (docs/PROTOCOL.md §20): this window does not stop that.
	RealMemWindow = RealMemBuffer / 8
	// MemTargetSeconds is how long a real device's rounds take at its
	// datasheet bandwidth, at least: long beside the round trip a
	// challenger allows on top of the deadline (at most 250 ms).
	MemTargetSeconds = 2.0
	// RealMemMinRounds is the fewest rounds of a real device.
	RealMemMinRounds = 16
	// RealMemChecks is the number of digests a challenger checks.
	RealMemChecks = 32
	// MemEfficiency is the fraction of the datasheet bandwidth a real GPU
	// must sustain folding the windows. A fold reads each byte once and
	// every word is independent, so a kernel streams it near its copy
	// rate (about 0.9 of the datasheet figure on an H200); a device with
	// half the claimed bandwidth needs 2 > 1/MemEfficiency times the
	// datasheet time even at its own full bandwidth, and misses.
	MemEfficiency = 0.6
	// MemRoundOverhead is the allowance per round on a real GPU (the
	// launch, the synchronisation and the copy of the folds back), and
	// MemBufferOverhead the allowance per buffer and round for the host's
	// part (its offset and ρ drawn, its digest hashed: 171 ns on one core
	// of a 2-core development VM, BenchmarkMemRoundHost).
	MemRoundOverhead  = 100 * time.Microsecond
	MemBufferOverhead = 500 * time.Nanosecond
	// SimMemBuffers is the number of buffers of a simulated device.
	SimMemBuffers = 16
	// SimMemRounds is the number of rounds of a simulated device.
	SimMemRounds = 4096
	// SimMemFactor enlarges a simulated device's memory beyond its
	// matrices' scale² (1 MiB for a 16 GiB t4 at scale 128 was too
	// little): regenerating a dropped buffer then costs about ten times
	// an honest round, not three, so that a prover holding 80% of its
	// memory misses MemSimTolerance even when the challenger's own
	// answer, which sets the deadline, is slowed by load (it passed one
	// challenge in two on a loaded 2-core machine before).
	SimMemFactor = 4
	// MemSimTolerance and MemSimSlack bound a simulated device's time
	// against the challenger's own measurement (MemCalibrate).
	MemSimTolerance = 2.5
	MemSimSlack     = 50 * time.Millisecond
	// MaxMemBuffers bounds MemParams.Buffers, MaxMemRounds its Rounds.
	MaxMemBuffers = 4096
	MaxMemRounds  = 1 << 14
	// MaxMemChecks bounds MemParams.Checks.
	MaxMemChecks = 1024
)

// MemParams are the sizes of a memory proof: Buffers buffers of
// BufferBytes each, Rounds chained rounds that each fold a window of
// WindowBytes in every buffer, and Checks spot checks by the verifier.
type MemParams struct {
	Buffers     int
	BufferBytes int
	WindowBytes int
	Rounds      int
	Checks      int
}

// Validate reports whether p is within the bounds a prover accepts.
func (p MemParams) Validate() error {
	switch {
	case p.Buffers < 1 || p.Buffers > MaxMemBuffers:
		return fmt.Errorf("challenge: memory proof: %d buffers, want 1 to %d: %w", p.Buffers, MaxMemBuffers, ErrParams)
	case p.BufferBytes < 64 || p.BufferBytes > 1<<30 || p.BufferBytes%64 != 0:
		return fmt.Errorf("challenge: memory proof: buffer of %d bytes, want a multiple of 64 up to 1 GiB: %w", p.BufferBytes, ErrParams)
	case p.WindowBytes < 64 || p.WindowBytes > p.BufferBytes || p.WindowBytes%64 != 0:
		return fmt.Errorf("challenge: memory proof: window of %d bytes, want a multiple of 64 up to the buffer: %w", p.WindowBytes, ErrParams)
	case p.Rounds < 1 || p.Rounds > MaxMemRounds:
		return fmt.Errorf("challenge: memory proof: %d rounds, want 1 to %d: %w", p.Rounds, MaxMemRounds, ErrParams)
	case p.Checks < 1 || p.Checks > MaxMemChecks:
		return fmt.Errorf("challenge: memory proof: %d checks, want 1 to %d: %w", p.Checks, MaxMemChecks, ErrParams)
	}
	return nil
}

// Bytes is the memory the buffers fill.
func (p MemParams) Bytes() int64 { return int64(p.Buffers) * int64(p.BufferBytes) }

// RoundBytes is the memory one round reads: a window of every buffer.
func (p MemParams) RoundBytes() int64 { return int64(p.Buffers) * int64(p.WindowBytes) }

// RealMemParams sizes the memory proof of a real GPU of profile:
// RealMemBuffer buffers filling MemFill of its memory, RealMemWindow
// windows, RealMemChecks checks, and as many rounds as take
// MemTargetSeconds at the datasheet bandwidth (at least
// RealMemMinRounds).
func RealMemParams(profile catalog.Profile) MemParams {
	total := MemFill * float64(profile.MemoryGiB) * (1 << 30)
	p := MemParams{
		Buffers:     max(1, min(MaxMemBuffers, int(total/RealMemBuffer))),
		BufferBytes: RealMemBuffer,
		WindowBytes: RealMemWindow,
		Rounds:      RealMemMinRounds,
		Checks:      RealMemChecks,
	}
	if bw := float64(profile.MemoryBandwidthGBps) * 1e9; bw > 0 {
		perRound := float64(p.RoundBytes()) / bw
		p.Rounds = min(MaxMemRounds, max(RealMemMinRounds, int(math.Ceil(MemTargetSeconds/perRound))))
	}
	return p
}

// SimMemParams sizes the memory proof of a simulated GPU of profile: its
// memory times SimMemFactor divided by scale² (scale as in SimParams;
// DefaultSimScale when ≤ 0), filled to MemFill by SimMemBuffers buffers;
// 64-byte windows, SimMemRounds rounds, 32 checks. Few large buffers and
// small windows keep the honest prover's rounds cheap while a prover that
// dropped buffers regenerates about half of each dropped one per round.
func SimMemParams(profile catalog.Profile, scale int) MemParams {
	if scale <= 0 {
		scale = DefaultSimScale
	}
	total := SimMemFactor * MemFill * float64(profile.MemoryGiB) * (1 << 30) / float64(scale) / float64(scale)
	buf := int(total / SimMemBuffers)
	buf -= buf % 64
	return MemParams{
		Buffers:     SimMemBuffers,
		BufferBytes: max(64, buf),
		WindowBytes: 64,
		Rounds:      SimMemRounds,
		Checks:      32,
	}
}

// MemDatasheetTime is how long the rounds of p take on a GPU of profile
// reading at exactly its datasheet bandwidth, with no overhead: the least
// time a genuine card can take.
func MemDatasheetTime(profile catalog.Profile, p MemParams) time.Duration {
	bw := float64(profile.MemoryBandwidthGBps) * 1e9
	if bw <= 0 {
		return 0
	}
	return time.Duration(float64(p.Rounds) * float64(p.RoundBytes()) / bw * float64(time.Second))
}

// MemRealDeadline is the deadline of one real GPU of profile: per round,
// Buffers·WindowBytes read at MemEfficiency of the claimed bandwidth plus
// MemRoundOverhead and MemBufferOverhead per buffer. A supplier's GPUs
// answer at once, each on its own device, so the deadline does not
// depend on their number. Round trips are the caller's to add.
func MemRealDeadline(profile catalog.Profile, p MemParams) time.Duration {
	if profile.MemoryBandwidthGBps <= 0 {
		return 0
	}
	read := float64(MemDatasheetTime(profile, p)) / MemEfficiency
	over := float64(p.Rounds) * float64(MemRoundOverhead+time.Duration(p.Buffers)*MemBufferOverhead)
	return time.Duration(read + over)
}

// MemSimDeadline is the deadline of a simulated GPU, given the
// challenger's own measurement of an honest answer (MemCalibrate).
func MemSimDeadline(measured time.Duration) time.Duration {
	return time.Duration(MemSimTolerance*float64(measured)) + MemSimSlack
}

// MemCalibrate measures an honest answer to a memory proof of size p on
// this machine: it fills the buffers (not timed) and times Respond.
func MemCalibrate(ctx context.Context, p MemParams) (time.Duration, error) {
	seed := sha256.Sum256([]byte(domainPrefix + "mem-calibrate"))
	m, err := NewMemProver(ctx, seed, p, 1)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	start := time.Now()
	if _, err := m.Respond(ctx, seed); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// MemResponse is the answer to a memory proof: Digests[s][j] is the
// digest of buffer j's window in round s.
type MemResponse struct {
	Digests [][]uint64
}

// MemProver answers memory proofs over the buffers of a MemBackend: it
// draws each round's offsets and fold points, has the backend fold the
// windows, and hashes the folds into the round's digests and the next
// chain key.
type MemProver struct {
	p MemParams
	b MemBackend
}

// NewMemProver fills the buffers of a memory proof for seed in host
// memory (NewCPUMemBackend, keeping the fraction kept of them) and
// returns a prover over them.
func NewMemProver(ctx context.Context, seed [32]byte, p MemParams, kept float64) (*MemProver, error) {
	b, err := NewCPUMemBackend(ctx, seed, p, kept)
	if err != nil {
		return nil, err
	}
	return NewMemProverOn(b, p)
}

// NewMemProverOn returns a prover of size p over b, whose buffers are
// already filled for the proof's seed (a GPU prover passes its device
// buffers). The prover owns b from then on: Close closes it.
func NewMemProverOn(b MemBackend, p MemParams) (*MemProver, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &MemProver{p: p, b: b}, nil
}

// HeldBytes is the memory the prover's backend holds.
func (m *MemProver) HeldBytes() int64 { return m.b.HeldBytes() }

// Close frees the backend's buffers.
func (m *MemProver) Close() error { return m.b.Close() }

// Respond answers a memory proof started with the chain key sigma0: for
// s = 0..Rounds−1 the windows of round s are at memOffsets(σ_s), folded
// at memRhos(σ_s), and σ_{s+1} = memNext(σ_s, s, digests of round s). It
// checks ctx between rounds.
func (m *MemProver) Respond(ctx context.Context, sigma0 [32]byte) (MemResponse, error) {
	p := m.p
	resp := MemResponse{Digests: make([][]uint64, p.Rounds)}
	sigma := sigma0
	offs := make([]int, p.Buffers)
	rhos := make([]uint64, p.Buffers)
	folds := make([]uint64, p.Buffers)
	for s := range p.Rounds {
		if err := ctx.Err(); err != nil {
			return MemResponse{}, err
		}
		memOffsets(offs, sigma, s, p)
		memRhos(rhos, sigma, s)
		if err := m.b.FoldRound(ctx, offs, p.WindowBytes, rhos, folds); err != nil {
			return MemResponse{}, fmt.Errorf("challenge: memory proof round %d: %w", s, err)
		}
		d := make([]uint64, p.Buffers)
		for j, f := range folds {
			d[j] = memDigest(sigma, s, j, f)
		}
		resp.Digests[s] = d
		sigma = memNext(sigma, s, d)
	}
	return resp, nil
}

// cpuMem is the MemBackend in host memory. One that keeps a fraction
// below 1 (the mem cheat) regenerates the dropped buffers' windows from
// their ChaCha8 streams every round.
type cpuMem struct {
	seed [32]byte
	p    MemParams
	bufs [][]byte // nil where dropped
	held int64
}

// NewCPUMemBackend fills the buffers of a memory proof for seed in host
// memory, keeping the first round(kept·Buffers) of them (all when kept ≥
// 1 or not in (0, 1]): the backend of simulated GPUs. Filling is not part
// of the timed proof.
func NewCPUMemBackend(ctx context.Context, seed [32]byte, p MemParams, kept float64) (MemBackend, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if math.IsNaN(kept) || kept <= 0 || kept > 1 {
		kept = 1
	}
	keep := int(math.Round(kept * float64(p.Buffers)))
	m := &cpuMem{seed: seed, p: p, bufs: make([][]byte, p.Buffers)}
	err := parallel(ctx, 0, keep, func(j int) error {
		m.bufs[j] = make([]byte, p.BufferBytes)
		FillMemBuffer(m.bufs[j], seed, j)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("challenge: memory proof: fill buffers: %w", err)
	}
	m.held = int64(keep) * int64(p.BufferBytes)
	return m, nil
}

// HeldBytes implements MemBackend.
func (m *cpuMem) HeldBytes() int64 { return m.held }

// Close implements MemBackend.
func (m *cpuMem) Close() error {
	clear(m.bufs)
	m.held = 0
	return nil
}

// FoldRound implements MemBackend: in turn when every buffer is held and
// the round is small, on every core otherwise.
func (m *cpuMem) FoldRound(ctx context.Context, offs []int, window int, rhos, out []uint64) error {
	if len(offs) != len(m.bufs) || len(rhos) != len(m.bufs) || len(out) != len(m.bufs) {
		return fmt.Errorf("challenge: fold round: %d offsets, %d points, %d results for %d buffers: %w", len(offs), len(rhos), len(out), len(m.bufs), ErrMalformed)
	}
	for _, o := range offs {
		if o < 0 || window < 0 || o+window > m.p.BufferBytes {
			return fmt.Errorf("challenge: fold round: window [%d, %d) outside a buffer of %d: %w", o, o+window, m.p.BufferBytes, ErrMalformed)
		}
	}
	fold := func(j int) error {
		out[j] = MemFold(m.window(j, offs[j], window), rhos[j])
		return nil
	}
	if m.held == m.p.Bytes() && len(m.bufs)*window < 1<<20 {
		for j := range m.bufs {
			_ = fold(j)
		}
		return nil
	}
	// Regenerating (or folding much) is the slow part: use every core.
	return parallel(ctx, 0, len(m.bufs), fold)
}

// window returns buffer j's bytes [off, off+w), regenerating them when
// the buffer was dropped.
func (m *cpuMem) window(j, off, w int) []byte {
	if b := m.bufs[j]; b != nil {
		return b[off : off+w]
	}
	return regenWindow(m.seed, j, off, w)
}

// regenWindow generates buffer j's stream up to off+w and returns the
// last w bytes, generating the stream from its start: what the honest
// challenger does to check, and what a prover that kept nothing of a
// dropped buffer must do. It is not the fastest way: chacha8rand re-keys
// itself every 992 bytes from its own output, so a prover that stored
// the key at each re-key can enter the stream at the last one before off
// and regenerate any window quickly (docs/PROTOCOL.md §20).
func regenWindow(seed [32]byte, j, off, w int) []byte {
	c := rand.NewChaCha8(subSeed(seed, labelMemBuf, uint32(j)))
	for range off / 8 {
		c.Uint64()
	}
	out := make([]byte, w)
	streamInto(c, out)
	return out
}

// memOffsets fills offs with round s's window offsets: for each buffer in
// order, 64·uniformIndex over the ChaCha8 stream keyed by
// subSeed(σ_s, "mem-offsets", s), in [0, BufferBytes−WindowBytes].
func memOffsets(offs []int, sigma [32]byte, s int, p MemParams) {
	c := rand.NewChaCha8(subSeed(sigma, labelMemOff, uint32(s)))
	slots := (p.BufferBytes-p.WindowBytes)/64 + 1
	for j := range offs {
		offs[j] = 64 * uniformIndex(c, slots)
	}
}

// memRhos fills rhos with round s's fold points: for each buffer in
// order, a Uint64 of the ChaCha8 stream keyed by subSeed(σ_s, "mem-rho",
// s) masked to 61 bits, drawn again while it is 0, 1 or P. So ρ is
// uniform in [2, P−1]: the fold is a polynomial in ρ of degree
// WindowBytes/8 − 1, and neither a constant (ρ = 0) nor a plain sum
// (ρ = 1) of the words.
func memRhos(rhos []uint64, sigma [32]byte, s int) {
	c := rand.NewChaCha8(subSeed(sigma, labelMemRho, uint32(s)))
	for j := range rhos {
		v := c.Uint64() & P
		for v < 2 || v == P {
			v = c.Uint64() & P
		}
		rhos[j] = v
	}
}

// memDigest is the first 8 bytes (big-endian) of
// SHA-256(prefix || "mem-fold" || 0x00 || σ_s || uint32 BE s ||
// uint32 BE j || uint64 BE F), F the fold of buffer j's window in round s.
func memDigest(sigma [32]byte, s, j int, fold uint64) uint64 {
	var buf [len(domainPrefix) + len(labelMemFold) + 1 + 32 + 4 + 4 + 8]byte
	b := append(buf[:0], domainPrefix+labelMemFold+"\x00"...)
	b = append(b, sigma[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(s))
	b = binary.BigEndian.AppendUint32(b, uint32(j))
	b = binary.BigEndian.AppendUint64(b, fold)
	sum := sha256.Sum256(b)
	return binary.BigEndian.Uint64(sum[:8])
}

// memNext is σ_{s+1} = SHA-256(prefix || "mem-round" || 0x00 || σ_s ||
// uint32 BE s || each digest as uint64 BE).
func memNext(sigma [32]byte, s int, d []uint64) [32]byte {
	buf := make([]byte, 0, len(domainPrefix)+len(labelMemStep)+1+32+4+8*len(d))
	buf = append(buf, domainPrefix+labelMemStep+"\x00"...)
	buf = append(buf, sigma[:]...)
	buf = binary.BigEndian.AppendUint32(buf, uint32(s))
	for _, v := range d {
		buf = binary.BigEndian.AppendUint64(buf, v)
	}
	return sha256.Sum256(buf)
}

// MemVerify checks a memory proof: resp's shape (ErrMalformed), elapsed
// (the challenger's own measurement) against deadline (ErrMemDeadline; no
// deadline when ≤ 0), and Checks digests chosen by checkSeed — drawn by
// the challenger after the response — against windows it regenerates and
// folds itself (ErrMemDigest). The verifier's work is the chain (Rounds
// hashes and draws) plus at most min(Checks, Buffers) buffer
// regenerations.
func MemVerify(seed [32]byte, p MemParams, sigma0, checkSeed [32]byte, resp MemResponse, elapsed, deadline time.Duration) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if len(resp.Digests) != p.Rounds {
		return fmt.Errorf("challenge: memory proof: %d rounds answered, want %d: %w", len(resp.Digests), p.Rounds, ErrMalformed)
	}
	for s, d := range resp.Digests {
		if len(d) != p.Buffers {
			return fmt.Errorf("challenge: memory proof: round %d has %d digests, want %d: %w", s, len(d), p.Buffers, ErrMalformed)
		}
	}
	if deadline > 0 && elapsed > deadline {
		return fmt.Errorf("challenge: memory proof took %v, deadline %v: %w", elapsed, deadline, ErrMemDeadline)
	}
	// Draw the checks first: only the checked rounds' offsets and points
	// are kept while the chain is replayed.
	c := rand.NewChaCha8(subSeed(checkSeed, labelMemChk, 0))
	byBuf := map[int][]int{} // buffer -> rounds checked
	checked := map[int]bool{}
	for range p.Checks {
		s := uniformIndex(c, p.Rounds)
		j := uniformIndex(c, p.Buffers)
		byBuf[j] = append(byBuf[j], s)
		checked[s] = true
	}
	// Replay the chain from the prover's digests: σ_s, the offsets and
	// the fold points.
	type round struct {
		sigma [32]byte
		offs  []int
		rhos  []uint64
	}
	rounds := map[int]round{}
	sigma := sigma0
	for s := range p.Rounds {
		if checked[s] {
			r := round{sigma: sigma, offs: make([]int, p.Buffers), rhos: make([]uint64, p.Buffers)}
			memOffsets(r.offs, sigma, s, p)
			memRhos(r.rhos, sigma, s)
			rounds[s] = r
		}
		sigma = memNext(sigma, s, resp.Digests[s])
	}
	// Regenerate each checked buffer once, up to its furthest window.
	for _, j := range slices.Sorted(maps.Keys(byBuf)) {
		end := 0
		for _, s := range byBuf[j] {
			end = max(end, rounds[s].offs[j]+p.WindowBytes)
		}
		buf := make([]byte, end)
		FillMemBuffer(buf, seed, j)
		for _, s := range byBuf[j] {
			r := rounds[s]
			o := r.offs[j]
			if want := memDigest(r.sigma, s, j, MemFold(buf[o:o+p.WindowBytes], r.rhos[j])); resp.Digests[s][j] != want {
				return fmt.Errorf("challenge: memory proof: round %d buffer %d: %w", s, j, ErrMemDigest)
			}
		}
	}
	return nil
}
