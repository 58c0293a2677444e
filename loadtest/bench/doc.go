// Package bench is flyball's load test: it drives flyball, a plain-timer
// floor and nats-server's own message scheduler through the same tiers
// against the same HTTP target, measures the raw JetStream publish ceiling
// on the same server, and reports lateness, missed and duplicate runs,
// throughput, CPU-seconds per 1,000 runs and peak RSS for each, plus the
// timer's load time and heap per task at scale. See docs/benchmarks.md.
//
// Run drives one benchmark from a Config; cmd/flyball-bench is its CLI and
// `make bench` / `make bench-smoke` call that.
package bench
