// Package cluster carries TCP connections between the jobs of the members
// of a renter's cluster (`gpumesh run --nodes N`), supplier to supplier,
// over libp2p streams (/gpumesh/cluster/1.0.0, docs/PROTOCOL.md §41).
//
// Every member's job has a cluster address, Addr(rank) in Prefix, on an
// interface of its own network namespace (node/runtime). A connection
// the job opens to another member's address, on any TCP port, is
// redirected to a listener its node holds, which hands it to
// [Membership.Connect] with the address and port the job dialled. Connect
// opens one stream per connection to the supplier of the target member,
// on a direct connection only (never a relayed one: relays carry little
// and briefly), and sends a ClusterOpen: the target member's lease, the
// cluster attempt, its own rank and the port. The target's [Service]
// admits it in order (the resource-manager scope p2p.ClusterService, a
// direct connection, a small Open in time, the version, a membership on
// that lease listing the stream's peer as the supplier of another rank,
// the current attempt, the job running and paid for, its bounds per
// attempt and per peer), connects to the port on its own job's cluster
// address, answers with a ClusterReply and then pipes bytes both ways
// with node/tunnel's pipe: back-pressure, half-close, a reset on error.
// Every refusal is a Reply with a code; one code, no-member, stands for
// every mismatch of lease, peer and rank, so that nothing leaks.
//
// Who may talk is fixed by the [Manifest] the renter gives every member
// over its authenticated job session: [Service.Join] makes a [Membership]
// of it, dials the other members' suppliers at once and keeps those
// connections protected in the connection manager, so that hole punching
// is done before the job needs the links; [Membership.Links] reports them
// (direct or not, round-trip time, streams). [Membership.Attach] gives
// the membership its way into the own job once it runs; [Membership.Leave]
// refuses further streams and resets the open ones; [Membership.Cut]
// resets the open ones only (a job halted for payment).
//
// A member's job can reach only the other members' jobs, and only
// through their suppliers' admission: never anything else of their
// hosts. It is a renter's own cluster, trusted as a VPC is: the renter's
// jobs reach each other's ports.
package cluster
