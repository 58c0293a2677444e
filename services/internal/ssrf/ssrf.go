// Package ssrf is flyball's SSRF guard: the one address policy that the
// executor applies at dial time, to every address DNS gives it, and that
// the governor and the API apply when a task is created or updated, to a
// target URL whose host is a literal address, an IPv4 address in a
// non-canonical numeric form (2852039166, 0x7f.1) or a well-known cloud
// metadata hostname (CheckTarget). Both read the same Guard (the
// --allow-loopback, --allow-cidr and --deny-cidr settings), so a target
// that create accepts is one the executor will dial, as far as can be
// told without DNS.
package ssrf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"golang.org/x/net/idna"

	"github.com/flyballhq/flyball/pkg/events"
)

// ErrBlocked is wrapped by dial errors for destinations the guard refuses.
var ErrBlocked = errors.New("destination blocked by SSRF guard")

// Guard decides which destination addresses outbound calls may reach.
// The zero value blocks loopback, link-local, unspecified ("this
// network", 0.0.0.0/8, included), multicast and known cloud-metadata
// addresses, and allows everything else (private networks included:
// reaching internal services is the point of a scheduler).
type Guard struct {
	// AllowLoopback opens 127.0.0.0/8 and ::1 (flyball dev and tests).
	AllowLoopback bool
	// Allow lists prefixes that are reachable even if a built-in rule
	// blocks them (a metadata address included), unless Deny holds them.
	Allow []netip.Prefix
	// Deny lists extra prefixes to block. It wins over Allow and
	// AllowLoopback: an address a Deny prefix holds is refused whatever
	// they allow.
	Deny []netip.Prefix
}

// metadataAddr is the address of the AWS, GCP, Azure and Oracle metadata
// services, which the well-known metadata hostnames stand for.
var metadataAddr = netip.MustParseAddr("169.254.169.254")

// metadataHosts are the well-known hostnames of cloud metadata services,
// with the address each stands for: a name is judged as that address
// (CheckHost), so allowing the address allows the name. Only names that
// cannot mean anything else are listed: not the bare "metadata" that GCP
// also answers, which a compose network or a search domain may give to a
// service of the operator's own.
var metadataHosts = map[string]netip.Addr{
	"metadata.google.internal":   metadataAddr, // GCP
	"metadata.goog":              metadataAddr, // GCP
	"instance-data.ec2.internal": metadataAddr, // AWS
}

// thisNetwork is RFC 1122's "this host on this network", 0.0.0.0/8: a
// source address, never a destination. Only 0.0.0.0 is IsUnspecified;
// what a connect to the rest reaches is the kernel's choice.
var thisNetwork = netip.MustParsePrefix("0.0.0.0/8")

