//go:build linux && cgo

package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "cudadl.h"

// The driver functions package cuda calls, in the order of gm_names.
enum {
	GM_cuInit,
	GM_cuDriverGetVersion,
	GM_cuGetErrorName,
	GM_cuGetErrorString,
	GM_cuDeviceGetCount,
	GM_cuDeviceGet,
	GM_cuDeviceGetAttribute,
	GM_cuDeviceGetName,
	GM_cuDeviceGetUuid_v2,
	GM_cuDeviceTotalMem_v2,
	GM_cuDevicePrimaryCtxRetain,
	GM_cuDevicePrimaryCtxRelease_v2,
	GM_cuCtxSetCurrent,
	GM_cuCtxSynchronize,
	GM_cuMemGetInfo_v2,
	GM_cuModuleLoadDataEx,
	GM_cuModuleUnload,
	GM_cuModuleGetFunction,
	GM_cuMemAlloc_v2,
	GM_cuMemFree_v2,
	GM_cuMemcpyHtoD_v2,
	GM_cuMemcpyDtoH_v2,
	GM_cuLaunchKernel,
	GM_cuStreamCreate,
	GM_cuStreamDestroy_v2,
	GM_cuStreamSynchronize,
	GM_cuEventCreate,
	GM_cuEventRecord,
	GM_cuEventSynchronize,
	GM_cuEventDestroy_v2,
	GM_cuEventElapsedTime,
	GM_REQUIRED, // the symbols above are required, those below optional
	GM_cuEventElapsedTime_v2 = GM_REQUIRED,
	GM_NSYMS
};

static const char *const gm_names[GM_NSYMS] = {
	"cuInit",
	"cuDriverGetVersion",
	"cuGetErrorName",
	"cuGetErrorString",
	"cuDeviceGetCount",
	"cuDeviceGet",
	"cuDeviceGetAttribute",
	"cuDeviceGetName",
	"cuDeviceGetUuid_v2",
	"cuDeviceTotalMem_v2",
	"cuDevicePrimaryCtxRetain",
	"cuDevicePrimaryCtxRelease_v2",
	"cuCtxSetCurrent",
	"cuCtxSynchronize",
	"cuMemGetInfo_v2",
	"cuModuleLoadDataEx",
	"cuModuleUnload",
	"cuModuleGetFunction",
	"cuMemAlloc_v2",
	"cuMemFree_v2",
	"cuMemcpyHtoD_v2",
	"cuMemcpyDtoH_v2",
	"cuLaunchKernel",
	"cuStreamCreate",
	"cuStreamDestroy_v2",
	"cuStreamSynchronize",
	"cuEventCreate",
	"cuEventRecord",
	"cuEventSynchronize",
	"cuEventDestroy_v2",
	"cuEventElapsedTime",
	"cuEventElapsedTime_v2",
};

// gm_lib is one opened driver library and its function table.
typedef struct {
	void *handle;
	void *fn[GM_NSYMS];
} gm_lib;

// gm_open opens path (RTLD_NOW | RTLD_LOCAL) and looks every symbol up.
// On failure it returns NULL with dlerror's text copied into err.
static gm_lib *gm_open(const char *path, char *err, size_t errlen) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		strncpy(err, e ? e : "dlopen failed", errlen - 1);
		err[errlen - 1] = 0;
		return NULL;
	}
	gm_lib *l = calloc(1, sizeof(gm_lib));
	if (l == NULL) {
		dlclose(h);
		strncpy(err, "out of host memory", errlen - 1);
		return NULL;
	}
	l->handle = h;
	for (int i = 0; i < GM_NSYMS; i++) {
		l->fn[i] = dlsym(h, gm_names[i]);
	}
	return l;
}

// gm_missing returns the name of the first required symbol the library
// lacks, or NULL.
static const char *gm_missing(gm_lib *l) {
	for (int i = 0; i < GM_REQUIRED; i++) {
		if (l->fn[i] == NULL) {
			return gm_names[i];
		}
	}
	return NULL;
}

