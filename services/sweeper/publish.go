package sweeper

import (
	"github.com/flyballhq/flyball/services/internal/jsutil"
	"github.com/flyballhq/flyball/streams"
)

// published is what a sweeper publish with a Nats-Msg-Id did.
type published int

const (
	// pubStored: this publish stored the message.
	pubStored published = iota
	// pubDuplicate: the stream holds the same Nats-Msg-Id already (a
	// duplicate PubAck), or is storing it right now for someone else
	// (error 10158, JSStreamDuplicateMessageConflict: another sweeper
	// replica's or the timer's publish, or an earlier try of this one,
	// still being replicated). Nothing to count or log as done.
	pubDuplicate
	// pubPending: DISPATCH refused it because the subject holds a pending
	// dispatch (error 10077, streams.IsSubjectFull): one was stored since
	// the sweeper looked, and the executor has it.
	pubPending
	// pubFailed: not stored; the next sweep tries again.
	pubFailed
)

// classifyPublish names the result of jsutil.PublishNewEvent.
func classifyPublish(stored bool, err error) published {
	switch {
	case err == nil && stored:
		return pubStored
	case err == nil, jsutil.IsDuplicateInProcess(err):
		return pubDuplicate
	case streams.IsSubjectFull(err):
		return pubPending
	default:
		return pubFailed
	}
}
