// Package openapi builds the OpenAPI 3 document of the node's API from
// the same Go types the handlers write (by reflection, kin-openapi's
// openapi3gen), so that it cannot drift from them. The node serves the
// document encoded at build time (node/api/openapi.json, embedded): its
// tests fail while that file is not what Document builds, and
// `go test ./node/api/openapi -update` rewrites it. Building it at run
// time instead put kin-openapi, and its JSON Schema validator's 12 ms of
// package initialisation, in every start of the gpumesh binary, each
// job's sandbox shim included.
package openapi

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3gen"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/verify/inventory"
)

// docParam is a query or path parameter of a route.
type docParam struct {
	in, name, about string
	required        bool
}

// routeDoc describes one route.
type routeDoc struct {
	summary string
	public  bool // served without the token (Public)
	params  []docParam
	body    any    // the request's JSON body, as a Go value; nil: none
	answer  any    // the 200 answer's JSON body, as a Go value; nil: see media
	media   string // a non-JSON answer's media type
	status  int    // the success status, when not 200
	errors  map[int]string
}

var (
	qFilter = docParam{"query", api.QueryFilter, "a market filter (docs/PROTOCOL.md §9), e.g. model=h100-sxm region=eu-west", false}
	pJobID  = docParam{"path", "id", "a job ID or its unique prefix (at least 4 characters)", true}
	pPeer   = docParam{"path", "peer", "a supplier's peer ID", true}
)