static int gm_has(gm_lib *l, int i) { return l->fn[i] != NULL; }

// Wrappers: cgo cannot call a C function pointer, so each call goes
// through a static function that casts the table's entry.
#define GM_FN(l, name, type) ((type)(l)->fn[GM_##name])

static CUresult gm_cuInit(gm_lib *l, unsigned int flags) {
	return GM_FN(l, cuInit, CUresult (*)(unsigned int))(flags);
}
static CUresult gm_cuDriverGetVersion(gm_lib *l, int *v) {
	if (l->fn[GM_cuDriverGetVersion] == NULL) return CUDA_ERROR_NOT_FOUND;
	return GM_FN(l, cuDriverGetVersion, CUresult (*)(int *))(v);
}
static const char *gm_error_name(gm_lib *l, CUresult r) {
	const char *s = NULL;
	if (l->fn[GM_cuGetErrorName] == NULL) return NULL;
	if (GM_FN(l, cuGetErrorName, CUresult (*)(CUresult, const char **))(r, &s) != CUDA_SUCCESS) return NULL;
	return s;
}
static const char *gm_error_string(gm_lib *l, CUresult r) {
	const char *s = NULL;
	if (l->fn[GM_cuGetErrorString] == NULL) return NULL;
	if (GM_FN(l, cuGetErrorString, CUresult (*)(CUresult, const char **))(r, &s) != CUDA_SUCCESS) return NULL;
	return s;
}
static CUresult gm_cuDeviceGetCount(gm_lib *l, int *n) {
	return GM_FN(l, cuDeviceGetCount, CUresult (*)(int *))(n);
}
static CUresult gm_cuDeviceGet(gm_lib *l, CUdevice *d, int ordinal) {
	return GM_FN(l, cuDeviceGet, CUresult (*)(CUdevice *, int))(d, ordinal);
}
static CUresult gm_cuDeviceGetAttribute(gm_lib *l, int *v, CUdevice_attribute a, CUdevice d) {
	return GM_FN(l, cuDeviceGetAttribute, CUresult (*)(int *, CUdevice_attribute, CUdevice))(v, a, d);
}
static CUresult gm_cuDeviceGetName(gm_lib *l, char *name, int len, CUdevice d) {
	return GM_FN(l, cuDeviceGetName, CUresult (*)(char *, int, CUdevice))(name, len, d);
}
static CUresult gm_cuDeviceGetUuid_v2(gm_lib *l, CUuuid *u, CUdevice d) {
	return GM_FN(l, cuDeviceGetUuid_v2, CUresult (*)(CUuuid *, CUdevice))(u, d);
}
static CUresult gm_cuDeviceTotalMem_v2(gm_lib *l, size_t *b, CUdevice d) {
	return GM_FN(l, cuDeviceTotalMem_v2, CUresult (*)(size_t *, CUdevice))(b, d);
}
static CUresult gm_cuDevicePrimaryCtxRetain(gm_lib *l, CUcontext *c, CUdevice d) {
	return GM_FN(l, cuDevicePrimaryCtxRetain, CUresult (*)(CUcontext *, CUdevice))(c, d);
}
static CUresult gm_cuDevicePrimaryCtxRelease_v2(gm_lib *l, CUdevice d) {
	return GM_FN(l, cuDevicePrimaryCtxRelease_v2, CUresult (*)(CUdevice))(d);
}
static CUresult gm_cuCtxSetCurrent(gm_lib *l, CUcontext c) {
	return GM_FN(l, cuCtxSetCurrent, CUresult (*)(CUcontext))(c);
}
static CUresult gm_cuCtxSynchronize(gm_lib *l) {
	return GM_FN(l, cuCtxSynchronize, CUresult (*)(void))();
}
static CUresult gm_cuMemGetInfo_v2(gm_lib *l, size_t *free, size_t *total) {
	return GM_FN(l, cuMemGetInfo_v2, CUresult (*)(size_t *, size_t *))(free, total);
}
// gm_load_module loads a PTX image with the JIT's error log in log.
static CUresult gm_load_module(gm_lib *l, CUmodule *m, const char *image, char *log, size_t loglen) {
	CUjit_option opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
	void *vals[2] = {log, (void *)(uintptr_t)loglen};
	return GM_FN(l, cuModuleLoadDataEx, CUresult (*)(CUmodule *, const void *, unsigned int, CUjit_option *, void **))(m, image, 2, opts, vals);
}
static CUresult gm_cuModuleUnload(gm_lib *l, CUmodule m) {
	return GM_FN(l, cuModuleUnload, CUresult (*)(CUmodule))(m);
}
static CUresult gm_cuModuleGetFunction(gm_lib *l, CUfunction *f, CUmodule m, const char *name) {
	return GM_FN(l, cuModuleGetFunction, CUresult (*)(CUfunction *, CUmodule, const char *))(f, m, name);
}
static CUresult gm_cuMemAlloc_v2(gm_lib *l, CUdeviceptr *p, size_t n) {
	return GM_FN(l, cuMemAlloc_v2, CUresult (*)(CUdeviceptr *, size_t))(p, n);
}
static CUresult gm_cuMemFree_v2(gm_lib *l, CUdeviceptr p) {
	return GM_FN(l, cuMemFree_v2, CUresult (*)(CUdeviceptr))(p);
}
static CUresult gm_cuMemcpyHtoD_v2(gm_lib *l, CUdeviceptr dst, const void *src, size_t n) {
	return GM_FN(l, cuMemcpyHtoD_v2, CUresult (*)(CUdeviceptr, const void *, size_t))(dst, src, n);
}
static CUresult gm_cuMemcpyDtoH_v2(gm_lib *l, void *dst, CUdeviceptr src, size_t n) {
	return GM_FN(l, cuMemcpyDtoH_v2, CUresult (*)(void *, CUdeviceptr, size_t))(dst, src, n);
}
static CUresult gm_cuLaunchKernel(gm_lib *l, CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
		unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared, CUstream s, void **params) {
	return GM_FN(l, cuLaunchKernel, CUresult (*)(CUfunction, unsigned int, unsigned int, unsigned int,
		unsigned int, unsigned int, unsigned int, unsigned int, CUstream, void **, void **))(
		f, gx, gy, gz, bx, by, bz, shared, s, params, NULL);
}
static CUresult gm_cuStreamCreate(gm_lib *l, CUstream *s, unsigned int flags) {
	return GM_FN(l, cuStreamCreate, CUresult (*)(CUstream *, unsigned int))(s, flags);
}
static CUresult gm_cuStreamDestroy_v2(gm_lib *l, CUstream s) {
	return GM_FN(l, cuStreamDestroy_v2, CUresult (*)(CUstream))(s);
}
static CUresult gm_cuStreamSynchronize(gm_lib *l, CUstream s) {
	return GM_FN(l, cuStreamSynchronize, CUresult (*)(CUstream))(s);
}
static CUresult gm_cuEventCreate(gm_lib *l, CUevent *e, unsigned int flags) {
	return GM_FN(l, cuEventCreate, CUresult (*)(CUevent *, unsigned int))(e, flags);
}
static CUresult gm_cuEventRecord(gm_lib *l, CUevent e, CUstream s) {
	return GM_FN(l, cuEventRecord, CUresult (*)(CUevent, CUstream))(e, s);
}
static CUresult gm_cuEventSynchronize(gm_lib *l, CUevent e) {
	return GM_FN(l, cuEventSynchronize, CUresult (*)(CUevent))(e);
}
static CUresult gm_cuEventDestroy_v2(gm_lib *l, CUevent e) {
	return GM_FN(l, cuEventDestroy_v2, CUresult (*)(CUevent))(e);
}
// gm_event_elapsed uses cuEventElapsedTime_v2 (CUDA 12.8 and later)
// where the driver has it, cuEventElapsedTime otherwise.
static CUresult gm_event_elapsed(gm_lib *l, float *ms, CUevent a, CUevent b) {
	if (l->fn[GM_cuEventElapsedTime_v2] != NULL) {
		return GM_FN(l, cuEventElapsedTime_v2, CUresult (*)(float *, CUevent, CUevent))(ms, a, b);
	}
	return GM_FN(l, cuEventElapsedTime, CUresult (*)(float *, CUevent, CUevent))(ms, a, b);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"maps"
	"runtime"
	"strings"
	"unsafe"
)

