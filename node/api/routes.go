package api

import (
	"net/http"
	"net/url"
	"strings"
)

// The route paths, as the handler registers them and Client asks for them.
// {id} is a job ID.
const (
	PathHealth = "/healthz"
	PathPeers  = "/api/v1/peers"
	PathGPUs   = "/api/v1/gpus"
	PathOffers = "/api/v1/offers"
	PathOrders = "/api/v1/orders"
	PathLeases = "/api/v1/leases"
	// PathLeaseRelease: {id} is a lease ID or its unique prefix.
	PathLeaseRelease = "/api/v1/leases/{id}/release"
	// PathLeaseShell: {id} is a lease ID or its unique prefix; the
	// connection is upgraded to ShellUpgrade (shell.go).
	PathLeaseShell = "/api/v1/leases/{id}/shell"
	PathPrices     = "/api/v1/prices"
	PathCapacity   = "/api/v1/capacity"
	PathReputation = "/api/v1/reputation"
	PathChallenge  = "/api/v1/challenge"
	PathJobs       = "/api/v1/jobs"
	PathJob        = "/api/v1/jobs/{id}"
	PathJobStop    = "/api/v1/jobs/{id}/stop"
	PathJobLogs    = "/api/v1/jobs/{id}/logs"
	PathForwards   = "/api/v1/forwards"
	PathReceipts   = "/api/v1/receipts"
	// PathRedeemable lists a supplier's best chain voucher of each
	// chain-settled lease (docs/PROTOCOL.md §43.6): what its redeemer
	// sends to the contract.
	PathRedeemable = "/api/v1/chain/redeemable"
	PathDoctor     = "/api/v1/doctor"
	PathMetrics    = "/metrics"
	PathPprof      = "/debug/pprof/"
	PathOpenAPI    = "/api/v1/openapi.json"

	// The Explorer's public read routes (explorer.go). {peer} is a peer
	// ID.
	PathExplorerSummary      = "/api/v1/explorer/summary"
	PathExplorerSuppliers    = "/api/v1/explorer/suppliers"
	PathExplorerSupplier     = "/api/v1/explorer/suppliers/{peer}"
	PathExplorerTrades       = "/api/v1/explorer/trades"
	PathExplorerAttestations = "/api/v1/explorer/attestations"
	PathExplorerBook         = "/api/v1/explorer/book"
)

// The Explorer's page and compiled assets (served with WithExplorer),
// and the prefix of its read routes: all three are open (Public).
const (
	ExplorerPage   = "/"
	ExplorerAssets = "/assets/"
	ExplorerRoutes = "/api/v1/explorer/"
)

// The query keys of the routes that take any.
const (
	QueryFilter = "filter" // offers, orders: a market filter
	QueryPeer   = "peer"   // challenge: the supplier's peer ID
	QueryModel  = "model"  // challenge: one GPU model, or all
	QueryReason = "reason" // stop: why
	QueryFrom   = "from"   // logs: byte offset
	QueryFollow = "follow" // logs: "1" follows until the job ends
	QueryTask   = "task"   // logs: a task group's task index
	QueryLease  = "lease"  // receipts: a lease ID or its prefix
	QueryJob    = "job"    // forwards: a job ID or its prefix
	QueryListen = "listen" // forwards: a local address
	// QueryModel and QueryPeer also narrow explorer trades (model) and
	// attestations (peer).
)

// Route is one method and path the API serves.
type Route struct {
	Method string
	Path   string
}

// Pattern is the route as an http.ServeMux pattern; a route without a
// method answers every method.
func (r Route) Pattern() string {
	if r.Method == "" {
		return r.Path
	}
	return r.Method + " " + r.Path
}

// Routes lists every route NewHandler serves (the profiler's sub-paths
// aside), in a fresh slice.
func Routes() []Route {
	get, post, del := http.MethodGet, http.MethodPost, http.MethodDelete
	return []Route{
		{get, PathHealth}, {get, PathPeers}, {get, PathGPUs}, {get, PathOffers}, {get, PathOrders},
		{get, PathLeases}, {post, PathLeases}, {post, PathLeaseRelease}, {post, PathLeaseShell}, {get, PathPrices}, {get, PathCapacity}, {get, PathReputation},
		{post, PathChallenge}, {post, PathJobs}, {get, PathJobs}, {get, PathJob}, {post, PathJobStop},
		{get, PathJobLogs}, {get, PathForwards}, {post, PathForwards}, {del, PathForwards}, {get, PathReceipts}, {get, PathRedeemable}, {get, PathDoctor}, {get, PathMetrics}, {"", PathPprof},
		{get, PathOpenAPI},
		{get, PathExplorerSummary}, {get, PathExplorerSuppliers}, {get, PathExplorerSupplier}, {get, PathExplorerTrades},
		{get, PathExplorerAttestations}, {get, PathExplorerBook},
	}
}

// explorerSupplierPath fills the {peer} of PathExplorerSupplier.
func explorerSupplierPath(id string) string {
	return strings.Replace(PathExplorerSupplier, "{peer}", url.PathEscape(id), 1)
}

// jobPath fills the {id} of a job route.
func jobPath(route, id string) string {
	return strings.Replace(route, "{id}", url.PathEscape(id), 1)
}