// docs is the description of every route: what reflection cannot see
// (summaries, parameters, statuses). A test checks that it covers every
// route of api.Routes and nothing else, and the node's tests that real
// answers match the schemas.
func docs() map[api.Route]routeDoc {
	get, post, del := http.MethodGet, http.MethodPost, http.MethodDelete
	notStarted := map[int]string{503: "jobs are not started yet"}
	return map[api.Route]routeDoc{
		{Method: get, Path: api.PathHealth}: {summary: "Whether the node is up, its peer ID, addresses and counts", public: true, answer: api.Health{}},
		{Method: get, Path: api.PathPeers}:  {summary: "The peers heard from: heartbeats, connection, reputation", answer: []api.Peer{}},
		{Method: get, Path: api.PathGPUs}:   {summary: "This node's GPUs", answer: []inventory.GPU{}},
		{Method: get, Path: api.PathOffers}: {summary: "The offers of suppliers that a filter accepts (DHT profiles, prices from the order book)", params: []docParam{qFilter}, answer: []market.Offer{}, errors: map[int]string{400: "a bad filter"}},
		{Method: get, Path: api.PathOrders}: {summary: "The order book's asks and bids that a filter accepts", params: []docParam{qFilter}, answer: api.Orders{}, errors: map[int]string{400: "a bad filter"}},
		{Method: get, Path: api.PathLeases}: {summary: "This node's leases, as renter and as supplier", answer: []api.LeaseView{}},
		{Method: post, Path: api.PathLeases}: {summary: "Rent GPUs with no job bound to them (jobs start on the lease with lease in a job request)", body: api.RentRequest{}, answer: api.LeaseView{},
			errors: map[int]string{400: "a bad rent request", 409: "no supplier matched (ConflictBody)", 502: "the lease could not be made"}},
		{Method: post, Path: api.PathLeaseRelease}: {summary: "Release a lease this node rented before its end", params: []docParam{{"path", "id", "a lease ID or its unique prefix", true}}, answer: api.LeaseView{},
			errors: map[int]string{404: "no such lease of this node's", 409: "the supplier refused: not yours, ended, or a job runs on it", 502: "the supplier could not be reached"}},
		{Method: post, Path: api.PathLeaseShell}: {summary: "Run a shell or a command on a lease this node rented: the connection is upgraded (Upgrade: " + api.ShellUpgrade + ") and carries shell frames (docs/PROTOCOL.md §40)",
			params: []docParam{{"path", "id", "a lease ID or its unique prefix", true}}, body: api.ShellRequest{}, status: http.StatusSwitchingProtocols,
			errors: map[int]string{400: "a bad shell request, or no Upgrade header", 404: "no such lease of this node's", 409: "the lease has ended or a job runs on it", 502: "the job did not start or the supplier refused the shell"}},
		{Method: get, Path: api.PathPrices}:     {summary: "The price index: trade prints by model", answer: []market.PricePoint{}},
		{Method: get, Path: api.PathCapacity}:   {summary: "This supplier's GPUs by model: free, leased", answer: []market.Capacity{}},
		{Method: get, Path: api.PathReputation}: {summary: "Every supplier's reputation as this node computes it", answer: []api.ReputationView{}},
		{Method: post, Path: api.PathChallenge}: {summary: "Challenge a supplier's GPUs and attest the verdict", params: []docParam{
			{"query", api.QueryPeer, "the supplier's peer ID", true}, {"query", api.QueryModel, "one GPU model; all when absent", false},
		}, answer: api.ChallengeReport{}, errors: map[int]string{400: "a bad peer ID", 502: "the challenge could not run"}},
		{Method: post, Path: api.PathJobs}: {summary: "Rent GPUs and run a job on them", body: api.JobRequest{}, answer: job.View{},
			errors: map[int]string{400: "a bad job request", 409: "no supplier matched (ConflictBody)", 502: "the job could not start", 503: "jobs are not started yet"}},
		{Method: get, Path: api.PathJobs}: {summary: "This node's jobs, newest first", answer: []job.View{}, errors: notStarted},
		{Method: get, Path: api.PathJob}:  {summary: "One job", params: []docParam{pJobID}, answer: job.View{}, errors: map[int]string{404: "no such job", 503: "jobs are not started yet"}},
		{Method: post, Path: api.PathJobStop}: {summary: "Stop a job", params: []docParam{pJobID, {"query", api.QueryReason, "why, kept with the job", false}}, answer: job.View{},
			errors: map[int]string{404: "no such job", 503: "jobs are not started yet"}},
		{Method: get, Path: api.PathJobLogs}: {summary: "A job's output, from a byte offset, optionally followed until the job ends", params: []docParam{
			pJobID, {"query", api.QueryFrom, "the byte offset to start at", false}, {"query", api.QueryFollow, "1: follow until the job ends", false},
			{"query", api.QueryTask, "a task group's task index: that task's output", false},
		}, media: "application/octet-stream", errors: map[int]string{404: "no such job", 503: "jobs are not started yet"}},
		{Method: get, Path: api.PathForwards}: {summary: "The renter's forwards: local addresses that reach a job's port", params: []docParam{{"query", api.QueryJob, "a job ID or prefix; all jobs when absent", false}},
			answer: []job.ForwardView{}, errors: map[int]string{404: "no such job", 503: "jobs are not started yet"}},
		{Method: post, Path: api.PathForwards}: {summary: "Forward a local address to a port a job declares", body: api.ForwardRequest{}, answer: job.ForwardView{},
			errors: map[int]string{400: "a bad forward request", 404: "no such job", 503: "jobs are not started yet"}},
		{Method: del, Path: api.PathForwards}: {summary: "Stop a forward (or every forward of a job)", params: []docParam{
			{"query", api.QueryJob, "a job ID or prefix", true}, {"query", api.QueryListen, "the forward's local address; all of the job's when absent", false},
		}, status: http.StatusNoContent, errors: map[int]string{400: "no job given", 404: "no such job or forward", 503: "jobs are not started yet"}},
		{Method: get, Path: api.PathReceipts}: {summary: "The bills of this node's leases, each receipt and voucher checked", params: []docParam{{"query", api.QueryLease, "a lease ID or prefix; all when absent", false}},
			answer: []settle.Report{}, errors: notStarted},
		{Method: get, Path: api.PathRedeemable}: {summary: "The best chain voucher of each chain-settled lease this supplier holds, for its redeemer", answer: []api.Redeemable{}, errors: notStarted},
		{Method: get, Path: api.PathDoctor}:     {summary: "The node's self-checks (reachability, GPUs, clock, disk, services)", answer: api.DoctorReport{}},
		{Method: get, Path: api.PathMetrics}:    {summary: "Prometheus metrics (the application's and libp2p's)", media: "text/plain"},
		{Method: "", Path: api.PathPprof}:       {summary: "Go's profiler index (net/http/pprof); any method", media: "text/html"},
		{Method: get, Path: api.PathOpenAPI}:    {summary: "This document", public: true, media: "application/json"},

		{Method: get, Path: api.PathExplorerSummary}:   {summary: "Explorer: the network as this node sees it", public: true, answer: api.ExplorerSummary{}},
		{Method: get, Path: api.PathExplorerSuppliers}: {summary: "Explorer: every supplier heard from", public: true, answer: []api.SupplierRow{}},
		{Method: get, Path: api.PathExplorerSupplier}: {summary: "Explorer: one supplier: asks, attestations, 30-day uptime, leases served", public: true, params: []docParam{pPeer},
			answer: api.SupplierDetail{}, errors: map[int]string{400: "a bad peer ID", 404: "this node knows no such supplier"}},
		{Method: get, Path: api.PathExplorerTrades}: {summary: "Explorer: trade prints, oldest first", public: true, params: []docParam{{"query", api.QueryModel, "one GPU model; all when absent", false}},
			answer: []api.TradeView{}},
		{Method: get, Path: api.PathExplorerAttestations}: {summary: "Explorer: attestations, newest first (at most 200)", public: true, params: []docParam{{"query", api.QueryPeer, "the supplier judged; all when absent", false}},
			answer: []api.AttestationView{}, errors: map[int]string{400: "a bad peer ID"}},
		{Method: get, Path: api.PathExplorerBook}: {summary: "Explorer: the order book, every live ask and bid", public: true, answer: api.Orders{}},
	}
}