// lib is one opened driver library: the C function table.
type lib struct {
	c    *C.gm_lib
	path string
}

// openLib opens path and checks its driver version and symbols: an old
// driver is ErrOldDriver (checked first, since it explains a missing
// symbol), a missing symbol ErrMissingSymbol, no library at all ErrNoCUDA.
func openLib(path string) (*lib, int, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var errbuf [512]C.char
	c := C.gm_open(cpath, &errbuf[0], C.size_t(len(errbuf)))
	if c == nil {
		return nil, 0, fmt.Errorf("cuda: load %s: %s: %w", path, C.GoString(&errbuf[0]), ErrNoCUDA)
	}
	l := &lib{c: c, path: path}
	var v C.int
	if r := C.gm_cuDriverGetVersion(c, &v); r != C.CUDA_SUCCESS {
		if m := C.gm_missing(c); m != nil {
			return nil, 0, fmt.Errorf("cuda: %s: symbol %s not found (driver too old or not NVIDIA's): %w", path, C.GoString(m), ErrMissingSymbol)
		}
		return nil, 0, l.errorf("cuDriverGetVersion", r)
	}
	if int(v) < MinDriverVersion {
		return nil, int(v), fmt.Errorf("cuda: %s: driver supports CUDA %s, the prover needs %s or later (update the NVIDIA driver): %w",
			path, versionString(int(v)), versionString(MinDriverVersion), ErrOldDriver)
	}
	if m := C.gm_missing(c); m != nil {
		return nil, int(v), fmt.Errorf("cuda: %s: symbol %s not found (driver too old or not NVIDIA's): %w", path, C.GoString(m), ErrMissingSymbol)
	}
	if r := C.gm_cuInit(c, 0); r != C.CUDA_SUCCESS {
		return nil, int(v), l.errorf("cuInit", r)
	}
	return l, int(v), nil
}