// metadataPrefixes are link-local ranges and the cloud metadata and
// credential endpoints outside them, each of which hands out the host's
// or the workload's credentials or configuration. The IPv6 ones are in
// fc00::/7, which is otherwise allowed as private; 168.63.129.16 is a
// public address, which is otherwise allowed too.
//
// Blocking an address here does not block DNS through it (168.63.129.16
// is the resolver of every Azure VM): the guard runs in the executor's
// dialer, and Go's resolver dials its DNS servers with its own zero
// net.Dialer (or libc does, with cgo), not with that one.
var metadataPrefixes = []netip.Prefix{
	// IPv4 link-local, which holds 169.254.169.254 (AWS IMDS, GCP, Azure
	// IMDS, Oracle Cloud, DigitalOcean, OpenStack), 169.254.170.2 (AWS
	// ECS task metadata and credentials) and 169.254.170.23 (AWS EKS Pod
	// Identity agent).
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),              // IPv6 link-local
	netip.MustParsePrefix("fd00:ec2::254/128"),      // AWS IMDS over IPv6
	netip.MustParsePrefix("fd00:ec2::23/128"),       // AWS EKS Pod Identity agent over IPv6
	netip.MustParsePrefix("fd20:ce::254/128"),       // GCP metadata server over IPv6
	netip.MustParsePrefix("100.100.100.200/32"),     // Alibaba Cloud metadata
	netip.MustParsePrefix("192.0.0.192/32"),         // Oracle Cloud metadata
	netip.MustParsePrefix("fd00:a9fe:a9fe::1/128"),  // Akamai (Linode) metadata over IPv6
	netip.MustParsePrefix("fd00:c1::a9fe:a9fe/128"), // Oracle Cloud IMDS over IPv6
	netip.MustParsePrefix("fd00:42::42/128"),        // Scaleway metadata over IPv6
	// Azure WireServer, the host platform endpoint on every Azure VM: its
	// goal state and extension settings (ports 80 and 32526) carry the
	// extensions' protected settings and certificates.
	netip.MustParsePrefix("168.63.129.16/32"),
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
	// An explicit deny-list prefix wins over every allow (--allow-cidr,
	// --allow-loopback): it is the operator's narrower intent
	// (--allow-cidr 169.254.0.0/16 --deny-cidr 169.254.169.254/32). It
	// holds for the IPv4 addresses an IPv6 one embeds too, even when the
	// IPv6 prefix is allowed: the packet may reach that IPv4 address.
	if err := g.denied(addr); err != nil {
		return err
	}
	embedded := embeddedIPv4(addr)
	for _, e := range embedded {
		if err := g.denied(e.v4); err != nil {
			return fmt.Errorf("%w (%s %s embeds %s)", err, e.kind, addr, e.v4)
		}
	}
	if g.allowed(addr) {
		return nil
	}
	// An IPv6 address that a NAT64 gateway, a 6to4 relay or the host
	// itself may turn into an IPv4 one is judged by that IPv4 address as
	// well (64:ff9b::a9fe:a9fe is 169.254.169.254 on a NAT64 network); by
	// every one it may be, where the layout is the operator's choice.
	for _, e := range embedded {
		if g.allowed(e.v4) {
			continue
		}
		if err := g.check(e.v4); err != nil {
			return fmt.Errorf("%w (%s %s embeds %s)", err, e.kind, addr, e.v4)
		}
	}
	return g.check(addr)
}

// denied returns an error wrapping ErrBlocked if a deny-list prefix
// holds addr.
func (g *Guard) denied(addr netip.Addr) error {
	for _, p := range g.Deny {
		if contains(p, addr) {
			return &deniedError{addr: addr, prefix: p}
		}
	}
	return nil
}

// deniedError is an address a deny-list prefix holds: --allow-cidr does
// not open it, and CheckTarget's advice says so.
type deniedError struct {
	addr   netip.Addr
	prefix netip.Prefix
}

func (e *deniedError) Error() string {
	return fmt.Sprintf("%v: %s is in the deny-list prefix %s", ErrBlocked, e.addr, e.prefix)
}

func (e *deniedError) Unwrap() error { return ErrBlocked }

// allowed reports whether an allow-list prefix holds addr.
func (g *Guard) allowed(addr netip.Addr) bool {
	for _, p := range g.Allow {
		if contains(p, addr) {
			return true
		}
	}
	return false
}

// IPv6 ranges that carry an IPv4 address in their low or middle bits.
var (
	nat64Prefix      = netip.MustParsePrefix("64:ff9b::/96")    // RFC 6052 well-known prefix
	nat64LocalPrefix = netip.MustParsePrefix("64:ff9b:1::/48")  // RFC 8215 local-use prefix
	translatedPrefix = netip.MustParsePrefix("::ffff:0:0:0/96") // RFC 2765 IPv4-translated
	compatPrefix     = netip.MustParsePrefix("::/96")           // deprecated IPv4-compatible
	sixToFourPrefix  = netip.MustParsePrefix("2002::/16")       // RFC 3056 6to4
)

