// Package job runs a renter's workload on leased GPUs and keeps it running.
//
// # Map of the package
//
// Two sides share one session protocol (docs/PROTOCOL.md Part IV):
//
//   - The protocol: the stream protocol IDs (SessionProtocol
//     /gpumesh/job/2.0.0, CheckpointProtocol /gpumesh/checkpoint/1.0.0),
//     size limits, timeouts and the State type: the attempt states and
//     outcomes (StateRunning ... StateFenced, StateLost, Ended).
//   - Spec: the decoded and checked JobSpec whose hash a lease binds, and
//     its restart policy (Spec.Retries).
//   - The network, as the two sides need it: the Controller dials through
//     a Dialer (connect, open a stream, the Online check); the Executor
//     serves through a Listener. A node wires in its libp2p host; tests
//     wire in libp2p's in-memory mocknet.
//   - The renter side: Controller keeps each job's record (jobRecord:
//     attempts, checkpoint, failovers, restarts) in the store and drives
//     it in a goroutine of its own (drive).
//   - The supplier side: Executor admits sessions and starts attempts; run
//     is one attempt: its process, its meter loop (receipts, credit limit,
//     lease end), its session and its log pump.
//   - Admission: what a supplier reads before it trusts a session (the
//     pending-stream gate, the Hello's announced sizes, the start body),
//     and Handshake, the renter's side of the opening.
//   - Checkpoint archives and every path below a job's folders, read and
//     written without following a symlink the job planted.
//   - A supplier's per-job limits, and an attempt's capped, followable log
//     file.
//   - Outputs (outputs.go): a succeeded attempt's $OUTPUT_DIR, packed by
//     the supplier as a checkpoint is, announced before the final receipt,
//     pulled and unpacked once by the renter before it settles.
//   - Task groups (tasks.go): N tasks of one command, each a job of its
//     own with TASK_INDEX and TASK_COUNT, at most Parallel at once, kept
//     in the store as a groupRecord.
//   - Clusters (cluster.go, clusterjob.go): one spec on N suppliers
//     (Request.Nodes), leased all or nothing, each member a job record
//     of its own (<cluster id>-<rank>) under one clusterState; the
//     members' Hello names them all (checked on the supplier's side by
//     checkCluster), a lost member ends the cluster attempt and every
//     rank restarts on N new leases from rank 0's checkpoint
//     (judgeAttempt, coordinate). The supplier side joins the member to
//     the cluster network (node/cluster, node/runtime's ClusterNet) and
//     reports its links' round trips.
//
// # The renter side: a Controller
//
// The Controller lives inside the renter's own long-lived node, which
// pays for and follows every job it started: the renter's terminal is
// never part of the job, and a restarted node resumes the jobs kept in the
// store. For each attempt it rents GPUs (ControllerConfig.Rent) with the
// job spec's hash in the lease proposal, opens a session to the supplier,
// sends a small Hello and, once the supplier admits it on its lease, the
// spec and the checkpoint to resume from. It then follows the session:
// it writes the logs it receives to disk, answers each usage receipt with
// a signed voucher (package market/settle) after keeping both, pulls the
// checkpoint whenever a receipt announces a new one, and at the end signs
// a statement that the supplier countersigns.
//
// A job moves through these states (jobRecord.State):
//
//	renting -> starting -> running <-> halted
//	running -> succeeded | failed | stopped            (the job is over)
//	running -> recovering -> starting (next attempt)   (failover or restart)
//
// How an attempt ends decides what comes next (attemptOver):
//
//   - succeeded: the job succeeded. A stop the renter asked for: stopped.
//   - failed (the job's own non-zero exit): a restart on a new lease,
//     from the same supplier if the market offers it, only as the spec's
//     restart policy says; otherwise the job failed.
//   - lost (the supplier was silent or unreachable for LostAfter while
//     the renter's Online check still passes, or it signed evidence
//     against itself), interrupted (it refused the start or restarted),
//     expired, halted or stopped by the supplier: infrastructure. The
//     next lease excludes every supplier lost so far; after RetryBudget
//     such failovers the job fails. A lost supplier is fenced: the
//     renter tells it, should it come back while its lease lasts, to stop
//     its copy.
//
// # The supplier side: an Executor
//
// The Executor checks a start against its lease (admitStart, welcome),
// prepares a working dir under the node's data dir, runs the job through
// a node/runtime Runtime, streams its status and logs, and meters it: a
// durable, signed receipt every receipt interval. A job whose renter falls
// behind the lease's credit limit is paused, and stopped when payment does
// not resume within the halt grace. At the end both sides sign a
// settlement statement.
//
// # Fencing
//
// (lease, attempt) fences attempts. Every attempt has a lease of its own:
// a supplier runs one attempt per lease and refuses a start of any other
// on it (an older one as stale) and an attach to any attempt but the one
// it runs; the renter refuses receipts of any attempt but its current
// one, and tells a supplier that comes back after a failover to stop its
// copy.
//
// # Paths a job controls
//
// Everything below an attempt's working and checkpoint folders belongs to
// the job while it runs, and the node reads there as its own user,
// outside the job's sandbox. So the node never resolves a path there by
// name: the attempt's folder is named by its lease (DATA/jobs/<lease
// id>/<attempt>), made afresh before the job starts, and filled (input
// files, the checkpoint to resume from) one component at a time from
// descriptors with O_NOFOLLOW and O_EXCL; the checkpoint folder is opened
// then and every later checkpoint is read through that descriptor,
// listing folders through theirs and opening each component with
// O_NOFOLLOW, so symlinks, fifos and devices are never followed or read
// (PackCheckpoint, UnpackCheckpoint). The runtime hands the folders to RunAs the
// same way, before the job starts.
package job