// errorf turns a CUresult other than CUDA_SUCCESS into an *Error naming
// call, with the driver's name and description of the code.
func (l *lib) errorf(call string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	e := &Error{Call: call, Code: int(r)}
	if s := C.gm_error_name(l.c, r); s != nil {
		e.Name = C.GoString(s)
	}
	if s := C.gm_error_string(l.c, r); s != nil {
		e.Desc = C.GoString(s)
	}
	return e
}

// deviceCount returns the number of CUDA devices.
func (l *lib) deviceCount() (int, error) {
	var n C.int
	if r := C.gm_cuDeviceGetCount(l.c, &n); r != C.CUDA_SUCCESS {
		return 0, l.errorf("cuDeviceGetCount", r)
	}
	return int(n), nil
}

// deviceInfo reads what DeviceInfo holds for ordinal.
func (l *lib) deviceInfo(ordinal int) (C.CUdevice, DeviceInfo, error) {
	var dev C.CUdevice
	if r := C.gm_cuDeviceGet(l.c, &dev, C.int(ordinal)); r != C.CUDA_SUCCESS {
		return 0, DeviceInfo{}, l.errorf("cuDeviceGet", r)
	}
	info := DeviceInfo{Ordinal: ordinal}
	var name [256]C.char
	if r := C.gm_cuDeviceGetName(l.c, &name[0], C.int(len(name)), dev); r != C.CUDA_SUCCESS {
		return 0, DeviceInfo{}, l.errorf("cuDeviceGetName", r)
	}
	info.Name = C.GoString(&name[0])
	var uuid C.CUuuid
	if r := C.gm_cuDeviceGetUuid_v2(l.c, &uuid, dev); r != C.CUDA_SUCCESS {
		return 0, DeviceInfo{}, l.errorf("cuDeviceGetUuid_v2", r)
	}
	info.UUID = formatUUID(C.GoBytes(unsafe.Pointer(&uuid.bytes[0]), 16))
	var total C.size_t
	if r := C.gm_cuDeviceTotalMem_v2(l.c, &total, dev); r != C.CUDA_SUCCESS {
		return 0, DeviceInfo{}, l.errorf("cuDeviceTotalMem_v2", r)
	}
	info.MemoryBytes = int64(total)
	attrs := []struct {
		a   C.CUdevice_attribute
		dst *int
	}{
		{C.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &info.Major},
		{C.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &info.Minor},
		{C.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &info.SMs},
		{C.CU_DEVICE_ATTRIBUTE_CLOCK_RATE, &info.ClockKHz},
		{C.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, &info.MemClockKHz},
		{C.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, &info.MemBusWidth},
	}
	for _, at := range attrs {
		var v C.int
		if r := C.gm_cuDeviceGetAttribute(l.c, &v, at.a, dev); r != C.CUDA_SUCCESS {
			return 0, DeviceInfo{}, fmt.Errorf("attribute %d: %w", int(at.a), l.errorf("cuDeviceGetAttribute", r))
		}
		*at.dst = int(v)
	}
	return dev, info, nil
}

