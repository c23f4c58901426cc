// Package redlockotel records OpenTelemetry traces and metrics of the
// locks of a redlock.Locker. It is a module of its own, so the redlock
// module does not depend on OpenTelemetry; it imports only the
// OpenTelemetry API, and the application brings the SDK and exporters.
//
// One line instruments a locker:
//
//	locker = redlockotel.Wrap(locker,
//		redlockotel.WithTracerProvider(tp), redlockotel.WithMeterProvider(mp))
//
// Without the two options the global providers are used
// (otel.GetTracerProvider, otel.GetMeterProvider). A service that wants
// only the metrics, without wrapping, sets Observer as the locker's
// observer: redlock.New(nodes, redlock.WithObserver(redlockotel.Observer())).
//
// # Spans
//
// Lock and Do each start a span, "redlock.Lock" or "redlock.Do", a child
// of the span in the context they are given; the context the wrapped
// locker and Do's function receive carries it, so the node calls (with an
// instrumented Redis client) and the function's own spans nest under it.
// The span has the attributes
//
//	redlock.key            the key (unless WithSpanKeys(false))
//	redlock.key.template   the key's template (WithKeyTemplate)
//	redlock.nodes          the number of nodes (1 for a locker of one node,
//	                       WithNodeCount, or from a failed round's QuorumError)
//	redlock.outcome        acquired, busy, timeout, unavailable, cancelled or invalid
//	redlock.attempts       attempts made
//	redlock.fence          the fencing token (WithFencing)
//	redlock.quorum, redlock.granted   on failure, from the redlock.QuorumError
//
// and the events "redlock.contention" (an attempt that did not get the
// lock: redlock.attempt, redlock.outcome) and "redlock.node.error" (a node
// that failed a call: redlock.node, redlock.op, redlock.call.duration in
// seconds, error.message), each at the time it happened. An error is
// recorded on the span (RecordError) and sets its status to Error; for Do
// this is Do's error, so a failing function marks the span too, while
// redlock.outcome still says how the acquisition went.
//
// Extensions, the release and a loss of the lock happen on the
// *redlock.Lock, which cannot be wrapped: they are told to an observer
// that Wrap gives every call (see "Observers" below), and become spans
// that are children of the call's span, with the call's key attributes:
//
//	redlock.Extend  an extension (the heartbeat's or Extend's), from its start
//	                to its end; redlock.outcome extended, not_held, unavailable
//	                or cancelled
//	redlock.Unlock  the release; redlock.outcome released, not_held or
//	                unavailable; redlock.hold.duration, seconds held
//	redlock.Lost    the moment the lock was lost (status Error);
//	                redlock.hold.duration
//
// A node that fails during an extension or the release is an event on
// that span. Under Do the Unlock span starts when the function returns.
// A Lock's Unlock is a call on the *redlock.Lock that nothing reports the
// start of: its span starts at the first failing node call when there is
// one, and otherwise is recorded at its end, with no duration. These
// spans follow the lock, not the caller: for a Lock they come after the
// Lock span has ended, as a trace viewer shows asynchronous children.
//
// An extension cut short by cancellation, which is what stopping the
// heartbeat (Unlock, or the end of Do) does to one in flight, has outcome
// cancelled and no error status: the core reports it as a failed
// extension, but nothing failed. Likewise a node call that ended because
// its caller cancelled it (context.Canceled) is not a node error, neither
// on spans nor in redlock.node.errors; a per-node timeout
// (context.DeadlineExceeded) is.
//
// Traces are sampled, and looking a trace up by the key it locked is
// their point, so spans carry the raw key by default; WithSpanKeys(false)
// leaves it out.
//
// # Metrics
//
// The names follow the OpenTelemetry conventions (a Prometheus exporter
// turns "redlock.lock.wait.duration" in seconds into
// redlock_lock_wait_duration_seconds and counters into ..._total):
//
//	name                        instrument       unit           attributes
//	redlock.lock.wait.duration  histogram        s              outcome, key
//	redlock.lock.acquisitions   counter          {acquisition}  outcome, key
//	redlock.lock.contention     counter          {attempt}      outcome, key
//	redlock.lock.waiting        updowncounter    {call}         key
//	redlock.lock.hold.duration  histogram        s              outcome, key
//	redlock.lock.extensions     counter          {extension}    outcome, key
//	redlock.lock.lost           counter          {lock}         key
//	redlock.node.errors         counter          {error}        node, op
//
// outcome is, for acquisitions and the wait: acquired, busy (held by
// someone else: the Reject strategy, or a Retry with no retries), timeout
// (the Retry strategy ran out of retries: redlock.ErrTimeout), unavailable
// (too few nodes answered), cancelled (the caller's context ended first)
// or invalid (bad arguments; counted only by Wrap, as no event reports
// them). For contention: busy, unavailable or cancelled; for
// extensions: extended, not_held, unavailable or cancelled; for the hold time, the release's outcome:
// released, not_held (the lock had expired or was taken over before
// Unlock: the critical section may have overlapped another holder's) or
// unavailable. An error none of these fits is "error".
// redlock.lock.wait.duration counts failed acquisitions too, under their
// outcome. redlock.lock.waiting counts the calls of wrapped lockers that
// are still acquiring, so summed over a service's instances it tells how
// many are waiting. node is a node's Name (for the go-redis adapter its
// "host:port"), op one of acquire, extend, release, fence and watch.
//
// # Cardinality
//
// Lock keys are never metric attributes as they are: a key per order or
// per user would make a time series each. WithKeyTemplate maps a key to
// a template of bounded cardinality ("order:1234" to "order:{id}"), which
// becomes the attribute key; without it metrics have no key attribute.
// The other attributes are bounded: outcomes and operations are the
// fixed lists above, and nodes are the locker's.
//
// # Observers
//
// Wrap passes every Lock and Do call of the wrapped locker one more
// option, redlock.WithObserver with an observer of its own for that call,
// last. That is how the lock's later extensions, release and loss reach
// the call's span; it also means the call's observer replaces any other:
// the one the locker was built with, and any redlock.WithObserver passed
// to the call. Give that observer to WithObserver instead, and it is told
// every event, after the telemetry recorded it:
//
//	locker, _ := redlock.New(nodes) // not redlock.WithObserver(logs) here
//	locked := redlockotel.Wrap(locker, redlockotel.WithObserver(redlock.SlogObserver(logger)))
//
// Observer chains the same way.
package redlockotel
