package challenge

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
)

// Matrix is a square byte matrix stored row-major: element (i, j) is
// Data[i*N+j].
type Matrix struct {
	N    int
	Data []byte
}

// Row returns row i of m (a sub-slice, not a copy).
func (m Matrix) Row(i int) []byte { return m.Data[i*m.N : (i+1)*m.N] }

// Domain-separation labels for the values derived from a seed.
const (
	labelA       = "A"
	labelB       = "B"
	labelSweep   = "sweep"
	labelOpen    = "open"
	labelJunk    = "cheat-junk"
	labelPick    = "cheat-pick"
	labelMemBuf  = "mem-buffer"
	labelMemOff  = "mem-offsets"
	labelMemRho  = "mem-rho"
	labelMemFold = "mem-fold"
	labelMemStep = "mem-round"
	labelMemChk  = "mem-checks"
	// domainPrefix is that of challenge protocol v2: nothing derived
	// under v1 ("gpumesh/challenge/v1/") verifies under it.
	domainPrefix = "gpumesh/challenge/v2/"
)

// subSeed is SHA-256(domainPrefix || label || 0x00 || seed || uint32 BE i):
// the 32-byte ChaCha8 seed of one derived stream.
func subSeed(seed [32]byte, label string, i uint32) [32]byte {
	buf := make([]byte, 0, len(domainPrefix)+len(label)+1+32+4)
	buf = append(buf, domainPrefix...)
	buf = append(buf, label...)
	buf = append(buf, 0)
	buf = append(buf, seed[:]...)
	buf = binary.BigEndian.AppendUint32(buf, i)
	return sha256.Sum256(buf)
}

// fillStream fills dst with the ChaCha8 stream of key: the successive
// Uint64 outputs of rand.NewChaCha8(key), each as 8 little-endian bytes,
// the last one truncated.
func fillStream(dst []byte, key [32]byte) {
	streamInto(rand.NewChaCha8(key), dst)
}

// streamInto continues c's stream into dst (len(dst) bytes).
func streamInto(c *rand.ChaCha8, dst []byte) {
	i := 0
	for ; i+8 <= len(dst); i += 8 {
		binary.LittleEndian.PutUint64(dst[i:], c.Uint64())
	}
	if i < len(dst) {
		var tail [8]byte
		binary.LittleEndian.PutUint64(tail[:], c.Uint64())
		copy(dst[i:], tail[:])
	}
}

// deriveRowA writes row i of A (n bytes) into dst.
func deriveRowA(dst []byte, seed [32]byte, i int) { fillStream(dst, subSeed(seed, labelA, uint32(i))) }

// Derive returns the challenge matrices A and B of size n×n for seed.
// Row i of A is the first n bytes of the ChaCha8 stream keyed by
// subSeed(seed, "A", i), row k of B likewise with label "B" (see the
// package documentation). n must be positive; Derive returns zero
// matrices otherwise.
func Derive(seed [32]byte, n int) (A, B Matrix) {
	if n <= 0 {
		return Matrix{}, Matrix{}
	}
	A = Matrix{N: n, Data: make([]byte, n*n)}
	B = Matrix{N: n, Data: make([]byte, n*n)}
	_ = parallel(context.Background(), 0, n, func(i int) error {
		deriveRowA(A.Row(i), seed, i)
		fillStream(B.Row(i), subSeed(seed, labelB, uint32(i)))
		return nil
	})
	return A, B
}

// laneMask keeps the low byte of each 16-bit lane of a uint64.
const laneMask = 0x00FF00FF00FF00FF

// nibbleMask keeps the low nibble of each byte of a uint64.
const nibbleMask = 0x0F0F0F0F0F0F0F0F