// hasElapsedV2 reports whether the driver has cuEventElapsedTime_v2.
func (l *lib) hasElapsedV2() bool { return C.gm_has(l.c, C.GM_cuEventElapsedTime_v2) != 0 }

// devState is what a device's own OS thread holds: the primary context
// made current on that thread, the module of kernels, their functions
// and one stream. Only the device's goroutine touches it.
type devState struct {
	l      *lib
	dev    C.CUdevice
	major  int // compute capability
	ctx    C.CUcontext
	mods   []C.CUmodule
	fns    map[string]C.CUfunction
	stream C.CUstream
	start  C.CUevent
	stop   C.CUevent
	// tensorErr is why the tensor-core module did not load.
	tensorErr error
}

// setup runs on the device's locked OS thread: it retains the primary
// context (never cuCtxCreate, whose signature CUDA 13 changed), makes it
// current, JIT-compiles the modules the device's compute capability
// allows and looks their kernels up. A module that is not required and
// fails to load leaves its kernels out, its error in tensorErr.
func (s *devState) setup(mods []module) error {
	if r := C.gm_cuDevicePrimaryCtxRetain(s.l.c, &s.ctx, s.dev); r != C.CUDA_SUCCESS {
		return s.l.errorf("cuDevicePrimaryCtxRetain", r)
	}
	if r := C.gm_cuCtxSetCurrent(s.l.c, s.ctx); r != C.CUDA_SUCCESS {
		C.gm_cuDevicePrimaryCtxRelease_v2(s.l.c, s.dev)
		s.ctx = nil
		return s.l.errorf("cuCtxSetCurrent", r)
	}
	s.fns = make(map[string]C.CUfunction, len(kernels))
	for _, m := range mods {
		if s.major < m.minMajor {
			continue
		}
		if err := s.loadModule(m); err != nil {
			err = fmt.Errorf("module %s (%s): %w", m.name, m.target, err)
			if m.required {
				s.teardown()
				return err
			}
			s.tensorErr = err
		}
	}
	// A blocking stream (flags 0) is ordered with the synchronous copies,
	// which run on the legacy default stream.
	if r := C.gm_cuStreamCreate(s.l.c, &s.stream, C.CU_STREAM_DEFAULT); r != C.CUDA_SUCCESS {
		s.teardown()
		return s.l.errorf("cuStreamCreate", r)
	}
	for _, e := range []*C.CUevent{&s.start, &s.stop} {
		var ev C.CUevent // a C out-parameter must not point into s
		if r := C.gm_cuEventCreate(s.l.c, &ev, C.CU_EVENT_DEFAULT); r != C.CUDA_SUCCESS {
			s.teardown()
			return s.l.errorf("cuEventCreate", r)
		}
		*e = ev
	}
	return nil
}

