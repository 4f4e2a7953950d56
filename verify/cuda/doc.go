// Package cuda is gpumesh's GPU prover for real NVIDIA devices: a
// challenge.Prover (Prover) that runs the matrix chain of the benchmark
// challenge on the GPU, and a challenge.MemBackend (MemBackend) that holds
// the memory proof's buffers in device memory and folds their windows
// there. It needs no CUDA toolkit to build: it talks to the driver alone.
//
// # The driver, loaded at run time
//
// Open loads the driver library (Options.Library, by default
// "libcuda.so.1", as go-nvml loads libnvidia-ml.so.1) with dlopen
// (RTLD_NOW | RTLD_LOCAL) and finds each function with dlsym into a table
// of C function pointers; cgo calls them through static C wrappers. The
// types and constants it needs are in the vendored cudadl.h. It needs
// these symbols (the _v2 names where the driver has two):
//
//	cuInit cuDriverGetVersion cuGetErrorName cuGetErrorString
//	cuDeviceGetCount cuDeviceGet cuDeviceGetAttribute cuDeviceGetName
//	cuDeviceGetUuid_v2 cuDeviceTotalMem_v2 cuMemGetInfo_v2
//	cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRelease_v2 cuCtxSetCurrent
//	cuCtxSynchronize cuModuleLoadDataEx cuModuleUnload cuModuleGetFunction
//	cuMemAlloc_v2 cuMemFree_v2 cuMemcpyHtoD_v2 cuMemcpyDtoH_v2
//	cuLaunchKernel cuStreamCreate cuStreamDestroy_v2 cuStreamSynchronize
//	cuEventCreate cuEventRecord cuEventSynchronize cuEventDestroy_v2
//	cuEventElapsedTime (cuEventElapsedTime_v2 where present, CUDA 12.8+)
//
// A library that is missing gives ErrNoCUDA, a driver older than
// MinDriverVersion (11.4) ErrOldDriver, a missing function
// ErrMissingSymbol naming it; a failed call is an *Error with the
// CUresult's name from cuGetErrorName (ErrOutOfMemory matches
// CUDA_ERROR_OUT_OF_MEMORY). Each device has one goroutine locked to one
// OS thread on which the device's primary context is current
// (cuDevicePrimaryCtxRetain, never cuCtxCreate); every call for the
// device runs there. Kernel parameters are passed in C memory. Elsewhere
// than Linux with cgo, Open reports "no CUDA on this platform".
//
// # The kernels
//
// The kernels are hand-written PTX (ISA 7.0) in two embedded modules that
// the driver's JIT compiles at Open. kernels_base.ptx (sm_70, every
// device): gm_chain_step, plain integer products, any size, and the
// memory fold. kernels_tc.ptx (sm_80 and later, N a multiple of 128): the
// int8 tensor-core steps (mma.sync m16n8k32 s8·s8→s32, reading Bᵀ made by
// gm_transpose), gm_chain_step_tiled, tiled 128×128 per block through
// shared memory with the next stage's loads in flight (the one KernelAuto
// picks), and gm_chain_step_mma, untiled, to compare with. A device whose
// JIT refuses the tensor module still runs the base one
// (Device.TensorErr says why). Every chain step has the mix in its
// epilogue. The memory fold MemFold is gm_fold_partial (per block of 256
// KiB of a window, Σ (w_k mod P)·ρ^k at the block's own powers of ρ; each
// thread loads four words before their four Horner steps and reduces
// mod P lazily, so that it keeps loads in flight and few instructions a
// word) and gm_fold_reduce (the blocks' sum per buffer). The kernel names and
// parameters (kernels.go) are a contract with the fake driver of the
// tests.
//
// # What is proven, and what is not
//
// The host side is tested without a GPU against a fake driver
// (testdata/fakecuda, C, built by the tests with cc) that implements
// every call above on the CPU and runs a C reference of each kernel by
// name: loading, errors, memory, contexts per thread, and answers
// byte-identical to challenge.CPUProver and challenge.MemFold. The PTX
// itself is checked as text (entry points, parameters, registers; with
// the CUDA toolkit, scripts/ptx-assemble.sh assembles it with ptxas for
// sm_70 to sm_90, and make gpu-check does where one is found), and run: a
// test-only interpreter of the PTX subset it uses (ptxsim_test.go)
// executes every kernel's text over the host's grids, mma.sync computed
// from the PTX ISA manual's fragment layout, against the chain's
// definition and challenge.MemFold (with a race detector on shared
// memory between barriers). UNVERIFIED ON HARDWARE: that the driver JITs
// this PTX, that the hardware's mma agrees with that reading of the
// manual, and how fast the kernels are (the tiled kernel uses neither
// cp.async nor ldmatrix nor wgmma; its efficiency is what gpu-check
// measures). `make gpu-check` (scripts/gpu-check.sh, cmd/gpucheck) checks
// all of it on a machine with an NVIDIA GPU and writes bench/GPU.md.
package cuda
