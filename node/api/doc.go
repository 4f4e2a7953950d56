// Package api is the node's local HTTP API: both of its ends, so that the
// server and its clients share one description of it.
//
//   - routes.go: the route paths and query keys, as constants used by the
//     handler and by Client alike, and Routes, the table of every route.
//   - types.go: the JSON bodies of the routes (Health, Peer, Orders,
//     LeaseView, ReputationView, ChallengeReport, DoctorReport, JobRequest,
//     ...); the JSON field names are a contract of the CLI's --json output.
//   - jobrequest.go: JobRequest's check and conversion into a job.Request.
//   - token.go: the bearer token (TokenFile in the data dir, mode 0600),
//     EnsureToken, ReadToken, and RequireToken, the middleware that
//     leaves only GET /healthz open.
//   - server.go: Backend, what the handlers need of a node (package node
//     implements it), and NewHandler, the http.Handler of every route.
//     Handlers only parse, call the backend, write JSON and map errors to
//     statuses.
//   - client.go: Client, typed methods over one send path (token, a
//     default timeout, bounded error bodies), used by the CLI, the testnet
//     and the bench harness.
//   - errors.go: *Error, what a non-2xx answer becomes, with sentinels
//     (ErrUnauthorized, ErrNotFound, ErrConflict, ErrUnavailable) for
//     errors.Is, and ErrUnreachable when no node answers.
//
// The routes (all but /healthz need the token):
//
//	GET  /healthz                   Health
//	GET  /api/v1/peers              []Peer
//	GET  /api/v1/gpus               []inventory.GPU
//	GET  /api/v1/offers?filter=F    []market.Offer
//	GET  /api/v1/orders?filter=F    Orders
//	GET  /api/v1/leases             []LeaseView
//	GET  /api/v1/prices             []market.PricePoint
//	GET  /api/v1/capacity           []market.Capacity
//	GET  /api/v1/reputation         []ReputationView
//	POST /api/v1/challenge?peer=P&model=M   ChallengeReport
//	POST /api/v1/jobs               JobRequest -> job.View (409: ConflictBody)
//	GET  /api/v1/jobs               []job.View
//	GET  /api/v1/jobs/{id}          job.View
//	POST /api/v1/jobs/{id}/stop?reason=R    job.View
//	GET  /api/v1/jobs/{id}/logs?from=N&follow=1   the log, streamed
//	GET  /api/v1/receipts?lease=L   []settle.Report
//	GET  /api/v1/doctor             DoctorReport
//	GET  /metrics, /debug/pprof/... Prometheus metrics and Go's profiler
//
// Package api imports no part of package node: node imports it.
package api