// embedded is an IPv4 address an IPv6 address may stand for.
type embedded struct {
	v4   netip.Addr
	kind string // "NAT64 address", "6to4 address", ...
}

// nat64Layouts are where RFC 6052 puts the IPv4 address for a NAT64
// prefix of 48, 56, 64 and 96 bits: the byte offsets of its four bytes,
// skipping byte 8 (bits 64-71, which must be zero).
var nat64Layouts = [...][4]int{
	{6, 7, 9, 10},    // /48
	{7, 9, 10, 11},   // /56
	{9, 10, 11, 12},  // /64
	{12, 13, 14, 15}, // /96
}

// embeddedIPv4 returns the IPv4 addresses an IPv6 address may stand for,
// in the ranges where the network may deliver the packet to an IPv4
// address. An address in the local-use NAT64 prefix yields one per
// layout its operator may have chosen (a /48 to a /96 inside
// 64:ff9b:1::/48), since the address does not say which.
func embeddedIPv4(addr netip.Addr) []embedded {
	if !addr.Is6() {
		return nil
	}
	b := addr.As16()
	at := func(i ...int) netip.Addr { return netip.AddrFrom4([4]byte{b[i[0]], b[i[1]], b[i[2]], b[i[3]]}) }
	switch {
	case nat64Prefix.Contains(addr):
		return []embedded{{at(12, 13, 14, 15), "NAT64 address"}}
	case nat64LocalPrefix.Contains(addr):
		out := make([]embedded, 0, len(nat64Layouts))
		for _, l := range nat64Layouts {
			// A layout that reads an address in 0.0.0.0/8 reads (mostly)
			// the prefix's own zero bits (64:ff9b:1::93.184.216.34 as a
			// /48 is 0.0.0.0, as a /64 0.0.0.93), not an address a
			// gateway translates to.
			if v4 := at(l[:]...); !thisNetwork.Contains(v4) {
				out = append(out, embedded{v4, "local-use NAT64 address"})
			}
		}
		return out
	case translatedPrefix.Contains(addr):
		return []embedded{{at(12, 13, 14, 15), "IPv4-translated address"}}
	case compatPrefix.Contains(addr) && !addr.IsLoopback() && !addr.IsUnspecified():
		return []embedded{{at(12, 13, 14, 15), "IPv4-compatible address"}}
	case sixToFourPrefix.Contains(addr):
		return []embedded{{at(2, 3, 4, 5), "6to4 address"}}
	}
	return nil
}

// check applies the built-in blocking rules to one address (Check has
// applied the deny list before it).
func (g *Guard) check(addr netip.Addr) error {
	switch {
	case addr.IsLoopback():
		if g.AllowLoopback {
			return nil
		}
		return fmt.Errorf("%w: %s is a loopback address (--allow-loopback allows it)", ErrBlocked, addr)
	case addr.IsUnspecified():
		return fmt.Errorf("%w: %s is unspecified", ErrBlocked, addr)
	case thisNetwork.Contains(addr):
		return fmt.Errorf("%w: %s is in 0.0.0.0/8, \"this network\", a source address and never a destination", ErrBlocked, addr)
	case addr.IsMulticast():
		return fmt.Errorf("%w: %s is multicast", ErrBlocked, addr)
	}
	for _, p := range metadataPrefixes {
		if p.Contains(addr) {
			return fmt.Errorf("%w: %s is link-local or a cloud metadata address", ErrBlocked, addr)
		}
	}
	return nil
}