// loadModule JIT-compiles m and looks its kernels up; on failure it
// unloads it again.
func (s *devState) loadModule(m module) error {
	image := C.CString(m.ptx)
	defer C.free(unsafe.Pointer(image))
	const logLen = 8192
	log := (*C.char)(C.calloc(logLen, 1))
	defer C.free(unsafe.Pointer(log))
	var mod C.CUmodule
	if r := C.gm_load_module(s.l.c, &mod, image, log, logLen); r != C.CUDA_SUCCESS {
		err := s.l.errorf("cuModuleLoadDataEx", r)
		if msg := strings.TrimSpace(C.GoString(log)); msg != "" {
			err = fmt.Errorf("%w: JIT log: %s", err, msg)
		}
		return err
	}
	fns := map[string]C.CUfunction{}
	for _, k := range kernels {
		if k.module != m.name {
			continue
		}
		name := C.CString(k.name)
		var f C.CUfunction
		r := C.gm_cuModuleGetFunction(s.l.c, &f, mod, name)
		C.free(unsafe.Pointer(name))
		if r != C.CUDA_SUCCESS {
			C.gm_cuModuleUnload(s.l.c, mod)
			return fmt.Errorf("kernel %s: %w", k.name, s.l.errorf("cuModuleGetFunction", r))
		}
		fns[k.name] = f
	}
	s.mods = append(s.mods, mod)
	maps.Copy(s.fns, fns)
	return nil
}

// teardown releases what setup made, in reverse order; it runs on the
// device's thread and ignores errors (the context is going away).
func (s *devState) teardown() {
	for _, e := range []*C.CUevent{&s.start, &s.stop} {
		if *e != nil {
			C.gm_cuEventDestroy_v2(s.l.c, *e)
			*e = nil
		}
	}
	if s.stream != nil {
		C.gm_cuStreamDestroy_v2(s.l.c, s.stream)
		s.stream = nil
	}
	for _, m := range s.mods {
		C.gm_cuModuleUnload(s.l.c, m)
	}
	s.mods = nil
	if s.ctx != nil {
		C.gm_cuCtxSetCurrent(s.l.c, nil)
		C.gm_cuDevicePrimaryCtxRelease_v2(s.l.c, s.dev)
		s.ctx = nil
	}
}

// lockThread pins the calling goroutine to its OS thread for good: the
// thread ends with the goroutine, and with it the context's binding.
func lockThread() { runtime.LockOSThread() }

func (s *devState) alloc(n int) (devPtr, error) {
	var p C.CUdeviceptr
	if r := C.gm_cuMemAlloc_v2(s.l.c, &p, C.size_t(n)); r != C.CUDA_SUCCESS {
		return 0, fmt.Errorf("allocate %d bytes: %w", n, s.l.errorf("cuMemAlloc_v2", r))
	}
	return devPtr(p), nil
}

func (s *devState) free(p devPtr) error {
	if p == 0 {
		return nil
	}
	return s.l.errorf("cuMemFree_v2", C.gm_cuMemFree_v2(s.l.c, C.CUdeviceptr(p)))
}

// htod copies src to device memory at dst. src holds no Go pointers and
// is only read during the call.
func (s *devState) htod(dst devPtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return s.l.errorf("cuMemcpyHtoD_v2", C.gm_cuMemcpyHtoD_v2(s.l.c, C.CUdeviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src))))
}

