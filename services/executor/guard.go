package executor

import "github.com/flyballhq/flyball/services/internal/ssrf"

// Guard decides which destination addresses outbound calls may reach.
// The zero value blocks loopback, link-local, unspecified, multicast and
// known cloud-metadata addresses and hostnames, refuses a host that is
// an IPv4 address spelled as a number (0x7f.1, 2852039166), and allows
// everything else (private networks included: reaching internal services is the
// point of a scheduler). It is ssrf.Guard, which the governor and the API
// apply to the target URLs of created and updated tasks.
type Guard = ssrf.Guard

// ErrBlocked is wrapped by dial errors for destinations the guard refuses.
var ErrBlocked = ssrf.ErrBlocked
