// Package metrics defines every Prometheus metric flyball exports. One Set
// is created per process and shared by the services running in it, so
// `flyball dev` serves one combined /metrics.
package metrics

import (
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Set holds the process's metrics and the registry they are registered in.
// Labels are bounded: no metric here has a per-task label.
type Set struct {
	Registry *prometheus.Registry

	RunsTotal *prometheus.CounterVec
	// SkipsTotal counts the runs counted as skipped in RunsTotal by why
	// (executor: a fixed set of labels).
	SkipsTotal         *prometheus.CounterVec
	RunDuration        prometheus.Histogram
	DispatchLateness   prometheus.Histogram
	DispatchTotal      *prometheus.CounterVec
	DispatchPending    prometheus.Gauge
	TimerDispatching   prometheus.Gauge
	TimerLeaseStalls   prometheus.Counter
	DispatchHeld       prometheus.Gauge
	DispatchDeferred   prometheus.Gauge
	Inflight           prometheus.Gauge
	RetriesTotal       prometheus.Counter
	BreakerTransitions *prometheus.CounterVec
	BreakersOpen       prometheus.Gauge
	ProbeDeferred      prometheus.Counter
	BreakerRecovered   prometheus.Counter
	DeadLetterTotal    *prometheus.CounterVec
	Decisions          *prometheus.CounterVec
	RejectedEvents     *prometheus.CounterVec
	RuntimeInstances   *prometheus.GaugeVec
	StalenessMax       prometheus.Gauge
	HeartbeatFailures  prometheus.Counter
	// DispatchDeferredLimit is the most dispatches an executor keeps for
	// an open breaker's retryAt: half of DISPATCH's max_ack_pending.
	DispatchDeferredLimit prometheus.Gauge
	// ClockOffset is the process's clock minus the NATS server's, as its
	// heartbeats measure it.
	ClockOffset prometheus.Gauge
	// ClockOffsetMeasured is 1 while the heartbeats measure ClockOffset,
	// 0 before the first measurement and after a failed read-back.
	ClockOffsetMeasured prometheus.Gauge
	ZombiesRenudged     prometheus.Counter
	OrphansRemoved      *prometheus.CounterVec
	MarkersCompacted    *prometheus.CounterVec
	SchedulesRepaired   *prometheus.CounterVec
	SweeperScanning     prometheus.Gauge
	PullFailures        *prometheus.CounterVec
	PullStalls          *prometheus.CounterVec
	GovernorRetries     *prometheus.CounterVec
	OutboxRepublished   prometheus.Counter
	OutboxAbandoned     prometheus.Counter
	SettlesUnconfirmed  *prometheus.CounterVec
	OutboxEvents        prometheus.Gauge
	// DeadLetterReconciled counts dispatches dead-lettered without their
	// MAX_DELIVERIES advisory (deadletter.Service.Reconcile).
	DeadLetterReconciled prometheus.Counter
	// Consumer* describe each durable consumer flyball defines, by
	// stream and consumer, as the sweeper last read them (its backlog
	// report, every sweep).
	ConsumerPending       *prometheus.GaugeVec
	ConsumerAckPending    *prometheus.GaugeVec
	ConsumerMaxAckPending *prometheus.GaugeVec
	ConsumerRedelivered   *prometheus.GaugeVec
	// JetStreamStorage is one copy of each of the account's streams (an
	// R3 stream counted once), what one server holds at most;
	// JetStreamAccountStorage is the account's usage, every replica
	// counted, which JetStreamStorageLimit bounds. All by storage type
	// (file, memory).
	JetStreamStorage        *prometheus.GaugeVec
	JetStreamAccountStorage *prometheus.GaugeVec
	JetStreamStorageLimit   *prometheus.GaugeVec
	// BacklogReadFailures counts the sweeper's failed reads of them, by
	// what it read (consumer, account).
	BacklogReadFailures *prometheus.CounterVec
	// TaskIndexFallbacks counts the API's task pages listed without its
	// task index (its watch lost or lagging), each costing every task key.
	TaskIndexFallbacks prometheus.Counter
	// TaskStaleness is the only per-task series. It is registered only
	// when per-task metrics are enabled (see sweeper.Config.PerTaskMetrics).
	TaskStaleness *prometheus.GaugeVec
}

// allocationRule adds three runtime/metrics counters to the Go collector's
// defaults: go_gc_heap_allocs_objects_total, go_gc_heap_allocs_bytes_total
// and go_gc_cycles_total_gc_cycles_total. Divided by flyball_runs_total
// they give the allocations and collections per run, which compare two
// builds without the noise of CPU time (the load test reads them).
// go_memstats_mallocs_total is not the same count: it adds tiny objects.
var allocationRule = collectors.GoRuntimeMetricsRule{
	Matcher: regexp.MustCompile(`^/gc/(heap/allocs:(objects|bytes)|cycles/total:gc-cycles)$`),
}

// New creates a Set with its own registry, including Go and process
// collectors.
func New() *Set {
	r := prometheus.NewRegistry()
	r.MustRegister(
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(allocationRule)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	f := func(c prometheus.Collector) { r.MustRegister(c) }
	latencyBuckets := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	s := &Set{
		Registry: r,
		RunsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flyball_runs_total", Help: "Run attempts by result (succeeded, failed, skipped, deferred).",
		}, []string{"result"}),
		SkipsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flyball_skips_total", Help: "Runs skipped without a call, by reason (deleted, recreated, paused, missed, invalid-spec, already-ran, breaker).",
		}, []string{"reason"}),
		RunDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "flyball_run_duration_seconds", Help: "Duration of target calls, in buckets up to 1800 s (events.MaxTargetTimeout, the longest timeout a task may set).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 600, 1200, 1800},
		}),
		DispatchLateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "flyball_dispatch_lateness_seconds", Help: "Per dispatch this timer stored: the publish time of the try that was stored (for a retry answered duplicate, the earliest earlier try whose ack was lost; a duplicate of another timer's dispatch is not recorded) minus when the timer first planned it, its lead before nextRunAt (a retried dispatch: at most 250ms before it), or when its schedule was written if later (a slot written for now or the past: a run-now hint, a requeue, a catch-up).",
			Buckets: latencyBuckets,
		}),
		DispatchTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flyball_dispatch_total", Help: "Timer dispatch publishes by result (new, duplicate, pending, in-process, error).",
		}, []string{"result"}),
		DispatchPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "flyball_dispatch_pending", Help: "Schedules held by this timer that are waiting to fall due.",
		}),
		TimerDispatching: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "flyball_timer_dispatching", Help: "1 while this timer publishes due runs, 0 while it stands by for the lease another replica holds (--timer-lease).",
		}),
		TimerLeaseStalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flyball_timer_lease_stalls_total", Help: "Times this timer, holding the lease (--timer-lease), found it unconfirmed for the lease's duration less a tenth (the process or its lease renewals stalled that long, so a standby may have taken over) and held its dispatches back until a renewal confirmed the lease or found it taken.",
		}),
		DispatchHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "flyball_dispatch_held", Help: "Dispatches this executor holds until their slot (the timer publishes them up to --timer-lead early).",
		}),
		DispatchDeferred: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "flyball_dispatch_deferred",
			Help: "Dispatches this executor keeps while their breaker defers them (open until retryAt, or half-open while another call probes), or to try again in place after a read or write of its own KV state failed.",
		}),
		DispatchDeferredLimit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "flyball_dispatch_deferred_limit",
			Help: "The most dispatches this executor keeps for an open breaker's retryAt (in flyball_dispatch_deferred): half the DISPATCH consumer's max_ack_pending, read at start. Past it, or while the consumer has half of it delivered and unacked, such a dispatch is reported run.skipped (reason breaker). 0: the consumer sets no max_ack_pending.",
		}),
		Inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "flyball_inflight", Help: "Runs being executed by this process.",
		}),
		RetriesTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flyball_retries_total", Help: "Failed attempts that were scheduled for retry.",
		}),
		BreakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flyball_breaker_transitions_total", Help: "Breaker transitions by target state.",
		}, []string{"to"}),
		BreakersOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "flyball_breakers_open", Help: "Breakers this process last saw open, or half-open with a run of one of their tasks due (the probe pending or in flight), not counting the breaker of a paused task or a host breaker all of whose tasks are paused (nothing probes them until a resume).",
		}),
		ProbeDeferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flyball_breaker_probe_deferred_total",
			Help: "Dispatches the executor deferred because their breaker is half-open and another call holds its probe claim (KV flyball-probes).",
		}),
		BreakerRecovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flyball_breaker_recovered_total",
			Help: "run.recovered events the executor stored: successes the breaker service must see because their breaker was not settled (open, half-open or failures counted) or this executor had published a failure for its key.",
		}),
		DeadLetterTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flyball_deadletter_total", Help: "Dead-letter entries written, by reason.",
		}, []string{"reason"}),
		DeadLetterReconciled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flyball_deadletter_reconciled_total",
			Help: "Dispatches that exhausted their deliveries without a MAX_DELIVERIES advisory in ADVISORIES, found in DISPATCH and dead-lettered.",
		}),
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flyball_governor_decisions_total", Help: "Governor decisions by source.",
		}, []string{"source"}),
		RejectedEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flyball_rejected_events_total", Help: "Malformed or refused events, by reason.",
		}, []string{"reason"}),
		RuntimeInstances: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flyball_runtime_instances", Help: "Service instances in the runtime registry, by status.",
		}, []string{"status"}),
		StalenessMax: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "flyball_staleness_score", Help: "Highest staleness score in [0,1] of the tasks not paused.",
		}),
		HeartbeatFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flyball_heartbeat_failures_total", Help: "Heartbeat writes that failed and will be retried.",
		}),
		ClockOffset: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "flyball_clock_offset_seconds",
			Help: "This process's clock minus the NATS server's, measured by each heartbeat (the write's round trip bounds it); 0 until the first measurement. Past 1s either way, catchUp none and slot precision suffer: synchronize the clocks (NTP, chrony).",
		}),
		ClockOffsetMeasured: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "flyball_clock_offset_measured",
			Help: "1 while this process's heartbeat measures its clock offset (flyball_clock_offset_seconds), 0 before the first measurement and while the heartbeat cannot read its entry back (a NATS user without the direct get of its own flyball-runtime entry): flyball_clock_offset_seconds then holds its last measurement, 0 if none, and an executor that has measured none goes by its own clock.",
		}),
		ZombiesRenudged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flyball_zombies_renudged_total", Help: "Runs re-dispatched because they fell due long ago and never completed.",
		}),
		OrphansRemoved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flyball_orphans_removed_total", Help: "State of deleted tasks removed by the sweeper, by bucket.",
		}, []string{"bucket"}),
		MarkersCompacted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flyball_kv_delete_markers_removed_total",
			Help: "Delete markers older than a day the sweeper removed from flyball-tasks, flyball-schedules and flyball-breakers, with the revisions behind them, by bucket.",
		}, []string{"bucket"}),
		SchedulesRepaired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flyball_schedules_repaired_total",
			Help: "Schedules the sweeper repaired, by reason: lost-write (the governor applied the outcome of a slot, or of a later one, but its schedule write was lost; the slot is dispatched again and skipped), missing (a task with no schedule; its task.created is published again), unreadable (a task whose schedule does not decode; its task.created is published again, and the governor rebuilds the schedule).",
		}, []string{"reason"}),
		SweeperScanning: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "flyball_sweeper_scanning",
			Help: "1 while the sweeper reads every schedule at each sweep (schedules change faster than sweeps), 0 while it watches every schedule write.",
		}),
		PullFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flyball_pull_failures_total",
			Help: "Failed pulls from a durable consumer, and tries to bind a deleted one again, by stream (no leader during an election, NATS unreachable, the durable deleted); each is retried within 1s.",
		}, []string{"stream"}),
		PullStalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flyball_pull_stalls_total",
			Help: "Pulls from a durable consumer that came back more than 0.5s past their deadline, by stream: the process stalled (stopped, paused, starved of CPU) while the pull waited; messages delivered in the stall may have been dropped with the pull and come back after the durable's AckWait.",
		}, []string{"stream"}),
		GovernorRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flyball_governor_retries_total",
			Help: "Messages the governor tried again after a transient failure (NATS or KV trouble), by stream; each is retried in place, ahead of the messages behind it.",
		}, []string{"stream"}),
		OutboxRepublished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flyball_outbox_republished_total",
			Help: "Run events the executor published again because RUNS did not confirm them within a round (2s).",
		}),
		OutboxAbandoned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flyball_outbox_abandoned_total",
			Help: "Run events never confirmed within the outbox budget (15s); their dispatches were nakked and will be called again.",
		}),
		SettlesUnconfirmed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flyball_settles_unconfirmed_total",
			Help: "Acks, naks and terms of dispatches that the executor gave up on, by kind: the consumer did not confirm them before the delivery's AckWait (NATS overloaded, or a consumer leader election that long); each such dispatch may be delivered again after AckWait.",
		}, []string{"kind"}),
		OutboxEvents: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "flyball_outbox_events",
			Help: "Run events in the executor's outbox, not yet confirmed stored; their dispatches are acked once they are.",
		}),
		ConsumerPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flyball_consumer_pending",
			Help: "Messages stored in the stream and not yet delivered to the durable consumer (its backlog), by stream and consumer, read by the sweeper every sweep.",
		}, []string{"stream", "consumer"}),
		ConsumerAckPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flyball_consumer_ack_pending",
			Help: "Messages delivered to the durable consumer and not yet acked (held, in progress or lost with a crashed replica), by stream and consumer.",
		}, []string{"stream", "consumer"}),
		ConsumerMaxAckPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flyball_consumer_max_ack_pending",
			Help: "The durable consumer's max_ack_pending: at flyball_consumer_ack_pending this high the server delivers nothing more to it until acks free room.",
		}, []string{"stream", "consumer"}),
		ConsumerRedelivered: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flyball_consumer_redelivered",
			Help: "Messages of the durable consumer delivered more than once and not yet acked, by stream and consumer.",
		}, []string{"stream", "consumer"}),
		JetStreamStorage: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flyball_jetstream_storage_bytes",
			Help: "Bytes of one copy of each of the NATS account's streams (an R3 stream counts once), by storage type (file, memory): at most what one server stores, to compare with a server's max_file_store or max_memory_store.",
		}, []string{"type"}),
		JetStreamAccountStorage: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flyball_jetstream_account_storage_bytes",
			Help: "The NATS account's JetStream usage, by storage type (file, memory), every replica counted (an R3 stream three times), the figure flyball_jetstream_storage_limit_bytes bounds.",
		}, []string{"type"}),
		JetStreamStorageLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flyball_jetstream_storage_limit_bytes",
			Help: "The NATS account's JetStream limit, by storage type (file, memory), which counts every replica (compare it with flyball_jetstream_account_storage_bytes); absent while the account has none (the servers' max_file_store and max_memory_store bound it then).",
		}, []string{"type"}),
		BacklogReadFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flyball_backlog_read_failures_total",
			Help: "The sweeper's failed reads of a durable consumer's state or of the account's JetStream usage, by what it read (consumer, account); the series stay at their last reading until the next read succeeds.",
		}, []string{"read"}),
		TaskIndexFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flyball_api_task_index_fallbacks_total",
			Help: "Pages of GET /api/v1/tasks that listed every task key because the API's task index could not answer (its watch of flyball-tasks lost, or lagging by more than 1s); the next page starts a new watch.",
		}),
	}
	s.TaskStaleness = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "flyball_task_staleness_score", Help: "Per-task staleness in [0,1] (opt-in; off above the task limit).",
	}, []string{"task"})
	for _, c := range []prometheus.Collector{
		s.RunsTotal, s.SkipsTotal, s.RunDuration, s.DispatchLateness, s.DispatchTotal, s.DispatchPending, s.TimerDispatching, s.TimerLeaseStalls, s.DispatchHeld, s.DispatchDeferred, s.DispatchDeferredLimit, s.Inflight,
		s.RetriesTotal, s.BreakerTransitions, s.BreakersOpen, s.ProbeDeferred, s.BreakerRecovered, s.DeadLetterTotal, s.Decisions,
		s.RejectedEvents, s.RuntimeInstances, s.StalenessMax, s.HeartbeatFailures, s.ClockOffset, s.ClockOffsetMeasured, s.ZombiesRenudged, s.OrphansRemoved, s.MarkersCompacted, s.SchedulesRepaired,
		s.SweeperScanning, s.PullFailures, s.PullStalls, s.GovernorRetries, s.OutboxRepublished, s.OutboxAbandoned, s.OutboxEvents, s.DeadLetterReconciled,
		s.SettlesUnconfirmed, s.ConsumerPending, s.ConsumerAckPending, s.ConsumerMaxAckPending, s.ConsumerRedelivered,
		s.JetStreamStorage, s.JetStreamAccountStorage, s.JetStreamStorageLimit, s.BacklogReadFailures, s.TaskIndexFallbacks,
	} {
		f(c)
	}
	return s
}

// OrNew returns s, or a fresh Set when s is nil.
func OrNew(s *Set) *Set {
	if s != nil {
		return s
	}
	return New()
}
