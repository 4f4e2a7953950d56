package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/settle"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/verify/inventory"
)

const (
	// DefaultTimeout bounds a call whose context has no deadline.
	DefaultTimeout = 30 * time.Second
	// SlowTimeout bounds, in the same way, the calls that wait on other
	// peers: submitting a job (renting and starting it) and challenging
	// a supplier.
	SlowTimeout = 10 * time.Minute
	// MaxErrorBody is how much of an error's body a client reads.
	MaxErrorBody = 64 << 10
)

// Client calls a node's API. Every method goes through one send path,
// which sets the bearer token, bounds the call by a default timeout
// unless its context has a deadline (following a log has none), and turns
// a non-2xx answer into an *Error.
type Client struct {
	addr    string
	token   string
	hc      *http.Client
	timeout time.Duration
}

// ClientOption configures NewClient.
type ClientOption func(*Client)

// WithHTTPClient sends the calls through hc (by default, a client of its
// own that goes through no proxy).
func WithHTTPClient(hc *http.Client) ClientOption {
	return func(c *Client) { c.hc = hc }
}

// DialFunc opens a connection to the API, as net.Dialer.DialContext does.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// WithDialer opens the API's connections with dial, e.g. a dialer that
// makes its sockets in another network namespace. Connections are not
// kept idle: each call dials afresh, so nothing lingers in that
// namespace between calls.
func WithDialer(dial DialFunc) ClientOption {
	return func(c *Client) {
		c.hc = &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: dial, DisableKeepAlives: true}}
	}
}

// WithTimeout sets the default timeout of the calls that are not slow
// (DefaultTimeout by default).
func WithTimeout(d time.Duration) ClientOption {
	return func(c *Client) { c.timeout = d }
}

// NewClient returns a client of the API at addr (host:port) that sends
// token as its bearer token ("" sends none: only /healthz answers).
func NewClient(addr, token string, opts ...ClientOption) *Client {
	c := &Client{addr: addr, token: token, timeout: DefaultTimeout}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		// The API is the node's own, most often on loopback: no proxy.
		c.hc = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConns: 4, IdleConnTimeout: 30 * time.Second}}
	}
	return c
}

// ClientForDataDir returns a client of the API at addr with the token of
// the node whose data dir is dataDir.
func ClientForDataDir(addr, dataDir string, opts ...ClientOption) (*Client, error) {
	token, err := ReadToken(dataDir)
	if err != nil {
		return nil, err
	}
	return NewClient(addr, token, opts...), nil
}

// Close closes the client's idle connections; the client stays usable.
// A client made for one call (a health probe) should be closed after it.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Addr is the host:port the client calls.
func (c *Client) Addr() string { return c.addr }

// Health asks GET /healthz, which needs no token.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	return h, c.call(ctx, c.timeout, http.MethodGet, PathHealth, nil, nil, &h)
}

// Peers lists the node's peers.
func (c *Client) Peers(ctx context.Context) ([]Peer, error) {
	var ps []Peer
	return ps, c.call(ctx, c.timeout, http.MethodGet, PathPeers, nil, nil, &ps)
}

// GPUs lists the node's GPUs.
func (c *Client) GPUs(ctx context.Context) ([]inventory.GPU, error) {
	var gs []inventory.GPU
	return gs, c.call(ctx, c.timeout, http.MethodGet, PathGPUs, nil, nil, &gs)
}

// Offers lists the offers the node knows that filter accepts.
func (c *Client) Offers(ctx context.Context, filter string) ([]market.Offer, error) {
	var offers []market.Offer
	return offers, c.call(ctx, c.timeout, http.MethodGet, PathOffers, url.Values{QueryFilter: {filter}}, nil, &offers)
}

// Orders lists the node's order book, as filter selects it.
func (c *Client) Orders(ctx context.Context, filter string) (Orders, error) {
	var o Orders
	return o, c.call(ctx, c.timeout, http.MethodGet, PathOrders, url.Values{QueryFilter: {filter}}, nil, &o)
}

// Leases lists the leases the node holds.
func (c *Client) Leases(ctx context.Context) ([]LeaseView, error) {
	var ls []LeaseView
	return ls, c.call(ctx, c.timeout, http.MethodGet, PathLeases, nil, nil, &ls)
}

// Prices is the node's price index, per model.
func (c *Client) Prices(ctx context.Context) ([]market.PricePoint, error) {
	var ps []market.PricePoint
	return ps, c.call(ctx, c.timeout, http.MethodGet, PathPrices, nil, nil, &ps)
}

// Capacity is a supplier's GPUs per model, held and free.
func (c *Client) Capacity(ctx context.Context) ([]market.Capacity, error) {
	var cs []market.Capacity
	return cs, c.call(ctx, c.timeout, http.MethodGet, PathCapacity, nil, nil, &cs)
}

