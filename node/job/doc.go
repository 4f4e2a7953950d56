// Package job runs a renter's workload on leased GPUs and keeps it running.
//
// The renter side, a Controller inside the renter's own long-lived node,
// rents GPUs through the market with the job spec's hash in the lease
// proposal, opens a session stream (/gpumesh/job/2.0.0) to the supplier,
// sends a small Hello and, once the supplier has admitted it on its lease,
// the spec and the checkpoint to resume from, then follows the session:
// it writes the logs it receives to disk, answers each usage receipt
// with a signed voucher (package market/settle) after keeping both, pulls
// the job's checkpoint whenever a receipt announces a new one
// (/gpumesh/checkpoint/1.0.0), and, when the supplier goes silent while
// the renter itself can still reach the network, rents again excluding
// that supplier and restarts the job there from the last checkpoint with
// the next attempt number. Jobs are kept in the store, so a restarted node
// resumes them: the renter's terminal is never part of the job.
//
// The supplier side, an Executor, checks the spec against the lease,
// prepares a working dir under the node's data dir, runs the job through a
// node/runtime Runtime, streams its status and logs, and meters it: a
// durable, signed receipt every receipt interval. A job whose renter falls
// behind the lease's credit limit is paused, and stopped when payment does
// not resume within the halt grace. At the end both sides sign a
// settlement statement.
//
// Paths a job controls. Everything below an attempt's working and
// checkpoint folders belongs to the job while it runs, and the node reads
// there as its own user, outside the job's sandbox. So the node never
// resolves a path there by name: the attempt's folder is named by its
// lease (DATA/jobs/<lease id>/<attempt>), made afresh before the job
// starts, and filled (input files, the checkpoint to resume from) one
// component at a time from descriptors with O_NOFOLLOW and O_EXCL; the
// checkpoint folder is opened then and every later checkpoint is read
// through that descriptor, listing folders through theirs and opening each
// component with O_NOFOLLOW, so symlinks, fifos and devices are never
// followed or read (beneath.go, checkpoint.go). The runtime hands the
// folders to RunAs the same way, before the job starts.
//
// (lease, attempt) fences attempts: the renter refuses receipts of any
// attempt but its current one, and tells a supplier that comes back after
// a failover to stop its copy.
package job
