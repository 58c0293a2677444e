// Package events is flyball's shared vocabulary: the CloudEvents types that
// services exchange over NATS JetStream, the subjects they travel on, the task
// specification with its validation, and the codec that turns bytes on the
// wire into events and back.
//
// The package depends on no NATS server or client code, so every service,
// the CLI and third-party producers can import it cheaply.
//
// # Wire format
//
// flyball emits CloudEvents 1.0 in structured mode
// (application/cloudevents+json): every message stored in a stream describes
// itself, which keeps `nats sub` output readable and makes streams replayable.
// [Decode] accepts structured mode and binary mode (ce-* headers with the data
// as the message body), so producers can use whichever their tooling prefers.
//
// # Errors
//
// Every validation or decode problem is a [FieldError] that names the field
// (a dotted JSON path such as "schedule.interval") and the rule it broke. A
// [ValidationError] carries all of them at once, so a user fixes a task spec
// in one round trip rather than one error at a time.
package events