// Reputation lists the suppliers the node has attestations about.
func (c *Client) Reputation(ctx context.Context) ([]ReputationView, error) {
	var rs []ReputationView
	return rs, c.call(ctx, c.timeout, http.MethodGet, PathReputation, nil, nil, &rs)
}

// Challenge has the node challenge a supplier's GPUs (all models, or
// model) and attest the verdict.
func (c *Client) Challenge(ctx context.Context, id peer.ID, model string) (ChallengeReport, error) {
	var rep ChallengeReport
	q := url.Values{QueryPeer: {id.String()}, QueryModel: {model}}
	return rep, c.call(ctx, SlowTimeout, http.MethodPost, PathChallenge, q, nil, &rep)
}

// SubmitJob has the node rent GPUs and start a job on them. When no
// supplier matches, the error is (for errors.As) a *market.NoMatch.
func (c *Client) SubmitJob(ctx context.Context, jr JobRequest) (job.View, error) {
	var v job.View
	return v, c.call(ctx, SlowTimeout, http.MethodPost, PathJobs, nil, jr, &v)
}

// Jobs lists the node's jobs.
func (c *Client) Jobs(ctx context.Context) ([]job.View, error) {
	var vs []job.View
	return vs, c.call(ctx, c.timeout, http.MethodGet, PathJobs, nil, nil, &vs)
}

// Job describes one job (an ID or a unique prefix of one).
func (c *Client) Job(ctx context.Context, id string) (job.View, error) {
	var v job.View
	return v, c.call(ctx, c.timeout, http.MethodGet, jobPath(PathJob, id), nil, nil, &v)
}

// StopJob asks the node to stop a job, saying why ("" for no reason).
func (c *Client) StopJob(ctx context.Context, id, reason string) (job.View, error) {
	var v job.View
	var q url.Values
	if reason != "" {
		q = url.Values{QueryReason: {reason}}
	}
	return v, c.call(ctx, c.timeout, http.MethodPost, jobPath(PathJobStop, id), q, nil, &v)
}

// Forward has the node listen on listen ("" for 127.0.0.1 and a free
// port) and carry each connection to port of job id.
func (c *Client) Forward(ctx context.Context, id, listen string, port uint16) (job.ForwardView, error) {
	var v job.ForwardView
	return v, c.call(ctx, c.timeout, http.MethodPost, PathForwards, nil, ForwardRequest{Job: id, Listen: listen, Port: port}, &v)
}

// Forwards lists the forwards of job id (all jobs' when "").
func (c *Client) Forwards(ctx context.Context, id string) ([]job.ForwardView, error) {
	var vs []job.ForwardView
	var q url.Values
	if id != "" {
		q = url.Values{QueryJob: {id}}
	}
	return vs, c.call(ctx, c.timeout, http.MethodGet, PathForwards, q, nil, &vs)
}

// Unforward closes job id's forward on listen (all its forwards when "").
func (c *Client) Unforward(ctx context.Context, id, listen string) error {
	q := url.Values{QueryJob: {id}}
	if listen != "" {
		q.Set(QueryListen, listen)
	}
	return c.call(ctx, c.timeout, http.MethodDelete, PathForwards, q, nil, nil)
}

// Logs copies a job's output from byte offset from to w; with follow it
// goes on until the job ends (or ctx does), without a timeout.
func (c *Client) Logs(ctx context.Context, id string, from int64, follow bool, w io.Writer) error {
	return c.TaskLogs(ctx, id, -1, from, follow, w)
}

// TaskLogs is Logs of task index of the task group id (index < 0: of the
// job id itself).
func (c *Client) TaskLogs(ctx context.Context, id string, index int, from int64, follow bool, w io.Writer) error {
	q := url.Values{QueryFrom: {strconv.FormatInt(from, 10)}}
	if index >= 0 {
		q.Set(QueryTask, strconv.Itoa(index))
	}
	timeout := c.timeout
	if follow {
		q.Set(QueryFollow, "1")
		timeout = 0
	}
	resp, cancel, err := c.send(ctx, timeout, http.MethodGet, jobPath(PathJobLogs, id), q, nil)
	if err != nil {
		return err
	}
	defer cancel()
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("node API: job %s logs: %w", id, err)
	}
	return nil
}

// Redeemable lists the supplier's best chain voucher of each
// chain-settled lease.
func (c *Client) Redeemable(ctx context.Context) ([]Redeemable, error) {
	var rs []Redeemable
	return rs, c.call(ctx, c.timeout, http.MethodGet, PathRedeemable, nil, nil, &rs)
}

// Receipts verifies the bills of the leases whose ID starts with lease
// (all when empty).
func (c *Client) Receipts(ctx context.Context, lease string) ([]settle.Report, error) {
	var reps []settle.Report
	return reps, c.call(ctx, c.timeout, http.MethodGet, PathReceipts, url.Values{QueryLease: {lease}}, nil, &reps)
}

