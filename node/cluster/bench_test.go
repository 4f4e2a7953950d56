package cluster

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// A cluster stream's cost beside a bare libp2p stream between the same
// two hosts, measured in the same run: a job's connection to another
// member goes through the own node's Connect, a stream between the
// suppliers, and the target's Service to the target's job.

// benchChunk is what one op of the throughput benchmark moves.
const benchChunk = 1 << 20

// benchBare is the bare stream protocol the benchmarks compare with: a
// sink (first byte 's') or a 64-byte echo (first byte 'p').
const benchBare protocol.ID = "/gpumesh/bench-bare"

// serveBench is a sink or an echo on rw, by its first byte: a sink reads
// everything and then writes one byte, so a writer that half-closes
// learns that everything arrived.
func serveBench(rw io.ReadWriter) {
	buf := make([]byte, 256<<10)
	if _, err := io.ReadFull(rw, buf[:1]); err != nil {
		return
	}
	if buf[0] == 'p' {
		for {
			if _, err := io.ReadFull(rw, buf[:64]); err != nil {
				return
			}
			if _, err := rw.Write(buf[:64]); err != nil {
				return
			}
		}
	}
	for {
		_, err := rw.Read(buf)
		if err == io.EOF {
			_, _ = rw.Write([]byte{1})
			return
		}
		if err != nil {
			return
		}
	}
}

// benchPair is a two-member cluster whose rank 1's job is a bench
// server, and an opener of a cluster connection and of a bare stream
// from rank 0 to rank 1.
func benchPair(b *testing.B) (cluster, bare func(kind byte) io.ReadWriteCloser) {
	b.Helper()
	ms := newCluster(b, 2, Config{}, true)
	job := serveTCP(b, func(c net.Conn) { serveBench(c) })
	port := uint16(job.Addr().(*net.TCPAddr).Port)
	ms[1].h.SetStreamHandler(benchBare, func(st network.Stream) {
		defer st.Close()
		serveBench(st)
	})
	start := func(rw io.ReadWriteCloser, kind byte) io.ReadWriteCloser {
		if _, err := rw.Write([]byte{kind}); err != nil {
			b.Fatal(err)
		}
		return rw
	}
	cluster = func(kind byte) io.ReadWriteCloser {
		return start(jobConn(b, ms[0].mb, netip.AddrPortFrom(Addr(1), port)), kind)
	}
	bare = func(kind byte) io.ReadWriteCloser {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st, err := ms[0].h.NewStream(ctx, ms[1].h.ID(), benchBare)
		if err != nil {
			b.Fatal(err)
		}
		return start(st, kind)
	}
	return cluster, bare
}

// throughput writes n chunks on rw, half-closes, waits for the sink's
// confirmation and returns the time it took.
func throughput(b *testing.B, rw io.ReadWriteCloser, n int) time.Duration {
	defer rw.Close()
	chunk := make([]byte, benchChunk)
	t0 := time.Now()
	for range n {
		if _, err := rw.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	if err := rw.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(rw, chunk[:1]); err != nil {
		b.Fatal("the sink did not confirm: ", err)
	}
	return time.Since(t0)
}

// roundTrips does n 64-byte requests and answers on rw and returns the
// time it took.
func roundTrips(b *testing.B, rw io.ReadWriteCloser, n int) time.Duration {
	defer rw.Close()
	buf := make([]byte, 64)
	t0 := time.Now()
	for range n {
		if _, err := rw.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(rw, buf); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(t0)
}

// BenchmarkClusterStream: 1 MiB per op through one cluster connection
// (job → Connect → stream → Service → job), and then the same bytes on a
// bare libp2p stream between the same two hosts; MB/s of each and their
// ratio.
func BenchmarkClusterStream(b *testing.B) {
	cluster, bare := benchPair(b)
	b.ResetTimer()
	tc := throughput(b, cluster('s'), b.N)
	tb := throughput(b, bare('s'), b.N)
	b.StopTimer()
	mb := float64(b.N) * benchChunk / 1e6
	b.ReportMetric(mb/tc.Seconds(), "cluster-MB/s")
	b.ReportMetric(mb/tb.Seconds(), "stream-MB/s")
	b.ReportMetric(tb.Seconds()/tc.Seconds(), "ratio")
}

// BenchmarkClusterRoundTrip: a 64-byte request and its answer on an open
// cluster connection, and then on an open bare stream between the same
// two hosts; µs of each per round trip and their ratio.
func BenchmarkClusterRoundTrip(b *testing.B) {
	cluster, bare := benchPair(b)
	b.ResetTimer()
	tc := roundTrips(b, cluster('p'), b.N)
	tb := roundTrips(b, bare('p'), b.N)
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(tc.Seconds()/n*1e6, "cluster-µs/rt")
	b.ReportMetric(tb.Seconds()/n*1e6, "stream-µs/rt")
	b.ReportMetric(tc.Seconds()/tb.Seconds(), "ratio")
}
