package netlab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The control protocol of a WAN that runs in a process of its own (the
// namespace testnet's): a Unix socket, one request line and one reply
// line per connection, fields separated by spaces.
//
//	partition REGION_A REGION_B   -> ok
//	heal REGION_A REGION_B        -> ok
//	flow SRC_ADDR DST_ADDR        -> ok PACKETS BYTES
//
// An error is answered "err REASON". Lines are at most maxControlLine
// bytes.
const maxControlLine = 256

// ErrControl wraps an error the WAN answered to a control request.
var ErrControl = errors.New("netlab: wan control")

// ServeControl answers control requests for w on the Unix socket path
// until ctx ends. The socket is made mode 0600 (only root drives the
// lab) and removed when ServeControl returns.
func ServeControl(ctx context.Context, w *Wan, path string, log *slog.Logger) error {
	_ = os.Remove(path) // a socket left by a killed run
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("netlab: control socket %s: %w", path, err)
	}
	defer os.Remove(path)
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return fmt.Errorf("netlab: control socket %s: %w", path, err)
	}
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		c, err := l.Accept()
		if err != nil {
			wg.Wait()
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("netlab: control socket %s: %w", path, err)
		}
		wg.Go(func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			line, err := bufio.NewReaderSize(io.LimitReader(c, maxControlLine), maxControlLine).ReadString('\n')
			if err != nil {
				fmt.Fprintln(c, "err request: no line within", maxControlLine, "bytes")
				return
			}
			reply := w.control(strings.TrimSpace(line))
			log.Info("wan: control", "request", strings.TrimSpace(line), "reply", reply)
			fmt.Fprintln(c, reply)
		})
	}
}

// control carries out one request line and returns the reply line.
func (w *Wan) control(line string) string {
	f := strings.Fields(line)
	if len(f) != 3 {
		return "err want 3 fields: partition|heal A B, or flow SRC DST"
	}
	switch f[0] {
	case "partition", "heal":
		if !contains(w.regions(), f[1]) || !contains(w.regions(), f[2]) {
			return fmt.Sprintf("err unknown region in %q (regions: %s)", line, strings.Join(w.regions(), ", "))
		}
		if f[0] == "partition" {
			w.Partition(f[1], f[2])
		} else {
			w.Heal(f[1], f[2])
		}
		return "ok"
	case "flow":
		src, err1 := netip.ParseAddr(f[1])
		dst, err2 := netip.ParseAddr(f[2])
		if err := errors.Join(err1, err2); err != nil {
			return "err " + err.Error()
		}
		p, b := w.Flow(src, dst)
		return fmt.Sprintf("ok %d %d", p, b)
	}
	return fmt.Sprintf("err unknown request %q", f[0])
}

// regions are the regions the WAN's endpoints are in.
func (w *Wan) regions() []string {
	var out []string
	for _, ep := range w.eps {
		if !contains(out, ep.region) {
			out = append(out, ep.region)
		}
	}
	return out
}

// Control sends one request to the WAN control socket at path and returns
// the fields of its reply after "ok".
func Control(ctx context.Context, path string, request ...string) ([]string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("netlab: wan control %s: %w", path, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	}
	if _, err := fmt.Fprintln(c, strings.Join(request, " ")); err != nil {
		return nil, fmt.Errorf("netlab: wan control %s: %w", path, err)
	}
	line, err := bufio.NewReaderSize(io.LimitReader(c, maxControlLine), maxControlLine).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("netlab: wan control %s: read reply: %w", path, err)
	}
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != "ok" {
		return nil, fmt.Errorf("%w: %s: %s", ErrControl, strings.Join(request, " "), strings.TrimSpace(strings.TrimPrefix(line, "err")))
	}
	return f[1:], nil
}

// ControlFlow asks the WAN at path for the packets and bytes it carried
// from src to dst.
func ControlFlow(ctx context.Context, path string, src, dst netip.Addr) (packets, bytes uint64, err error) {
	f, err := Control(ctx, path, "flow", src.String(), dst.String())
	if err != nil {
		return 0, 0, err
	}
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("%w: flow: reply %q", ErrControl, f)
	}
	if packets, err = strconv.ParseUint(f[0], 10, 64); err == nil {
		bytes, err = strconv.ParseUint(f[1], 10, 64)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%w: flow: %w", ErrControl, err)
	}
	return packets, bytes, nil
}
