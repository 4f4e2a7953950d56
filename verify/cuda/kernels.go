package cuda

import (
	_ "embed"
	"fmt"
)

// The kernels are hand-written PTX (ISA 7.0) in two modules, embedded,
// that the driver's JIT compiles for each device at Open. See the .ptx
// files for each kernel's definition; the fake driver of the tests runs a
// C reference of each, by name, with the same parameters.
var (
	//go:embed kernels_base.ptx
	basePTX string
	//go:embed kernels_tc.ptx
	tensorPTX string
)

// module is one PTX module: a device whose compute capability is below
// minMajor does not load it. A device that fails to load the tensor
// module still runs the base one (Device.TensorErr says why).
type module struct {
	name     string
	ptx      string
	target   string // its .target
	minMajor int
	required bool
}

var modules = []module{
	{name: "base", ptx: basePTX, target: "sm_70", required: true},
	{name: "tensor", ptx: tensorPTX, target: "sm_80", minMajor: 8},
}

// Kernel names: the contract between the host code, the .ptx modules and the
// fake driver (testdata/fakecuda).
const (
	// kTranspose: dst = srcᵀ for n×n bytes, n a multiple of 32. Grid
	// (n/32, n/32), block 256: block (bx, by) writes dst[c·n + r] =
	// src[r·n + c] for the 32×32 tile of rows 32·bx …, columns 32·by ….
	kTranspose = "gm_transpose"
	// kStep: one chain step with plain integer arithmetic, any device and
	// any n: y[i][c] = mix(Σ_k x[i][k]·b[k][c] mod 256). Grid (n, ⌈n/256⌉),
	// block 256: block (i, cb) computes row i's columns cb·256 + tid.
	kStep = "gm_chain_step"
	// kStepMMA: the same step on the int8 tensor cores (mma.sync
	// m16n8k32 s8·s8 → s32, sm_80 and later), reading Bᵀ. n must be a
	// multiple of 128. Grid (n/16, n/128), block 128: block (rt, ct) writes
	// rows rt·16 … +15, its warp w columns ct·128 + 32w … +31.
	kStepMMA = "gm_chain_step_mma"
	// kStepTiled: the tensor-core step tiled through shared memory, the
	// fast one. n must be a multiple of 128. Grid (n/128, n/128), block
	// 256: block (rt, ct) writes rows rt·128 … +127, columns ct·128 … +127.
	kStepTiled = "gm_chain_step_tiled"
	// kMMAPeak: the tensor cores' ceiling, registers only: out[gid] =
	// 1024·iters mod 2^32 for every thread. Any grid; blocks of whole
	// warps.
	kMMAPeak = "gm_mma_peak"
	// kFoldPartial: the memory fold's partial sums. Grid (blocks, buffers),
	// block 256 (a power of two): block (b, j) writes partials[j·blocks +
	// b] = Σ_k (w_k mod P)·ρ_j^k mod P over words k of [b·wpb, (b+1)·wpb) ∩
	// [0, words) of the window at wins[j].
	kFoldPartial = "gm_fold_partial"
	// kFoldReduce: out[j] = Σ_b partials[j·blocks + b] mod P. Grid
	// (buffers), block 32 (thread 0 works).
	kFoldReduce = "gm_fold_reduce"
)

// argKind is the PTX type of a kernel parameter.
type argKind int

const (
	argU64 argKind = iota // .u64: a devPtr or a uint64
	argU32                // .u32: a uint32
)

func (k argKind) String() string {
	if k == argU32 {
		return ".u32"
	}
	return ".u64"
}

// kernel is a kernel's module, name and parameter types, in order.
type kernel struct {
	module string
	name   string
	params []argKind
}

// kernels is every entry point of the modules. The PTX test checks that
// each is in its module with exactly these parameters.
var kernels = []kernel{
	{"base", kStep, []argKind{argU64, argU64, argU64, argU32}},                // x, b, y, n
	{"base", kFoldPartial, []argKind{argU64, argU64, argU64, argU32, argU32}}, // wins, rhos, partials, words, wpb
	{"base", kFoldReduce, []argKind{argU64, argU64, argU32}},                  // partials, out, blocks
	{"tensor", kTranspose, []argKind{argU64, argU64, argU32}},                 // src, dst, n
	{"tensor", kStepMMA, []argKind{argU64, argU64, argU64, argU32}},           // x, bt, y, n
	{"tensor", kStepTiled, []argKind{argU64, argU64, argU64, argU32}},         // x, bt, y, n
	{"tensor", kMMAPeak, []argKind{argU64, argU32}},                           // out, iters
}

func kernelByName(name string) (kernel, bool) {
	for _, k := range kernels {
		if k.name == name {
			return k, true
		}
	}
	return kernel{}, false
}

// check reports whether args fit k's parameters.
func (k kernel) check(args []any) error {
	if len(args) != len(k.params) {
		return fmt.Errorf("cuda: kernel %s takes %d parameters, got %d", k.name, len(k.params), len(args))
	}
	for i, a := range args {
		var got argKind
		switch a.(type) {
		case devPtr, uint64:
			got = argU64
		case uint32:
			got = argU32
		default:
			return fmt.Errorf("cuda: kernel %s parameter %d: unsupported type %T", k.name, i, a)
		}
		if got != k.params[i] {
			return fmt.Errorf("cuda: kernel %s parameter %d: %v, want %v", k.name, i, got, k.params[i])
		}
	}
	return nil
}
