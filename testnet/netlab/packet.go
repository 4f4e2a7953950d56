package netlab

import (
	"errors"
	"net/netip"
)

// Errors of parseIPv4.
var (
	errShort    = errors.New("shorter than an IPv4 header")
	errNotIPv4  = errors.New("not IPv4")
	errBadIHL   = errors.New("bad header length")
	errBadTotal = errors.New("total length does not match the packet")
)

// parseIPv4 reads the source and destination of the IPv4 packet p, as a
// TUN device without packet information hands it over. It checks the
// version, the header length and that the total length fits in p.
func parseIPv4(p []byte) (src, dst netip.Addr, err error) {
	if len(p) < 20 {
		return src, dst, errShort
	}
	if p[0]>>4 != 4 {
		return src, dst, errNotIPv4
	}
	ihl := int(p[0]&0x0f) * 4
	if ihl < 20 || ihl > len(p) {
		return src, dst, errBadIHL
	}
	total := int(p[2])<<8 | int(p[3])
	if total < ihl || total > len(p) {
		return src, dst, errBadTotal
	}
	src = netip.AddrFrom4([4]byte(p[12:16]))
	dst = netip.AddrFrom4([4]byte(p[16:20]))
	return src, dst, nil
}
