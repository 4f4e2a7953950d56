package chainpay

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Reader reads a PaymentChannel deployment's state over an Ethereum node's
// JSON-RPC interface (eth_call, eth_blockNumber, eth_chainId): what a
// supplier needs to know how much a renter's channel covers. It sends no
// transaction, holds no key and links no Ethereum client; the chain
// module's adapter sends the transactions.
type Reader struct {
	url    string
	d      Domain
	conf   uint64
	client *http.Client
	id     atomic.Uint64
}

// ReaderOptions tune a Reader.
type ReaderOptions struct {
	// Confirmations: read the state of the block this many below the
	// latest (0: the latest), so that a deposit a reorganisation can undo
	// does not count yet.
	Confirmations uint64
	// Client sends the requests (default: one with a 15 s timeout).
	Client *http.Client
}

// maxRPCResponse bounds a JSON-RPC answer; ours are a few hundred bytes.
const maxRPCResponse = 1 << 20

// ErrRPC is a JSON-RPC call that failed or answered what cannot be read.
var ErrRPC = errors.New("chain rpc")

// NewReader returns a reader of the deployment d through the JSON-RPC
// endpoint url (http or https).
func NewReader(url string, d Domain, opts ReaderOptions) (*Reader, error) {
	if err := d.Check(); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		return nil, fmt.Errorf("%w: rpc url %q: want http:// or https://", ErrMalformed, url)
	}
	c := opts.Client
	if c == nil {
		c = &http.Client{Timeout: 15 * time.Second}
	}
	return &Reader{url: url, d: d, conf: opts.Confirmations, client: c}, nil
}

// ChannelState is the contract's state of one (renter, supplier) channel.
type ChannelState struct {
	Balance  int64         // micros: deposited, less redeemed and withdrawn
	Window   time.Duration // the close window; 0: no channel
	ClosesAt time.Time     // zero while open
}

// ChannelID is the contract's key of the channel from renter to
// supplier: keccak256(abi.encode(renter, supplier)).
func ChannelID(renter, supplier Address) [32]byte {
	return Keccak256(addrWord(renter), addrWord(supplier))
}

var (
	selChannels = selector("channels(bytes32)")
	selLanes    = selector("lanes(bytes32,bytes32)")
)

func selector(sig string) []byte {
	h := Keccak256([]byte(sig))
	return h[:4]
}

// CheckChain fails unless the endpoint's chain is the deployment's.
func (r *Reader) CheckChain(ctx context.Context) error {
	var hexID string
	if err := r.call(ctx, "eth_chainId", []any{}, &hexID); err != nil {
		return err
	}
	id, ok := new(big.Int).SetString(strings.TrimPrefix(hexID, "0x"), 16)
	if !ok {
		return fmt.Errorf("%w: eth_chainId answered %q", ErrRPC, hexID)
	}
	if id.Cmp(r.d.ChainID) != 0 {
		return fmt.Errorf("%w: the endpoint is on chain %s, the deployment on %s", ErrRPC, id, r.d.ChainID)
	}
	return nil
}

// State reads the channel from renter to supplier.
func (r *Reader) State(ctx context.Context, renter, supplier Address) (ChannelState, error) {
	id := ChannelID(renter, supplier)
	out, err := r.ethCall(ctx, append(bytes.Clone(selChannels), id[:]...), 96)
	if err != nil {
		return ChannelState{}, fmt.Errorf("channel: %w", err)
	}
	bal, err := int64Word(out[:32])
	if err != nil {
		return ChannelState{}, fmt.Errorf("channel: balance: %w", err)
	}
	window, err := int64Word(out[32:64])
	if err != nil {
		return ChannelState{}, fmt.Errorf("channel: window: %w", err)
	}
	at, err := int64Word(out[64:96])
	if err != nil {
		return ChannelState{}, fmt.Errorf("channel: closesAt: %w", err)
	}
	s := ChannelState{Balance: bal, Window: time.Duration(window) * time.Second}
	if at != 0 {
		s.ClosesAt = time.Unix(at, 0)
	}
	return s, nil
}

