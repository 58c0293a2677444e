// Package loadtest is the root of flyball's load-test module. The work is
// done by its subpackages:
//
//   - bench: tiers, systems (flyball, the plain-timer floor, nats-server's
//     message scheduler), the JetStream ceiling, the scale load, reports;
//   - stats: lateness percentiles and missed/duplicate detection against
//     the expected grid;
//   - target: the HTTP target that records every call;
//   - procstat: CPU time and RSS from /proc;
//   - cmd/flyball-bench: the command `make bench` runs.
package loadtest
