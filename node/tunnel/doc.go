// Package tunnel carries TCP connections between a renter's machine and a
// port that a job serves on a supplier, over libp2p streams
// (/gpumesh/tunnel/1.0.0, docs/PROTOCOL.md §39): an endpoint on the
// renter's own machine reaches an inference server on any supplier, NAT
// included, with no port opened on either side.
//
// The supplier runs a [Server]. For each stream it reads one small Open
// (which lease, which attempt, which port), asks its [Resolver] whether
// the peer may have that connection (the lease's renter, the attempt
// running and paid for, the port declared in the job's spec), connects to
// the port inside the job's own network, answers with a Reply and then
// pipes bytes both ways. Every refusal is a Reply with a code and a
// reason. Tunnels are bounded per attempt and in all, carried under a
// resource-manager service scope of their own (p2p.TunnelService), and
// closed when their attempt ends.
//
// The renter runs a [Forwarder] per forwarded port: a local TCP listener
// whose every accepted connection becomes one tunnel stream to one of the
// job's attempts, chosen afresh per connection among the targets its
// Targets function gives (the one with fewest open connections first; a
// target that refuses is skipped for the next). So a forward outlives
// failover: when the job moves to another supplier, the listener stays
// and new connections go to the new attempt.
//
// Both sides pipe with back-pressure (a stream's flow-control window, a
// socket's buffer) and half-close: when one side finishes writing, the
// other side's write half is closed and the other direction goes on.
package tunnel
