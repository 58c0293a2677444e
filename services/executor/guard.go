package executor

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// ErrBlocked is wrapped by dial errors for destinations the guard refuses.
var ErrBlocked = errors.New("destination blocked by SSRF guard")

// Guard decides which destination addresses outbound calls may reach.
// The zero value blocks loopback, link-local, unspecified, multicast and
// known cloud-metadata addresses, and allows everything else (private
// networks included: reaching internal services is the point of a
// scheduler).
type Guard struct {
	// AllowLoopback opens 127.0.0.0/8 and ::1 (flyball dev and tests).
	AllowLoopback bool
	// Allow lists prefixes that are reachable even if a rule blocks them.
	Allow []netip.Prefix
	// Deny lists extra prefixes to block.
	Deny []netip.Prefix
}

var metadataPrefixes = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),     // link-local, incl. 169.254.169.254 (AWS, GCP, Azure)
	netip.MustParsePrefix("fe80::/10"),          // IPv6 link-local
	netip.MustParsePrefix("fd00:ec2::254/128"),  // AWS IMDS over IPv6
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud metadata
	netip.MustParsePrefix("192.0.0.192/32"),     // Oracle Cloud metadata
}

// contains reports whether p holds addr, an unmapped address (Check
// unmaps every address): a prefix written in the IPv4-mapped IPv6 form
// (::ffff:10.0.0.0/104) holds the IPv4 addresses it maps.
func contains(p netip.Prefix, addr netip.Addr) bool {
	return p.Contains(addr) || (addr.Is4() && p.Addr().Is4In6() && p.Contains(netip.AddrFrom16(addr.As16())))
}

// Check returns nil if addr may be dialled, or an error wrapping ErrBlocked
// that says why not.
func (g *Guard) Check(addr netip.Addr) error {
	// A zone ("fe80::1%eth0", from a URL like http://[fe80::1%25eth0]/)
	// names an interface, not another address; netip.Prefix.Contains is
	// false for every zoned address, so it must go before any rule.
	addr = addr.Unmap().WithZone("")
	for _, p := range g.Allow {
		if contains(p, addr) {
			return nil
		}
	}
	if v4, how, ok := embeddedIPv4(addr); ok {
		// An IPv6 address that a NAT64 gateway, a 6to4 relay or the host
		// itself may turn into an IPv4 one is judged by that IPv4 address
		// as well: 64:ff9b::a9fe:a9fe is 169.254.169.254 on a NAT64
		// network.
		for _, p := range g.Allow {
			if contains(p, v4) {
				return nil
			}
		}
		if err := g.check(v4); err != nil {
			return fmt.Errorf("%w (%s embeds %s)", err, how, v4)
		}
	}
	return g.check(addr)
}

// IPv6 ranges that carry an IPv4 address in their low or middle bits.
var (
	nat64Prefix      = netip.MustParsePrefix("64:ff9b::/96")    // RFC 6052 well-known prefix
	translatedPrefix = netip.MustParsePrefix("::ffff:0:0:0/96") // RFC 2765 IPv4-translated
	compatPrefix     = netip.MustParsePrefix("::/96")           // deprecated IPv4-compatible
	sixToFourPrefix  = netip.MustParsePrefix("2002::/16")       // RFC 3056 6to4
)

// embeddedIPv4 returns the IPv4 address an IPv6 address embeds, and the
// kind of address it is, for the ranges where the network may deliver the
// packet to that IPv4 address.
func embeddedIPv4(addr netip.Addr) (netip.Addr, string, bool) {
	if !addr.Is6() {
		return netip.Addr{}, "", false
	}
	b := addr.As16()
	switch {
	case nat64Prefix.Contains(addr):
		return netip.AddrFrom4([4]byte(b[12:16])), "NAT64 address " + addr.String(), true
	case translatedPrefix.Contains(addr):
		return netip.AddrFrom4([4]byte(b[12:16])), "IPv4-translated address " + addr.String(), true
	case compatPrefix.Contains(addr) && !addr.IsLoopback() && !addr.IsUnspecified():
		return netip.AddrFrom4([4]byte(b[12:16])), "IPv4-compatible address " + addr.String(), true
	case sixToFourPrefix.Contains(addr):
		return netip.AddrFrom4([4]byte(b[2:6])), "6to4 address " + addr.String(), true
	}
	return netip.Addr{}, "", false
}

// check applies the blocking rules to one address.
func (g *Guard) check(addr netip.Addr) error {
	switch {
	case addr.IsLoopback():
		if g.AllowLoopback {
			return nil
		}
		return fmt.Errorf("%w: %s is a loopback address (allow it with the executor's allow-list)", ErrBlocked, addr)
	case addr.IsUnspecified():
		return fmt.Errorf("%w: %s is unspecified", ErrBlocked, addr)
	case addr.IsMulticast():
		return fmt.Errorf("%w: %s is multicast", ErrBlocked, addr)
	}
	for _, p := range metadataPrefixes {
		if p.Contains(addr) {
			return fmt.Errorf("%w: %s is link-local or a cloud metadata address", ErrBlocked, addr)
		}
	}
	for _, p := range g.Deny {
		if contains(p, addr) {
			return fmt.Errorf("%w: %s is in the deny-list prefix %s", ErrBlocked, addr, p)
		}
	}
	return nil
}

// control is a net.Dialer Control hook: it runs after DNS resolution, on
// the address actually being connected to.
func (g *Guard) control(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%w: bad address %q", ErrBlocked, address)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: bad address %q", ErrBlocked, address)
	}
	return g.Check(ip)
}
