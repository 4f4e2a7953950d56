// Package shell joins a renter's terminal to the standard streams of a job
// that runs on one of its leases, over a libp2p stream
// (/gpumesh/shell/1.0.0, docs/PROTOCOL.md §40): `gpumesh shell` opens an
// interactive shell, or runs a command with its stdin, stdout, stderr and
// exit status passed through, inside the job sandbox of the leased GPUs.
//
// A shell is a job like any other: its renter's node starts it on the
// lease through the job session (same sandbox, GPUs, job network and
// metering), with a spec that asks for a standard input (a pipe, or a
// terminal). The supplier's executor gives such an attempt a [Stdio],
// which holds the job's output (bounded) until one shell stream attaches.
// The renter's node then opens the shell stream to the supplier and sends
// an Open frame naming the lease and attempt; the supplier's [Server] asks
// its [Resolver] whether that peer may attach (the lease's renter, the
// attempt running, started with a standard input, not attached yet),
// answers with a Reply frame, and then carries frames both ways: stdin
// bytes, its end and window sizes to the job; stdout and stderr bytes to
// the renter, and last the job's exit, or why the attempt ended without
// one (the lease ended). A stream that ends before the job stops the job,
// as a hang-up would.
//
// Every frame is a kind byte, a u16 length and at most MaxPayload bytes
// (frame.go); a reader checks the length before reading and each kind's
// payload before use.
package shell