// Doctor asks the node to check itself: reachability as its peers see
// it, relays, peers, GPUs, clock skew, disk, the API bind and listen
// addresses.
func (c *Client) Doctor(ctx context.Context) (DoctorReport, error) {
	var rep DoctorReport
	return rep, c.call(ctx, c.timeout, http.MethodGet, PathDoctor, nil, nil, &rep)
}

// ExplorerSummary is the network as the node sees it.
func (c *Client) ExplorerSummary(ctx context.Context) (ExplorerSummary, error) {
	var s ExplorerSummary
	return s, c.call(ctx, c.timeout, http.MethodGet, PathExplorerSummary, nil, nil, &s)
}

// ExplorerSuppliers lists every supplier the node has heard from.
func (c *Client) ExplorerSuppliers(ctx context.Context) ([]SupplierRow, error) {
	var rows []SupplierRow
	return rows, c.call(ctx, c.timeout, http.MethodGet, PathExplorerSuppliers, nil, nil, &rows)
}

// ExplorerSupplier is one supplier's page; an error that is ErrNotFound
// when the node knows nothing of it.
func (c *Client) ExplorerSupplier(ctx context.Context, id string) (SupplierDetail, error) {
	var sd SupplierDetail
	return sd, c.call(ctx, c.timeout, http.MethodGet, explorerSupplierPath(id), nil, nil, &sd)
}

// ExplorerTrades lists the trade prints of model (all when ""), oldest
// first.
func (c *Client) ExplorerTrades(ctx context.Context, model string) ([]TradeView, error) {
	var ts []TradeView
	var q url.Values
	if model != "" {
		q = url.Values{QueryModel: {model}}
	}
	return ts, c.call(ctx, c.timeout, http.MethodGet, PathExplorerTrades, q, nil, &ts)
}

// ExplorerAttestations lists the attestations about subject (all when
// ""), newest first.
func (c *Client) ExplorerAttestations(ctx context.Context, subject string) ([]AttestationView, error) {
	var as []AttestationView
	var q url.Values
	if subject != "" {
		q = url.Values{QueryPeer: {subject}}
	}
	return as, c.call(ctx, c.timeout, http.MethodGet, PathExplorerAttestations, q, nil, &as)
}

// ExplorerBook is the order book: every live ask and bid.
func (c *Client) ExplorerBook(ctx context.Context) (Orders, error) {
	var o Orders
	return o, c.call(ctx, c.timeout, http.MethodGet, PathExplorerBook, nil, nil, &o)
}

// call sends a request and decodes its JSON answer into out.
func (c *Client) call(ctx context.Context, timeout time.Duration, method, path string, q url.Values, body, out any) error {
	resp, cancel, err := c.send(ctx, timeout, method, path, q, body)
	if err != nil {
		return err
	}
	defer cancel()
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("node API %s %s: read the answer: %w", method, path, err)
	}
	return nil
}

// send is the one send path: it sends a request with the token (and body
// as JSON, unless nil), bounded by timeout when ctx has no deadline (0:
// unbounded), and returns a 2xx answer, whose body the caller reads
// before calling cancel, or an error: an *Error for any other status.
func (c *Client) send(ctx context.Context, timeout time.Duration, method, path string, q url.Values, body any) (*http.Response, context.CancelFunc, error) {
	cancel := context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok && timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
	}
	u := "http://" + c.addr + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			cancel()
			return nil, nil, fmt.Errorf("node API %s %s: encode the request: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("node API %s %s: %w", method, path, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		ctxErr := ctx.Err()
		cancel()
		if ctxErr != nil {
			return nil, nil, fmt.Errorf("node API %s %s: no answer: %w", method, path, ctxErr)
		}
		return nil, nil, &unreachableError{addr: c.addr, err: err}
	}
	if resp.StatusCode/100 != 2 {
		defer cancel()
		defer resp.Body.Close()
		return nil, nil, readError(method, path, resp)
	}
	return resp, cancel, nil
}

// readError reads at most MaxErrorBody of a failed answer into an *Error.
func readError(method, path string, resp *http.Response) *Error {
	e := &Error{Method: method, Path: path, Status: resp.StatusCode}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, MaxErrorBody))
	var cb ConflictBody
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && json.Unmarshal(b, &cb) == nil && cb.Error != "" {
		e.Message, e.Reasons = cb.Error, cb.Reasons
		return e
	}
	e.Message = strings.TrimSpace(string(b))
	return e
}

// unreachableError is a call that reached no node.
type unreachableError struct {
	addr string
	err  error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("cannot reach the node's API at %s: %v; is `gpumesh node` running? (pass --api HOST:PORT)", e.addr, e.err)
}

func (e *unreachableError) Unwrap() []error { return []error{ErrUnreachable, e.err} }
