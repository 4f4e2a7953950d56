package job

import (
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/gpumesh/gpumesh/market"
)

// Stream protocols and limits of jobs. These are the source of truth for
// docs/PROTOCOL.md Part IV: changing one is a wire change.
const (
	// SessionProtocol carries Hello and Welcome (for a start, the spec and
	// checkpoint in between, once the Hello is admitted), then
	// ServerFrames and ClientFrames both ways for as long as the renter
	// follows the job. 2.0.0: the spec and checkpoint no longer travel
	// inside the Hello.
	SessionProtocol protocol.ID = "/gpumesh/job/2.0.0"
	// CheckpointProtocol serves an attempt's checkpoint archive.
	CheckpointProtocol protocol.ID = "/gpumesh/checkpoint/1.0.0"

	// SpecVersion is the JobSpec schema version.
	SpecVersion = 1

	// MaxPorts bounds the ports a spec declares.
	MaxPorts = 16
	// MaxSpecSize bounds an encoded JobSpec, input files included.
	MaxSpecSize = 4 << 20
	// MaxCheckpointSize bounds a checkpoint archive.
	MaxCheckpointSize = 32 << 20
	// MaxHelloSize bounds a Hello: a lease envelope and a few small
	// fields. It is all a supplier reads from a peer before it has checked
	// the peer's lease.
	// A cluster member's start lists every member (at most 64, with
	// MaxMemberAddrs addresses each).
	MaxHelloSize = market.MaxLeaseSize + 36<<10
	// MaxWelcomeSize bounds a Welcome.
	MaxWelcomeSize = 4096
	// MaxFrameSize bounds one ServerFrame or ClientFrame.
	MaxFrameSize = 96 << 10
	// LogChunk is the most log bytes one Log frame carries.
	LogChunk = 32 << 10
	// MaxLogSize bounds the log an attempt keeps; beyond it output is
	// dropped and counted.
	MaxLogSize = 64 << 20

	// MaxArgs, MaxArgBytes, MaxEnv and MaxFiles bound a spec's parts.
	MaxArgs     = 256
	MaxArgBytes = 4096
	MaxEnv      = 256
	MaxFiles    = 256
)

// State is the state of a job or of one of its attempts, and the outcome
// of an ended attempt. Its text is what Status frames, receipts, job views
// and stored records carry, so a constant's text is a wire and storage
// format: never change one.
type State string

// States of an attempt, as Status frames and job views report them, and
// the outcomes an attempt ends with.
const (
	StateStarting    State = "starting"
	StateRunning     State = "running"
	StateHalted      State = "halted" // paused: the renter fell behind on payment
	StateSucceeded   State = "succeeded"
	StateFailed      State = "failed"
	StateStopped     State = "stopped"
	StateExpired     State = "expired"     // the lease ended first
	StateInterrupted State = "interrupted" // the supplier restarted under it
	StateFenced      State = "fenced"      // the renter moved the job on
	// StateLost is the outcome the renter gives an attempt whose supplier
	// it lost (unreachable, or caught cheating) before it moved the job on.
	StateLost State = "lost"
)

// String is the state's text, as it goes on the wire and into records.
func (s State) String() string { return string(s) }

// AttemptStates lists the states an attempt can be in.
func AttemptStates() []State {
	return []State{StateStarting, StateRunning, StateHalted, StateSucceeded,
		StateFailed, StateStopped, StateExpired, StateInterrupted, StateFenced}
}

// Ended reports whether an attempt in state s has finished.
func Ended(s State) bool {
	switch s {
	case StateSucceeded, StateFailed, StateStopped, StateExpired, StateInterrupted, StateFenced:
		return true
	}
	return false
}

// Defaults of the session.
const (
	// DefaultCheckpointEvery is how often the renter pulls checkpoints
	// when the spec does not say.
	DefaultCheckpointEvery = 30 * time.Second
	// FenceFor is how long the renter keeps trying to tell a lost
	// supplier to stop its copy of an attempt (it stops by itself once
	// unpaid past the credit limit and its halt grace).
	FenceFor = 10 * time.Minute
	// RentFor is how long the renter keeps trying to rent for the next
	// attempt before the job fails.
	RentFor = 5 * time.Minute
	// SettleFor is how long a finished job's node keeps trying to settle
	// its attempts with their suppliers.
	SettleFor = 10 * time.Minute
	// HeaderTimeout bounds the supplier's wait for a Hello: a peer that
	// has not said who it is and which lease it holds by then is dropped.
	HeaderTimeout = 5 * time.Second
	// BodyTimeout bounds the supplier's read of an admitted start's spec
	// and checkpoint (up to 36 MiB).
	BodyTimeout = 2 * time.Minute
	// StartTimeout bounds the renter's whole start exchange: the body, the
	// supplier's start of the job (up to 30 s) and the final Welcome.
	StartTimeout = BodyTimeout + time.Minute

	// MaxPendingPerPeer and MaxPending cap the session streams a supplier
	// holds before their Hello is admitted: from one peer, and in all.
	// Further streams are refused at once as busy.
	MaxPendingPerPeer = 2
	MaxPending        = 128
)
