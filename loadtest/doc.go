// Package loadtest holds the flyball load-test harness and its benchmarks.
//
// It is a placeholder until the harness lands; it exists so the module is
// not empty and workspace-wide tooling (go test, go vet, golangci-lint) has
// a package to operate on.
package loadtest
