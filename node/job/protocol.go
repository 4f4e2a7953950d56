package job

import (
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"
)

// Stream protocols and limits of jobs. These are the source of truth for
// docs/PROTOCOL.md Part IV: changing one is a wire change.
const (
	// SessionProtocol carries Hello and Welcome, then ServerFrames and
	// ClientFrames both ways for as long as the renter follows the job.
	SessionProtocol protocol.ID = "/gpumesh/job/1.0.0"
	// CheckpointProtocol serves an attempt's checkpoint archive.
	CheckpointProtocol protocol.ID = "/gpumesh/checkpoint/1.0.0"

	// SpecVersion is the JobSpec schema version.
	SpecVersion = 1

	// MaxSpecSize bounds an encoded JobSpec, input files included.
	MaxSpecSize = 4 << 20
	// MaxCheckpointSize bounds a checkpoint archive.
	MaxCheckpointSize = 32 << 20
	// MaxHelloSize bounds a Hello: a spec, a checkpoint and a lease.
	MaxHelloSize = MaxSpecSize + MaxCheckpointSize + 64<<10
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

// States of an attempt, as Status frames and job views report them.
const (
	StateStarting    = "starting"
	StateRunning     = "running"
	StateHalted      = "halted" // paused: the renter fell behind on payment
	StateSucceeded   = "succeeded"
	StateFailed      = "failed"
	StateStopped     = "stopped"
	StateExpired     = "expired"     // the lease ended first
	StateInterrupted = "interrupted" // the supplier restarted under it
	StateFenced      = "fenced"      // the renter moved the job on
)

// Ended reports whether an attempt in state s has finished.
func Ended(s string) bool {
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
	// HelloTimeout bounds reading a Hello, which may carry a checkpoint.
	HelloTimeout = 2 * time.Minute
)
