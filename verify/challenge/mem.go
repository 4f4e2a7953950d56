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

// Memory-proof sizing and deadlines (documented assumptions).
const (
	// MemFill is the fraction of the claimed memory the buffers fill.
	MemFill = 0.9
	// RealMemBuffer is a real device's buffer size.
	RealMemBuffer = 256 << 20
	// MemEfficiency is the assumed fraction of the claimed peak bandwidth
	// a real GPU reaches reading and hashing the windows.
	MemEfficiency = 0.25
	// MemRoundOverhead is the allowance per round on a real GPU (kernel
	// launches, the chained hash).
	MemRoundOverhead = time.Millisecond
	// SimMemBuffers is the number of buffers of a simulated device.
	SimMemBuffers = 16
	// SimMemRounds is the number of rounds of a simulated device.
	SimMemRounds = 4096
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
// BufferBytes each, Rounds chained rounds that each read a window of
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

// RealMemParams sizes the memory proof of a real GPU of profile:
// 256 MiB buffers filling MemFill of its memory, 4 MiB windows, 32 rounds,
// 32 checks.
func RealMemParams(profile catalog.Profile) MemParams {
	total := MemFill * float64(profile.MemoryGiB) * (1 << 30)
	return MemParams{
		Buffers:     max(1, min(MaxMemBuffers, int(total/RealMemBuffer))),
		BufferBytes: RealMemBuffer,
		WindowBytes: RealMemBuffer / 64,
		Rounds:      32,
		Checks:      32,
	}
}

// SimMemParams sizes the memory proof of a simulated GPU of profile: its
// memory divided by scale² (scale as in SimParams; DefaultSimScale when
// ≤ 0), filled to MemFill by SimMemBuffers buffers; 64-byte windows,
// SimMemRounds rounds, 32 checks. Few large buffers and small windows
// keep the honest prover's rounds cheap while a prover that dropped
// buffers regenerates about half of each dropped one per round.
func SimMemParams(profile catalog.Profile, scale int) MemParams {
	if scale <= 0 {
		scale = DefaultSimScale
	}
	total := MemFill * float64(profile.MemoryGiB) * (1 << 30) / float64(scale) / float64(scale)
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

// MemRealDeadline is the deadline of a real GPU of profile: per round,
// Buffers·WindowBytes read at MemEfficiency of the claimed bandwidth plus
// MemRoundOverhead. Round trips are the caller's to add.
func MemRealDeadline(profile catalog.Profile, p MemParams) time.Duration {
	bw := float64(profile.MemoryBandwidthGBps) * 1e9 * MemEfficiency
	if bw <= 0 {
		return 0
	}
	perRound := float64(p.Buffers)*float64(p.WindowBytes)/bw*float64(time.Second) + float64(MemRoundOverhead)
	return time.Duration(float64(p.Rounds) * perRound)
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

// MemProver holds the buffers of a memory proof. One that keeps a
// fraction below 1 (the mem cheat) regenerates the dropped buffers'
// windows from their ChaCha8 streams every round.
type MemProver struct {
	seed [32]byte
	p    MemParams
	bufs [][]byte // nil where dropped
	held int64
}

// NewMemProver fills the buffers of a memory proof for seed, keeping the
// first round(kept·Buffers) of them (all when kept ≥ 1). Filling is not
// part of the timed proof.
func NewMemProver(ctx context.Context, seed [32]byte, p MemParams, kept float64) (*MemProver, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if math.IsNaN(kept) || kept <= 0 || kept > 1 {
		kept = 1
	}
	keep := int(math.Round(kept * float64(p.Buffers)))
	m := &MemProver{seed: seed, p: p, bufs: make([][]byte, p.Buffers)}
	err := parallel(ctx, 0, keep, func(j int) error {
		m.bufs[j] = make([]byte, p.BufferBytes)
		fillStream(m.bufs[j], subSeed(seed, labelMemBuf, uint32(j)))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("challenge: memory proof: fill buffers: %w", err)
	}
	m.held = int64(keep) * int64(p.BufferBytes)
	return m, nil
}

// HeldBytes is the memory the prover holds.
func (m *MemProver) HeldBytes() int64 { return m.held }

// Respond answers a memory proof started with the chain key sigma0: for
// s = 0..Rounds−1 the windows of round s are at memOffsets(σ_s), and
// σ_{s+1} = memNext(σ_s, s, digests of round s). It checks ctx between
// rounds.
func (m *MemProver) Respond(ctx context.Context, sigma0 [32]byte) (MemResponse, error) {
	p := m.p
	resp := MemResponse{Digests: make([][]uint64, p.Rounds)}
	sigma := sigma0
	offs := make([]int, p.Buffers)
	dropped := m.held < p.Bytes()
	for s := 0; s < p.Rounds; s++ {
		if err := ctx.Err(); err != nil {
			return MemResponse{}, err
		}
		memOffsets(offs, sigma, s, p)
		d := make([]uint64, p.Buffers)
		digest := func(j int) error {
			win := m.window(j, offs[j])
			d[j] = memDigest(sigma, s, j, win)
			return nil
		}
		if dropped { // regenerating is the slow part: use every core
			if err := parallel(ctx, 0, p.Buffers, digest); err != nil {
				return MemResponse{}, err
			}
		} else {
			for j := range d {
				_ = digest(j)
			}
		}
		resp.Digests[s] = d
		sigma = memNext(sigma, s, d)
	}
	return resp, nil
}

// window returns buffer j's bytes [off, off+WindowBytes), regenerating
// them when the buffer was dropped.
func (m *MemProver) window(j, off int) []byte {
	if b := m.bufs[j]; b != nil {
		return b[off : off+m.p.WindowBytes]
	}
	return regenWindow(m.seed, j, off, m.p.WindowBytes)
}

// regenWindow generates buffer j's stream up to off+w and returns the
// last w bytes. chacha8rand re-keys itself every 992 bytes, so the stream
// cannot be entered at off without generating what precedes it.
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

// memDigest is the first 8 bytes (big-endian) of
// SHA-256(prefix || "mem-window" || 0x00 || σ_s || uint32 BE s ||
// uint32 BE j || window).
func memDigest(sigma [32]byte, s, j int, win []byte) uint64 {
	h := sha256.New()
	h.Write([]byte(domainPrefix + labelMemWin + "\x00"))
	h.Write(sigma[:])
	var idx [8]byte
	binary.BigEndian.PutUint32(idx[:4], uint32(s))
	binary.BigEndian.PutUint32(idx[4:], uint32(j))
	h.Write(idx[:])
	h.Write(win)
	var sum [32]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0]))
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
// the challenger after the response — against windows it regenerates
// itself (ErrMemDigest). The verifier's work is the chain (Rounds hashes)
// plus at most min(Checks, Buffers) buffer regenerations.
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
	// Replay the chain from the prover's digests: σ_s and the offsets.
	sigmas := make([][32]byte, p.Rounds)
	offs := make([][]int, p.Rounds)
	sigma := sigma0
	for s := range p.Rounds {
		sigmas[s] = sigma
		offs[s] = make([]int, p.Buffers)
		memOffsets(offs[s], sigma, s, p)
		sigma = memNext(sigma, s, resp.Digests[s])
	}
	// Draw the checks, then regenerate each checked buffer once.
	c := rand.NewChaCha8(subSeed(checkSeed, labelMemChk, 0))
	byBuf := map[int][]int{} // buffer -> rounds checked
	for range p.Checks {
		s := uniformIndex(c, p.Rounds)
		j := uniformIndex(c, p.Buffers)
		byBuf[j] = append(byBuf[j], s)
	}
	for _, j := range slices.Sorted(maps.Keys(byBuf)) {
		rounds := byBuf[j]
		end := 0
		for _, s := range rounds {
			end = max(end, offs[s][j]+p.WindowBytes)
		}
		buf := make([]byte, end)
		fillStream(buf, subSeed(seed, labelMemBuf, uint32(j)))
		for _, s := range rounds {
			o := offs[s][j]
			if want := memDigest(sigmas[s], s, j, buf[o:o+p.WindowBytes]); resp.Digests[s][j] != want {
				return fmt.Errorf("challenge: memory proof: round %d buffer %d: %w", s, j, ErrMemDigest)
			}
		}
	}
	return nil
}
