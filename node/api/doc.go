// Package api is the node's local HTTP API: both of its ends, so that the
// server and its clients share one description of it.
//
//   - Routes: the route paths and query keys, as constants used by the
//     handler and by Client alike, and Routes, the table of every route;
//     OpenAPI builds the OpenAPI 3 document of them from the same types.
//   - The JSON bodies of the routes (Health, Peer, Orders, LeaseView,
//     ReputationView, ChallengeReport, DoctorReport, JobRequest, ...); the
//     JSON field names are a contract of the CLI's --json output.
//   - JobRequest's check and conversion into a job.Request.
//   - The bearer token (TokenFile in the data dir, mode 0600):
//     EnsureToken, ReadToken, and RequireToken, the middleware that leaves
//     open only what the network publishes anyway (GET /healthz, the
//     Explorer's page and data, the OpenAPI document).
//   - Backend, what the handlers need of a node (package node implements
//     it), and NewHandler, the http.Handler of every route. Handlers only
//     parse, call the backend, write JSON and map errors to statuses.
//   - Client, typed methods over one send path (token, a default timeout,
//     bounded error bodies), used by the CLI, the testnet and the bench
//     harness.
//   - *Error, what a non-2xx answer becomes, with sentinels
//     (ErrUnauthorized, ErrNotFound, ErrConflict, ErrUnavailable) for
//     errors.Is, and ErrUnreachable when no node answers.
//
// docs/API.md has the route table, generated from the OpenAPI document
// and checked by a test, with curl and Client examples.
//
// Package api imports no part of package node: node imports it.
package api
