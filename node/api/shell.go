package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/job"
	"github.com/gpumesh/gpumesh/node/job/pb"
)

// ShellUpgrade is the Upgrade token of POST /api/v1/leases/{id}/shell:
// after the 101 answer the connection carries shell frames
// (docs/PROTOCOL.md §40.2), the renter's input kinds from the client and
// the output kinds to it.
const ShellUpgrade = "gpumesh-shell/1"

// HeaderJob names, in the 101 answer, the job the shell runs as.
const HeaderJob = "Gpumesh-Job"

// ShellRequest is the body of POST /api/v1/leases/{id}/shell: what the
// shell runs, on a terminal or not.
type ShellRequest struct {
	Argv []string `json:"argv"` // empty: ["sh"]
	Env  []string `json:"env"`  // NAME=VALUE, e.g. TERM
	TTY  bool     `json:"tty"`  // run on a terminal of rows x cols
	Rows int      `json:"rows"`
	Cols int      `json:"cols"`
}

// ToRequest checks a ShellRequest and turns it into the controller's
// form: a job on lease with a standard input.
func (r ShellRequest) ToRequest(lease string) (job.Request, error) {
	argv := r.Argv
	if len(argv) == 0 {
		argv = []string{"sh"}
	}
	req, err := JobRequest{Lease: lease, Argv: argv, Env: r.Env}.ToRequest()
	if err != nil {
		return job.Request{}, err
	}
	switch {
	case r.TTY && (r.Rows < 1 || r.Cols < 1 || r.Rows > 65535 || r.Cols > 65535):
		return job.Request{}, fmt.Errorf("terminal size %dx%d: want 1..65535 each", r.Cols, r.Rows)
	case !r.TTY && (r.Rows != 0 || r.Cols != 0):
		return job.Request{}, errors.New("rows and cols need tty")
	}
	req.Spec.Stdin = &pb.Stdin{Tty: r.TTY, Rows: uint32(r.Rows), Cols: uint32(r.Cols)}
	return req, nil
}

// ShellSession is a started shell as the backend hands it over: its job
// and the stream of its frames.
type ShellSession struct {
	JobID string
	Conn  io.ReadWriteCloser
}

// aborter is a stream that can end with an error (a libp2p stream's
// Reset): the supplier then takes it as a hang-up.
type aborter interface{ Reset() error }

func (s *server) shell(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") != ShellUpgrade {
		http.Error(w, "shell: send Connection: Upgrade and Upgrade: "+ShellUpgrade, http.StatusBadRequest)
		return
	}
	var sr ShellRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&sr); err != nil {
		http.Error(w, "shell request: "+err.Error(), http.StatusBadRequest)
		return
	}
	req, err := sr.ToRequest(r.PathValue("id"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	sess, err := s.b.Shell(r.Context(), r.PathValue("id"), req)
	switch {
	case errors.Is(err, ErrNoLease):
		fail(w, err, http.StatusNotFound)
		return
	case errors.Is(err, market.ErrLeaseEnded), errors.Is(err, market.ErrLeaseBusy), errors.Is(err, market.ErrNotYours):
		fail(w, err, http.StatusConflict)
		return
	case err != nil:
		fail(w, err, http.StatusBadGateway)
		return
	}
	// Through the wrappers (metrics' statusWriter) to the connection.
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		abort(sess.Conn) // the supplier stops the job: a hang-up
		fail(w, fmt.Errorf("shell: this connection cannot be upgraded: %w", err), http.StatusInternalServerError)
		return
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Time{})
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n%s: %s\r\n\r\n", ShellUpgrade, HeaderJob, sess.JobID)
	if err := brw.Flush(); err != nil {
		abort(sess.Conn)
		return
	}
	relayShell(sess.Conn, brw.Reader, conn)
}

// relayShell carries frames between the client and the supplier's stream
// until either ends: the supplier's end (after the job's exit) closes the
// client's connection; the client's end first is a hang-up, and resets
// the stream. The client's bytes are checked by the supplier, the
// supplier's by the client: both read frames with shell.Reader.
func relayShell(st io.ReadWriteCloser, fromClient io.Reader, toClient io.WriteCloser) {
	supplierDone := make(chan struct{})
	go func() {
		defer close(supplierDone)
		_, _ = io.Copy(toClient, st)
		_ = toClient.Close()
	}()
	_, _ = io.Copy(st, fromClient)
	select {
	case <-supplierDone:
		_ = st.Close()
	default:
		abort(st)
		<-supplierDone
	}
}

func abort(c io.Closer) {
	if a, ok := c.(aborter); ok {
		_ = a.Reset()
		return
	}
	_ = c.Close()
}

// ShellConn is the client's end of an upgraded shell connection.
type ShellConn struct {
	io.ReadWriteCloser
	JobID string
}

// Shell asks the node to run req on lease and returns the upgraded
// connection, which carries shell frames (shell.Run speaks them). ctx
// bounds the start only.
func (c *Client) Shell(ctx context.Context, lease string, req ShellRequest) (*ShellConn, error) {
	path := jobPath(PathLeaseShell, lease)
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("node API POST %s: encode the request: %w", path, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, SlowTimeout)
		defer cancel()
	}
	hreq, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, "http://"+c.addr+path, bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("node API POST %s: %w", path, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Connection", "Upgrade")
	hreq.Header.Set("Upgrade", ShellUpgrade)
	if c.token != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.token)
	}
	type answer struct {
		resp *http.Response
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := c.hc.Do(hreq)
		got <- answer{resp, err}
	}()
	var a answer
	select {
	case a = <-got:
	case <-ctx.Done():
		go func() { // the answer may still come: its connection is closed
			if a := <-got; a.err == nil {
				a.resp.Body.Close()
			}
		}()
		return nil, fmt.Errorf("node API POST %s: no answer: %w", path, ctx.Err())
	}
	if a.err != nil {
		return nil, &unreachableError{addr: c.addr, err: a.err}
	}
	if a.resp.StatusCode != http.StatusSwitchingProtocols {
		defer a.resp.Body.Close()
		return nil, readError(http.MethodPost, path, a.resp)
	}
	rwc, ok := a.resp.Body.(io.ReadWriteCloser)
	if !ok {
		a.resp.Body.Close()
		return nil, fmt.Errorf("node API POST %s: the upgraded connection is not writable", path)
	}
	return &ShellConn{ReadWriteCloser: rwc, JobID: a.resp.Header.Get(HeaderJob)}, nil
}
