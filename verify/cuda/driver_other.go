//go:build !(linux && cgo)

package cuda

import "fmt"

// errPlatform is every call's answer where the driver cannot be loaded.
var errPlatform = fmt.Errorf("cuda: no CUDA on this platform (Linux with cgo only): %w", ErrNoCUDA)

// lib stands for the driver library, which is never loaded here.
type lib struct{ path string }

func openLib(string) (*lib, int, error)                             { return nil, 0, errPlatform }
func (*lib) deviceCount() (int, error)                              { return 0, errPlatform }
func (*lib) deviceInfo(int) (int, DeviceInfo, error)                { return 0, DeviceInfo{}, errPlatform }
func lockThread()                                                   {}
func (*devState) setup([]module) error                              { return errPlatform }
func (*devState) teardown()                                         {}
func (*devState) alloc(int) (devPtr, error)                         { return 0, errPlatform }
func (*devState) free(devPtr) error                                 { return errPlatform }
func (*devState) htod(devPtr, []byte) error                         { return errPlatform }
func (*devState) dtoh([]byte, devPtr) error                         { return errPlatform }
func (*devState) sync() error                                       { return errPlatform }
func (*devState) memInfo() (int64, int64, error)                    { return 0, 0, errPlatform }
func (*devState) launch(string, [3]uint32, [3]uint32, ...any) error { return errPlatform }
func (*devState) recordStart() error                                { return errPlatform }
func (*devState) elapsed() (float64, error)                         { return 0, errPlatform }

// devState is a device's state; nothing here.
type devState struct {
	l         *lib
	dev       int
	major     int
	tensorErr error
}
