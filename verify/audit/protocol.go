package audit

import (
	"time"

	"github.com/gpumesh/gpumesh/catalog"
	"github.com/gpumesh/gpumesh/verify/challenge"
)

// ChallengeProtocol is the stream protocol of a benchmark challenge:
// version 2, whose memory proof folds each window at a fresh point
// (challenge.MemFold) instead of hashing it.
const ChallengeProtocol = "/gpumesh/challenge/2.0.0"

// ChallengeProtocolV1 is the retired version 1. A prover still answers
// it, with a refusal that names the version to use (RetiredRefusal), so
// that a challenger not yet upgraded is told why rather than left to
// take the prover for down.
const ChallengeProtocolV1 = "/gpumesh/challenge/1.0.0"

// RetiredRefusal is the prover's refusal of a version-1 challenge.
const RetiredRefusal = "challenge protocol 1.0.0 is retired, use 2.0.0"

// Refusal codes of pb.Commit.code.
const (
	CodeBusy     = "busy"      // try again later (retry_after_ms)
	CodeLeased   = "leased"    // busy: the real GPUs named are leased (retry_after_ms: until the lease lapses)
	CodeNoMemory = "no-memory" // busy, in MemReady: a device had no room for the memory proof's buffers
	CodeNoProver = "no-prover" // real GPUs and no GPU prover to answer for them
	CodeRetired  = "retired"   // a version-1 request
)

// NoMemoryRetry is the retry-after of a memory proof refused because a
// device had no room for its buffers (CodeNoMemory): whatever holds the
// memory (a job not yet in the ledger, another process) is given time.
const NoMemoryRetry = 10 * time.Minute

// Limits of the protocol.
const (
	maxRequest  = 64 << 10
	maxSmallMsg = 4 << 10
	stepTimeout = 2 * time.Minute // any one step, real devices included
	// MinPeerGap is how often one peer may challenge a prover.
	MinPeerGap = 5 * time.Second
	// MemAttempts is how many times a memory proof may be asked over the
	// same filled buffers: the challenger asks again, with a fresh σ_0,
	// only when every digest checked but the answer came after the
	// deadline (a packet lost on a WAN, a burst of load), and judges by
	// the first answer in time. A prover whose work is slower than the
	// claim allows is as slow each time.
	MemAttempts = 3
	// memRetryWait is how long the prover waits for another memory
	// request after an answer, before it takes the challenge as over.
	memRetryWait = 10 * time.Second
)

// memFillRate is the least rate, in bytes a second, at which a prover is
// expected to fill the memory proof's buffers of all its GPUs together
// (generated on the host, copied to each device; filling is not timed):
// 1 GiB/s, a few cores' worth of ChaCha8. Eight H200s hold about 1 TiB of
// buffers: 17 minutes at this rate, in a minute or so on a host that
// fills them at once on 16 cores.
const memFillRate = 1 << 30

// fillTime is the time allowed for filling gpus GPUs' buffers of size m
// at memFillRate.
func fillTime(gpus int, m challenge.MemParams) time.Duration {
	return time.Duration(float64(gpus) * float64(m.Bytes()) / memFillRate * float64(time.Second))
}

// prepareTimeout is the deadline, on both sides, of the memory proof's
// prepare step (MemPrepare to MemReady): a step's time plus the fill's.
func prepareTimeout(gpus int, m challenge.MemParams) time.Duration {
	return stepTimeout + fillTime(gpus, m)
}

// exchangeTimeout bounds a whole challenge of gpus GPUs, on both sides:
// four steps, and the fill's time.
func exchangeTimeout(gpus int, m challenge.MemParams) time.Duration {
	return 4*stepTimeout + fillTime(gpus, m)
}

// Sizes returns the challenge sizes for a model: scaled down by scale for
// simulated devices, the real ones otherwise. Both sides compute them, so
// a prover never does more work than its own profile implies.
func Sizes(profile catalog.Profile, simulated bool, scale int) (challenge.Params, challenge.MemParams) {
	if simulated {
		return challenge.SimParams(profile, scale), challenge.SimMemParams(profile, scale)
	}
	return challenge.RealParams(profile), challenge.RealMemParams(profile)
}

// limits of the prover's answers, from the sizes.
func sweepLimit(gpus int, p challenge.Params) int {
	return gpus*(p.N*10+16) + 1024
}

func openLimit(gpus int, p challenge.Params) int {
	return gpus*p.K*(p.N+challenge.MaxProofLen*34+16) + 1024
}

func memLimit(gpus int, m challenge.MemParams) int {
	return gpus*m.Rounds*(m.Buffers*10+8) + 1024
}
