package tunnel

import (
	"context"
	"io"
	"net"
	"testing"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The tunnel's cost beside raw loopback TCP, measured in the same run
// (make bench writes them to bench/RESULTS.md): a connection through a
// Forwarder, a libp2p stream over loopback TCP (TLS or Noise, yamux) and a
// Server to a TCP server, against a connection straight to that server,
// and against a bare libp2p stream, the transport the tunnel rides on.

// benchChunk is what one op of the throughput benchmarks moves.
const benchChunk = 1 << 20

// sinkServer reads every connection to its end and then writes one byte,
// so a writer that half-closes learns that everything arrived. A
// connection that starts with 'p' is a ping server instead: it echoes
// each 64-byte request.
func sinkServer(b *testing.B) net.Listener {
	b.Helper()
	return serveTCP(b, func(c net.Conn) {
		buf := make([]byte, 64)
		if _, err := io.ReadFull(c, buf[:1]); err != nil {
			return
		}
		if buf[0] == 'p' {
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}
		// Large reads, as a server that takes bulk data does: io.Copy
		// into io.Discard would read 8 KiB at a time, and the sink's
		// syscalls, not the path to it, would be what is measured.
		big := make([]byte, 256<<10)
		for {
			_, err := c.Read(big)
			if err == io.EOF {
				_, _ = c.Write([]byte{1})
				return
			}
			if err != nil {
				return
			}
		}
	})
}

// benchTargets is the raw address of a sink server and the local address
// of a Forwarder to it through a real tunnel.
func benchTargets(b *testing.B) (raw, tunneled string) {
	b.Helper()
	ln := sinkServer(b)
	r := newHost(b)
	s := newSupplier(b, r.ID(), ln, ServerConfig{})
	if err := r.Connect(context.Background(), peer.AddrInfo{ID: s.h.ID(), Addrs: s.h.Addrs()}); err != nil {
		b.Fatal(err)
	}
	f, err := Forward(ForwarderConfig{Port: 8000, Endpoints: func() []Endpoint { return []Endpoint{s.endpoint()} }, OpenStream: opener(r)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return ln.Addr().String(), f.Addr().String()
}

func benchThroughput(b *testing.B, addr string) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	chunk := make([]byte, benchChunk)
	chunk[0] = 's'
	b.SetBytes(benchChunk)
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	_ = c.(*net.TCPConn).CloseWrite()
	if _, err := io.ReadFull(c, chunk[:1]); err != nil {
		b.Fatal("the sink did not confirm: ", err)
	}
}

func benchRequest(b *testing.B, addr string, fresh bool) {
	buf := make([]byte, 64)
	var c net.Conn
	dial := func() {
		var err error
		if c, err = net.Dial("tcp", addr); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write([]byte{'p'}); err != nil {
			b.Fatal(err)
		}
	}
	if !fresh {
		dial()
	}
	b.ResetTimer()
	for range b.N {
		if fresh {
			dial()
		}
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
		if fresh {
			c.Close()
		}
	}
	b.StopTimer()
	if !fresh {
		c.Close()
	}
}

// BenchmarkRawTCPThroughput: 1 MiB writes over loopback TCP.
func BenchmarkRawTCPThroughput(b *testing.B) {
	raw, _ := benchTargets(b)
	benchThroughput(b, raw)
}

// BenchmarkTunnelThroughput: 1 MiB writes through a tunnel.
func BenchmarkTunnelThroughput(b *testing.B) {
	_, tun := benchTargets(b)
	benchThroughput(b, tun)
}

// BenchmarkStreamThroughput: 1 MiB writes on a bare libp2p stream between
// the same kind of hosts, to a sink that reads it: what the transport
// alone carries, the tunnel's ceiling.
func BenchmarkStreamThroughput(b *testing.B) {
	r, s := newHost(b), newHost(b)
	s.SetStreamHandler("/gpumesh/bench-sink", func(st network.Stream) {
		defer st.Close()
		big := make([]byte, 256<<10)
		for {
			_, err := st.Read(big)
			if err == io.EOF {
				_, _ = st.Write([]byte{1})
				return
			}
			if err != nil {
				return
			}
		}
	})
	ctx := context.Background()
	if err := r.Connect(ctx, peer.AddrInfo{ID: s.ID(), Addrs: s.Addrs()}); err != nil {
		b.Fatal(err)
	}
	st, err := r.NewStream(ctx, s.ID(), "/gpumesh/bench-sink")
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	chunk := make([]byte, benchChunk)
	b.SetBytes(benchChunk)
	b.ResetTimer()
	for range b.N {
		if _, err := st.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	_ = st.CloseWrite()
	if _, err := io.ReadFull(st, chunk[:1]); err != nil {
		b.Fatal("the sink did not confirm: ", err)
	}
}

// BenchmarkRawTCPRequest: a 64-byte request and its answer on an open
// loopback connection.
func BenchmarkRawTCPRequest(b *testing.B) {
	raw, _ := benchTargets(b)
	benchRequest(b, raw, false)
}

// BenchmarkTunnelRequest: the same on an open tunneled connection.
func BenchmarkTunnelRequest(b *testing.B) {
	_, tun := benchTargets(b)
	benchRequest(b, tun, false)
}

// BenchmarkRawTCPConnectRequest: a new loopback connection, a request
// and its answer.
func BenchmarkRawTCPConnectRequest(b *testing.B) {
	raw, _ := benchTargets(b)
	benchRequest(b, raw, true)
}

// BenchmarkTunnelConnectRequest: a new tunneled connection (a tunnel
// stream opened and admitted), a request and its answer.
func BenchmarkTunnelConnectRequest(b *testing.B) {
	_, tun := benchTargets(b)
	benchRequest(b, tun, true)
}