// LanePaid reads what the channel from renter to supplier has paid on
// lease, and the nonce of the last voucher redeemed there.
func (r *Reader) LanePaid(ctx context.Context, renter, supplier Address, lease [32]byte) (paid int64, nonce uint64, err error) {
	id := ChannelID(renter, supplier)
	data := append(append(bytes.Clone(selLanes), id[:]...), lease[:]...)
	out, err := r.ethCall(ctx, data, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("lane: %w", err)
	}
	n, err := int64Word(out[:32])
	if err != nil {
		return 0, 0, fmt.Errorf("lane: nonce: %w", err)
	}
	if paid, err = int64Word(out[32:64]); err != nil {
		return 0, 0, fmt.Errorf("lane: paid: %w", err)
	}
	return paid, uint64(n), nil
}

// Channel is what a supplier's job layer asks (job.ChainFunds): the
// channel's balance and what it has paid on lease. A channel the renter
// has started to close covers nothing more (balance 0): the supplier
// redeems what it holds and serves no further.
func (r *Reader) Channel(ctx context.Context, renter, supplier Address, lease [32]byte) (balance, leasePaid int64, err error) {
	s, err := r.State(ctx, renter, supplier)
	if err != nil {
		return 0, 0, err
	}
	if !s.ClosesAt.IsZero() {
		s.Balance = 0
	}
	paid, _, err := r.LanePaid(ctx, renter, supplier, lease)
	if err != nil {
		return 0, 0, err
	}
	return s.Balance, paid, nil
}

// int64Word reads a 32-byte ABI word that must fit an int64.
func int64Word(w []byte) (int64, error) {
	for _, b := range w[:24] {
		if b != 0 {
			return 0, fmt.Errorf("%w: value above 2⁶³", ErrRPC)
		}
	}
	v := binary.BigEndian.Uint64(w[24:])
	if v > 1<<63-1 {
		return 0, fmt.Errorf("%w: value above 2⁶³", ErrRPC)
	}
	return int64(v), nil
}

// ethCall calls the contract with data at the confirmed block and wants
// an answer of size bytes.
func (r *Reader) ethCall(ctx context.Context, data []byte, size int) ([]byte, error) {
	block := "latest"
	if r.conf > 0 {
		var hexN string
		if err := r.call(ctx, "eth_blockNumber", []any{}, &hexN); err != nil {
			return nil, err
		}
		n, err := strconv.ParseUint(strings.TrimPrefix(hexN, "0x"), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: eth_blockNumber answered %q", ErrRPC, hexN)
		}
		if n < r.conf {
			return nil, fmt.Errorf("%w: block %d is below the %d confirmations asked for", ErrRPC, n, r.conf)
		}
		block = "0x" + strconv.FormatUint(n-r.conf, 16)
	}
	var out string
	call := map[string]string{"to": r.d.Contract.String(), "data": "0x" + hex.EncodeToString(data)}
	if err := r.call(ctx, "eth_call", []any{call, block}, &out); err != nil {
		return nil, err
	}
	b, err := hex.DecodeString(strings.TrimPrefix(out, "0x"))
	if err != nil || len(b) != size {
		return nil, fmt.Errorf("%w: eth_call answered %d bytes, want %d (is %s the contract?)", ErrRPC, len(b), size, r.d.Contract)
	}
	return b, nil
}

// call makes one JSON-RPC 2.0 call and decodes its result into out.
func (r *Reader) call(ctx context.Context, method string, params []any, out any) error {
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": r.id.Add(1), "method": method, "params": params})
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrRPC, method, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrRPC, method, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrRPC, method, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxRPCResponse+1))
	switch {
	case err != nil:
		return fmt.Errorf("%w: %s: %v", ErrRPC, method, err)
	case len(raw) > maxRPCResponse:
		return fmt.Errorf("%w: %s: answer over %d bytes", ErrRPC, method, maxRPCResponse)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("%w: %s: http %s", ErrRPC, method, resp.Status)
	}
	var res struct {
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrRPC, method, err)
	}
	if res.Error != nil {
		return fmt.Errorf("%w: %s: error %d: %.200s", ErrRPC, method, res.Error.Code, res.Error.Message)
	}
	if err := json.Unmarshal(res.Result, out); err != nil {
		return fmt.Errorf("%w: %s: result: %v", ErrRPC, method, err)
	}
	return nil
}