// Document is the API's OpenAPI 3 document.
func Document() (*openapi3.T, error) {
	doc := &openapi3.T{
		OpenAPI: "3.0.3",
		Info: &openapi3.Info{
			Title:   "gpumesh node API",
			Version: "1",
			Description: "Every gpumesh node's local HTTP API (default 127.0.0.1:7450). All routes but the public ones " +
				"need the bearer token in DATA/" + api.TokenFile + ". docs/API.md has examples.",
		},
		Paths:      openapi3.NewPaths(),
		Components: &openapi3.Components{Schemas: openapi3.Schemas{}, SecuritySchemes: openapi3.SecuritySchemes{}},
		Security:   openapi3.SecurityRequirements{{"token": []string{}}},
	}
	doc.Components.SecuritySchemes["token"] = &openapi3.SecuritySchemeRef{Value: openapi3.NewSecurityScheme().WithType("http").WithScheme("bearer")}
	gen := openapi3gen.NewGenerator(openapi3gen.SchemaCustomizer(nullableCollections))
	schemaOf := func(v any) (*openapi3.SchemaRef, error) {
		return gen.NewSchemaRefForValue(v, doc.Components.Schemas)
	}
	d := docs()
	for _, rt := range api.Routes() {
		rd, ok := d[rt]
		if !ok {
			return nil, fmt.Errorf("api: route %s is not documented", rt.Pattern())
		}
		op := openapi3.NewOperation()
		op.Summary = rd.summary
		op.OperationID = operationID(rt)
		if rd.public {
			op.Security = &openapi3.SecurityRequirements{}
		}
		for _, p := range rd.params {
			prm := &openapi3.Parameter{In: p.in, Name: p.name, Description: p.about, Required: p.required,
				Schema: openapi3.NewStringSchema().NewRef()}
			op.AddParameter(prm)
		}
		if rd.body != nil {
			s, err := schemaOf(rd.body)
			if err != nil {
				return nil, fmt.Errorf("api: schema of %s's body: %w", rt.Pattern(), err)
			}
			op.RequestBody = &openapi3.RequestBodyRef{Value: openapi3.NewRequestBody().WithRequired(true).WithJSONSchemaRef(s)}
		}
		status := rd.status
		if status == 0 {
			status = http.StatusOK
		}
		resp := openapi3.NewResponse().WithDescription(http.StatusText(status))
		switch {
		case rd.answer != nil:
			s, err := schemaOf(rd.answer)
			if err != nil {
				return nil, fmt.Errorf("api: schema of %s's answer: %w", rt.Pattern(), err)
			}
			resp.WithJSONSchemaRef(s)
			// The Go type the client decodes it into (package api
			// unless qualified).
			op.Extensions = map[string]any{"x-go-type": strings.ReplaceAll(reflect.TypeOf(rd.answer).String(), "api.", "")}
		case rd.media != "":
			resp.WithContent(openapi3.NewContentWithSchema(openapi3.NewSchema(), []string{rd.media}))
		}
		op.AddResponse(status, resp)
		if !rd.public {
			op.AddResponse(http.StatusUnauthorized, openapi3.NewResponse().WithDescription("no token, or a wrong one"))
		}
		for code, why := range rd.errors {
			op.AddResponse(code, openapi3.NewResponse().WithDescription(why))
		}
		methods := []string{rt.Method}
		if rt.Method == "" {
			methods = []string{http.MethodGet}
		}
		for _, m := range methods {
			doc.AddOperation(rt.Path, m, op)
		}
	}
	if len(d) != len(api.Routes()) {
		return nil, fmt.Errorf("api: %d routes documented, %d served", len(d), len(api.Routes()))
	}
	return doc, nil
}

// operationID names a route's operation: its method and path in camel
// case, e.g. getApiV1ExplorerSuppliersPeer.
func operationID(rt api.Route) string {
	m := strings.ToLower(rt.Method)
	if m == "" {
		m = "any"
	}
	var b strings.Builder
	b.WriteString(m)
	for _, part := range strings.FieldsFunc(rt.Path, func(r rune) bool { return r == '/' || r == '{' || r == '}' || r == '.' || r == '_' }) {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// nullableCollections marks slices and maps nullable: Go writes a nil
// one as null. (Top-level list answers are never null.)
func nullableCollections(_ string, t reflect.Type, _ reflect.StructTag, s *openapi3.Schema) error {
	if t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8 || t.Kind() == reflect.Map {
		s.Nullable = true
	}
	return nil
}