// Control is a net.Dialer Control hook: it runs after DNS resolution, on
// the address actually being connected to.
func (g *Guard) Control(_, address string, _ syscall.RawConn) error {
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

// CheckHost returns nil if a URL's host (without port or brackets) may be
// called as far as can be told without DNS, or an error wrapping
// ErrBlocked: a literal address is checked as Check does, and a
// well-known cloud metadata hostname (any case, with or without a final
// dot) as the address it stands for. Any other hostname returns nil: what
// it resolves to is checked at dial time.
//
// A host made of numbers and dots that is not an address in dotted-decimal
// form ("2852039166", "0xA9FEA9FE", "0177.0.0.1", "169.254.43518",
// "10.0.0.1.") is refused whatever it stands for: inet_aton and the URL
// standard (curl, browsers, many proxies) read it as an IPv4 address, and
// Go's resolver as a DNS name, which it never is. If the address it
// stands for is blocked, the error is Check's for that address; if not,
// or if it stands for none (a part out of range), the error says to write
// the address in dotted-decimal form.
//
// A host that is not ASCII is judged by its IDNA ASCII form (ASCIIHost),
// the name net/http resolves and dials: "１６９．２５４．１６９．２５４" is
// 169.254.169.254, "０ｘ７ｆ．１" is 0x7f.1.
func (g *Guard) CheckHost(host string) error {
	host = ASCIIHost(host)
	if addr, err := netip.ParseAddr(host); err == nil {
		return g.Check(addr)
	}
	if addr, numeric := numericIPv4(host); numeric {
		if !addr.IsValid() {
			return &numericHostError{host: host}
		}
		if err := g.Check(addr); err != nil {
			return fmt.Errorf("%w (the host %s is %s in a non-canonical numeric form; write it in dotted-decimal form)", err, host, addr)
		}
		return &numericHostError{host: host, addr: addr}
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	addr, ok := metadataHosts[name]
	if !ok {
		return nil
	}
	if err := g.Check(addr); err != nil {
		return fmt.Errorf("%w: %s is a cloud metadata hostname (it stands for %s)", ErrBlocked, name, addr)
	}
	return nil
}

// ASCIIHost returns a URL's host (without port or brackets) as net/http
// resolves, dials and compares it on a redirect: a host that is not ASCII
// in its IDNA ASCII form (the lookup profile: full-width characters and
// the ideographic full stop mapped, upper case lowered, labels in
// punycode). An ASCII host, or one that has no such form, is returned
// unchanged, as net/http uses it.
func ASCIIHost(host string) string {
	if isASCII(host) {
		return host
	}
	if a, err := idna.Lookup.ToASCII(host); err == nil {
		return a
	}
	return host
}

// isASCII reports whether s holds ASCII bytes only: a host net/http
// dials as it is, with no IDNA mapping.
func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// CheckTarget returns a *events.ValidationError naming target.http.url
// if the task's HTTP target is a URL whose host CheckHost refuses: every
// run of it would fail at the executor. For a numeric host that stands
// for an address the guard allows, or for none, the rule says to write
// the address in dotted-decimal form, not to allow it. The governor rejects such a
// task.created or task.updated, and the API refuses it up front. A spec
// without an HTTP target, or whose URL does not parse (Validate says so),
// returns nil.
func (g *Guard) CheckTarget(s *events.TaskSpec) error {
	h := s.Target.HTTP
	if h == nil {
		return nil
	}
	u, err := url.Parse(h.URL)
	if err != nil {
		return nil //nolint:nilerr // Validate reports a URL that does not parse
	}
	err = g.CheckHost(u.Hostname())
	if err == nil {
		return nil
	}
	var numeric *numericHostError
	if errors.As(err, &numeric) {
		// Allowing the address would not make the host unambiguous.
		return &events.ValidationError{Errors: []events.FieldError{{Field: "target.http.url", Rule: numeric.reason()}}}
	}
	why := strings.TrimPrefix(err.Error(), ErrBlocked.Error()+": ")
	hint := "; if it is meant, an operator allows it with --allow-cidr (FLYBALL_ALLOW_CIDRS), given alike to the executors, the governor and the API"
	if _, ok := errors.AsType[*deniedError](err); ok {
		// --allow-cidr does not open a deny-listed address.
		hint = "; if it is meant, an operator removes that prefix from --deny-cidr (FLYBALL_DENY_CIDRS), given alike to the executors, the governor and the API"
	}
	return &events.ValidationError{Errors: []events.FieldError{{
		Field: "target.http.url",
		Rule:  "the executor's SSRF guard refuses this host, so every run would fail: " + why + hint,
	}}}
}

// numericHostError is CheckHost's error for a host made of numbers and
// dots that is not an IPv4 address in dotted-decimal form, and stands
// for an address the guard allows (addr), or for none. It wraps
// ErrBlocked: the executor refuses it too, and does not retry.
type numericHostError struct {
	host string
	addr netip.Addr // the zero Addr if the host stands for no address
}

func (e *numericHostError) Error() string { return ErrBlocked.Error() + ": " + e.reason() }

func (e *numericHostError) Unwrap() error { return ErrBlocked }

func (e *numericHostError) reason() string {
	if !e.addr.IsValid() {
		return fmt.Sprintf("the host %s is made of numbers but is no IPv4 address (more than four parts, "+
			"a part out of range, or an octal part with an 8 or a 9) and no DNS name either; "+
			"write an address in dotted-decimal form (192.0.2.1) or a hostname", e.host)
	}
	return fmt.Sprintf("the host %s is %s in a non-canonical numeric form, which some HTTP clients "+
		"and proxies read as that address and Go's resolver as a DNS name; "+
		"write the address in dotted-decimal form: %s", e.host, e.addr, e.addr)
}

// numericIPv4 reads a host made of numbers and dots as inet_aton and the
// URL standard's IPv4 parser do: one to four parts, each decimal, hex
// (0x…) or octal (0…), the last filling the bytes the others leave
// ("169.254.43518" is 169.254.169.254, "2852039166" too), and one final
// dot ignored. numeric is false if a part is no number ("1e100.net",
// "0xdead.beef", "example.123"): a DNS name. addr is the zero Addr if the
// host is numeric but stands for no address: more than four parts, a
// part out of range, an octal part with an 8 or a 9.
func numericIPv4(host string) (addr netip.Addr, numeric bool) {
	s := strings.TrimSuffix(host, ".")
	if s == "" {
		return netip.Addr{}, false
	}
	parts := strings.Split(s, ".")
	vals := make([]uint64, len(parts))
	valid := len(parts) <= 4
	for i, p := range parts {
		v, isNumber, ok := numericPart(p)
		if !isNumber {
			return netip.Addr{}, false
		}
		vals[i], valid = v, valid && ok
	}
	if !valid {
		return netip.Addr{}, true
	}
	var ip uint64
	for _, v := range vals[:len(vals)-1] {
		if v > 0xff {
			return netip.Addr{}, true
		}
		ip = ip<<8 | v
	}
	last := vals[len(vals)-1]
	lastBits := 8 * (5 - len(vals)) // 32 bits for one part, 8 for four
	if last >= 1<<lastBits {
		return netip.Addr{}, true
	}
	ip = ip<<lastBits | last
	return netip.AddrFrom4([4]byte{byte(ip >> 24), byte(ip >> 16), byte(ip >> 8), byte(ip)}), true
}

// numericPart reads one part of a numeric host: "0x" or "0X" and hex
// digits (none is 0, as the URL standard reads it), "0" and octal digits,
// or decimal digits. number is false if p is none of these; ok is false
// if it is one but its value does not fit 32 bits, or an octal part has
// an 8 or a 9.
func numericPart(p string) (v uint64, number, ok bool) {
	base, digits := 10, p
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		base, digits = 16, p[2:]
		if digits == "" {
			return 0, true, true
		}
		if strings.TrimLeft(digits, "0123456789abcdefABCDEF") != "" {
			return 0, false, false
		}
	case p == "" || strings.TrimLeft(p, "0123456789") != "":
		return 0, false, false
	case len(p) > 1 && p[0] == '0':
		base, digits = 8, p[1:]
	}
	v, err := strconv.ParseUint(digits, base, 32)
	return v, true, err == nil
}