// splitB returns B in the layout the kernel reads: per row k, n/4 words;
// word 2w holds bytes 8w, 8w+2, 8w+4, 8w+6 of the row in 16-bit lanes and
// word 2w+1 holds bytes 8w+1, 8w+3, 8w+5, 8w+7. A lane times a byte is
// below 2^16, so lanes never carry into each other. n is a multiple of 8.
func splitB(ctx context.Context, seed [32]byte, n, workers int) ([]uint64, error) {
	words := n / 4
	bs := make([]uint64, n*words)
	err := parallel(ctx, workers, n, func(k int) error {
		row := make([]byte, n)
		fillStream(row, subSeed(seed, labelB, uint32(k)))
		dst := bs[k*words : (k+1)*words]
		for w := 0; w < n/8; w++ {
			v := binary.LittleEndian.Uint64(row[8*w:])
			dst[2*w] = v & laneMask
			dst[2*w+1] = (v >> 8) & laneMask
		}
		return nil
	})
	return bs, err
}

// kTile is the number of B rows one pass of the kernel keeps hot in
// cache: about 256 KiB of split B.
func kTile(n int) int {
	t := (256 << 10) / (2 * n)
	t -= t % 4
	return max(4, min(t, n))
}

// chainRows runs the chain on a block of cnt rows of n bytes (blk, in
// place): T times, row ← mix(row · B mod 256). acc is scratch of at least
// cnt*n/4 words. It checks ctx between steps.
func chainRows(ctx context.Context, blk []byte, cnt, n, T int, bs []uint64, acc []uint64) error {
	words := n / 4
	kt := kTile(n)
	acc = acc[:cnt*words]
	for t := 0; t < T; t++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		clear(acc)
		for k0 := 0; k0 < n; k0 += kt {
			k1 := min(k0+kt, n)
			for r := 0; r < cnt; r++ {
				row := blk[r*n : (r+1)*n]
				a := acc[r*words : (r+1)*words]
				for k := k0; k < k1; k += 4 {
					mulAcc4(a,
						bs[k*words:(k+1)*words], bs[(k+1)*words:(k+2)*words],
						bs[(k+2)*words:(k+3)*words], bs[(k+3)*words:(k+4)*words],
						uint64(row[k]), uint64(row[k+1]), uint64(row[k+2]), uint64(row[k+3]))
				}
			}
		}
		for r := 0; r < cnt; r++ {
			row := blk[r*n : (r+1)*n]
			a := acc[r*words : (r+1)*words]
			for w := 0; w < n/8; w++ {
				v := a[2*w] | a[2*w+1]<<8
				v ^= (v >> 4) & nibbleMask // mix: y ^ (y >> 4) per byte
				binary.LittleEndian.PutUint64(row[8*w:], v)
			}
		}
	}
	return nil
}

// mulAcc4 adds x0*b0 + x1*b1 + x2*b2 + x3*b3 into acc, lane-wise mod 256.
// Every lane of acc stays below 256 between additions, so a lane never
// exceeds 255 + 255*255 < 2^16.
func mulAcc4(acc, b0, b1, b2, b3 []uint64, x0, x1, x2, x3 uint64) {
	b0 = b0[:len(acc)]
	b1 = b1[:len(acc)]
	b2 = b2[:len(acc)]
	b3 = b3[:len(acc)]
	for w := range acc {
		v := acc[w]
		v = (v + x0*b0[w]) & laneMask
		v = (v + x1*b1[w]) & laneMask
		v = (v + x2*b2[w]) & laneMask
		v = (v + x3*b3[w]) & laneMask
		acc[w] = v
	}
}

// rowBlock is how many rows one task of the prover chains together.
const rowBlock = 8

// parallel runs f(0..count-1) on workers goroutines (GOMAXPROCS when
// workers <= 0) and returns the first error; after an error or ctx's end
// no new index starts.
func parallel(ctx context.Context, workers, count int, f func(i int) error) error {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, count)
	var (
		next     atomic.Int64
		once     sync.Once
		firstErr error
		failed   atomic.Bool
		wg       sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= count {
					return
				}
				err := ctx.Err()
				if err == nil {
					err = f(i)
				}
				if err != nil {
					once.Do(func() { firstErr = err })
					failed.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}