// dtoh copies len(dst) bytes of device memory at src into dst, after the
// stream's work.
func (s *devState) dtoh(dst []byte, src devPtr) error {
	if len(dst) == 0 {
		return nil
	}
	if err := s.sync(); err != nil {
		return err
	}
	return s.l.errorf("cuMemcpyDtoH_v2", C.gm_cuMemcpyDtoH_v2(s.l.c, unsafe.Pointer(&dst[0]), C.CUdeviceptr(src), C.size_t(len(dst))))
}

func (s *devState) sync() error {
	return s.l.errorf("cuStreamSynchronize", C.gm_cuStreamSynchronize(s.l.c, s.stream))
}

func (s *devState) memInfo() (free, total int64, err error) {
	var f, t C.size_t
	if r := C.gm_cuMemGetInfo_v2(s.l.c, &f, &t); r != C.CUDA_SUCCESS {
		return 0, 0, s.l.errorf("cuMemGetInfo_v2", r)
	}
	return int64(f), int64(t), nil
}

// launch starts kernel name on the device's stream with grid × block
// threads. args must match the kernel's signature in kernels (a devPtr
// or uint64 for a .u64 parameter, a uint32 for a .u32 one); their values
// are copied into C memory, as cuLaunchKernel reads kernelParams there.
func (s *devState) launch(name string, grid, block [3]uint32, args ...any) error {
	k, ok := kernelByName(name)
	if !ok {
		return fmt.Errorf("cuda: launch: no kernel %q", name)
	}
	if err := k.check(args); err != nil {
		return err
	}
	f, ok := s.fns[name]
	if !ok {
		if s.tensorErr != nil {
			return fmt.Errorf("cuda: kernel %s not loaded: %w", name, s.tensorErr)
		}
		return fmt.Errorf("cuda: kernel %s not loaded on a device of compute capability %d.x", name, s.major)
	}
	n := len(args)
	// One C block: n 8-byte slots for the values, then n pointers to them.
	mem := C.calloc(C.size_t(n), C.size_t(8+unsafe.Sizeof(uintptr(0))))
	if mem == nil {
		return errors.New("cuda: launch: out of host memory")
	}
	defer C.free(mem)
	vals := unsafe.Slice((*uint64)(mem), n)
	ptrs := unsafe.Slice((*unsafe.Pointer)(unsafe.Add(mem, 8*n)), n)
	for i, a := range args {
		switch v := a.(type) {
		case devPtr:
			vals[i] = uint64(v)
		case uint64:
			vals[i] = v
		case uint32:
			*(*uint32)(unsafe.Pointer(&vals[i])) = v
		}
		ptrs[i] = unsafe.Pointer(&vals[i])
	}
	r := C.gm_cuLaunchKernel(s.l.c, f,
		C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]),
		0, s.stream, (*unsafe.Pointer)(unsafe.Add(mem, 8*n)))
	if r != C.CUDA_SUCCESS {
		return fmt.Errorf("kernel %s: %w", name, s.l.errorf("cuLaunchKernel", r))
	}
	return nil
}

// recordStart and elapsed time the stream's work between them with
// events (device time, not the host's).
func (s *devState) recordStart() error {
	return s.l.errorf("cuEventRecord", C.gm_cuEventRecord(s.l.c, s.start, s.stream))
}

func (s *devState) elapsed() (float64, error) {
	if r := C.gm_cuEventRecord(s.l.c, s.stop, s.stream); r != C.CUDA_SUCCESS {
		return 0, s.l.errorf("cuEventRecord", r)
	}
	if r := C.gm_cuEventSynchronize(s.l.c, s.stop); r != C.CUDA_SUCCESS {
		return 0, s.l.errorf("cuEventSynchronize", r)
	}
	var ms C.float
	if r := C.gm_event_elapsed(s.l.c, &ms, s.start, s.stop); r != C.CUDA_SUCCESS {
		return 0, s.l.errorf("cuEventElapsedTime", r)
	}
	return float64(ms) / 1e3, nil
}
