package streams

import (
	_ "embed"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
)

// MetadataVersion is the metadata key in which [Ensure] records, on every
// stream and durable consumer it creates or updates, the version of the
// definitions it applied: defs/version.json's "version", an integer that
// grows with every change to a definition file.
//
// During a rolling upgrade old and new flyball binaries run side by side,
// and each one's ensure (every `serve` start, by default) wrote its own
// definitions: an old instance restarting reverted a newer consumer's
// filter, ack wait or pinned-client settings, or a bucket's max age. A
// stream or consumer whose recorded version is newer than the binary's
// is now left as it is, and reported ([LimitDefinitions]); one recorded
// at the same version or older, or with none (made before versions were
// recorded, or by hand), is updated as before.
const MetadataVersion = "flyball.defs.version"

// LimitDefinitions is the [Difference.Limit] of a stream or consumer that
// [Ensure] left untouched because newer definitions are in place: its
// [MetadataVersion] is newer than the binary's (Live, as "version N").
const LimitDefinitions = "definitions"

// natsDynamicMetadata are the metadata keys nats-server adds to the
// configs it returns, and does not store: not sent back.
var natsDynamicMetadata = []string{"_nats.ver", "_nats.level"}

//go:embed defs/version.json
var versionJSON []byte

type defsVersionFile struct {
	Version int `json:"version"`
	// SHA256 is the hash of the definitions the version names; only
	// TestDefinitionsVersionBumped reads it.
	SHA256 string `json:"sha256"`
}

var loadVersion = sync.OnceValues(func() (defsVersionFile, error) {
	var v defsVersionFile
	if err := decodeStrict(versionJSON, &v); err != nil {
		return v, fmt.Errorf("streams: defs/version.json: %w", err)
	}
	if v.Version < 1 {
		return v, fmt.Errorf("streams: defs/version.json: version %d must be positive", v.Version)
	}
	return v, nil
})

// DefinitionsVersion is the version of the embedded definitions, which
// [Ensure] records under [MetadataVersion].
func DefinitionsVersion() (int, error) {
	v, err := loadVersion()
	return v.Version, err
}

// recordedVersion is the definitions version md records: 0 for none (or
// one that is not a number, which no flyball wrote).
func recordedVersion(md map[string]string) int {
	v, err := strconv.Atoi(strings.TrimSpace(md[MetadataVersion]))
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// withVersion is the metadata to write over live: live's own keys (an
// operator's, nats-server's stored _nats.* ones) but for the ones
// nats-server adds to each answer, and version under [MetadataVersion].
func withVersion(live map[string]string, version int) map[string]string {
	out := maps.Clone(live)
	if out == nil {
		out = make(map[string]string, 1)
	}
	for _, k := range natsDynamicMetadata {
		delete(out, k)
	}
	out[MetadataVersion] = strconv.Itoa(version)
	return out
}

// newerDifference reports an object (stream, or stream.consumer) left as
// it is under newer definitions.
func newerDifference(object string, version int) Difference {
	return Difference{Stream: object, Limit: LimitDefinitions, Live: "version " + strconv.Itoa(version), Kept: true}
}
