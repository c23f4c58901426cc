// Package httplock makes a net/http service's writes to one record take
// turns across every worker that serves it, while writes to different
// records run in parallel.
//
// The Middleware locks a record for the duration of each update (PUT,
// PATCH) and delete (DELETE) request addressed to it, under the key
// {namespace}:{project}:{endpoint}:{recordId}:write (see
// KeySpace). Inserts (POST) and reads (GET, HEAD, OPTIONS) run
// without a lock: an insert creates a new row no one else can be writing,
// and a read is served by the database's own consistency. Every other
// method locks too, so that a handler that writes on "anything but GET"
// cannot be reached unlocked with an unusual method ("put", "PROPPATCH").
// WithMethods changes the set, for instance to lock a POST that acts on an
// existing record, such as a checkout. A route that writes to several
// records at once (a transfer between two accounts) locks them all, all
// or nothing, with NewMany and PathRecords.
//
// The handler runs inside redlock's Do: the lock is renewed by a heartbeat
// while it runs, and if the lock is lost anyway (a quorum of Redis nodes
// no longer holds it) the request's context is cancelled with a cause
// matching redlock.ErrLockLost, so a handler that passes r.Context() to
// its database calls stops writing. The lock is released when the handler
// returns, also when it panics.
//
// A request that cannot get the lock never reaches the handler. It is
// answered with a JSON body {"error": "..."} and:
//
//	409 Conflict               the record is being written by another request
//	                           (the strategy was reject, or its retries ran out)
//	400 Bad Request            the record id cannot be part of a lock key (it is
//	                           empty or contains ':')
//	500 Internal Server Error  the lock service could not decide (too few Redis
//	                           nodes answered), the lock was lost before the
//	                           handler wrote anything, or the middleware is
//	                           misconfigured (ErrMisconfigured)
//
// # Failures of the lock service
//
// The response bodies say nothing of the nodes. What went wrong is told
// to an ErrorHook instead, for every request the middleware answers with
// 500 (the lock service unavailable, a lock lost or expired, a server
// misconfiguration), also when the handler had started its response and
// no error could be sent any more. The default, LogError, writes one
// structured line to slog.Default(): the request, the lock keys, the
// cause in a few words and each node that failed, node names and errors
// with the secrets of any URL in them masked. WithErrorHook replaces it.
//
// # Fail closed
//
// A request whose method locks reaches the handler only inside the
// record's lock, or when the RecordFunc explicitly says that it addresses
// no record (ok = false; PathRecord never does). Everything else that can
// go wrong ends in an error response and never in an unlocked write: an
// id that is empty or cannot be a key part (400), a PathRecord wildcard
// that the matched route does not have (500), a Middleware not built by
// New or a nil handler (500 for every request), a Locker whose Do returns
// without running the handler (500). What can be checked before any
// request is checked by New: a PathRecord with an invalid wildcard name,
// or a project or endpoint that cannot be part of a key, is an error
// there.
package httplock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"unicode"

	"github.com/quorumlock/redlock"
)

// Record identifies the record a request writes to. Its three parts are
// the middle of the lock key, {project}:{endpoint}:{recordId}.
type Record struct {
	Project  string // the application, e.g. "mini-inventory"
	Endpoint string // the resource, e.g. "supplier"
	ID       string // the record's id, e.g. a UUID from the URL

	err error // set by PathRecord when the route cannot name a record
}

// A RecordFunc names the record a request writes to. It is called only
// for the methods that lock, before the handler, and must not consume the
// body.
//
// ok = false means that the request does not address one record (a bulk
// update, say) and runs WITHOUT a lock: return it only for requests that
// are meant to run unlocked, never because the record could not be found
// out. A record whose ID is empty (or whose parts contain ':') is refused
// with 400, so returning ok = true with an empty ID is the fail-closed way
// to say "this request names no valid record".
type RecordFunc func(r *http.Request) (rec Record, ok bool)

// PathRecord returns a RecordFunc for routes registered on an
// http.ServeMux with a wildcard: the record id is r.PathValue(wildcard).
//
//	mux.Handle("PUT /suppliers/{id}", mw.Wrap(update))
//	... httplock.PathRecord("mini-inventory", "supplier", "id")
//
// It never lets a request through unlocked. An empty id (a rest wildcard
// {id...} that matched nothing, or a request with no such path value) is
// refused with 400 (ErrBadRecord). A request routed by a pattern that has
// no wildcard of that name (PathRecord(..., "ID") on "/suppliers/{id}",
// or a route without any wildcard) is a server bug: 500, with an error
// matching ErrMisconfigured that names the wildcard and the pattern.
//
// wildcard is the name alone ("id" for {id} and for {id...}). When it is
// not a valid wildcard name, or project or endpoint is empty or contains
// ':', PathRecord returns nil, which New refuses with an error matching
// redlock.ErrInvalid.
func PathRecord(project, endpoint, wildcard string) RecordFunc {
	if !validWildcard(wildcard) {
		return nil
	}
	if _, err := (KeySpace{}).Write(project, endpoint, "id"); err != nil {
		return nil
	}
	return func(r *http.Request) (Record, bool) {
		rec := Record{Project: project, Endpoint: endpoint, ID: r.PathValue(wildcard)}
		if rec.ID == "" && r.Pattern != "" &&
			!strings.Contains(r.Pattern, "{"+wildcard+"}") && !strings.Contains(r.Pattern, "{"+wildcard+"...}") {
			rec.err = fmt.Errorf("%w: PathRecord's wildcard %q is not in the route %q", ErrMisconfigured, wildcard, r.Pattern)
		}
		return rec, true
	}
}

// validWildcard reports whether name is a valid http.ServeMux wildcard
// name: a Go identifier.
func validWildcard(name string) bool {
	if name == "" {
		return false
	}
	for i, c := range name {
		if !unicode.IsLetter(c) && c != '_' && (i == 0 || !unicode.IsDigit(c)) {
			return false
		}
	}
	return true
}

// ErrBadRecord is matched by the error a Middleware reports when the
// record a request names cannot be turned into a lock key (an empty part,
// or one containing ':'). It is the client's fault: WriteError answers
// 400.
var ErrBadRecord = errors.New("httplock: bad record id")

// ErrMisconfigured is matched by the error a Middleware reports when it
// cannot lock a request because of the server's configuration, not the
// request: a PathRecord wildcard that the route does not have, a
// Middleware not built by New, a nil handler, a Locker that did not run
// the handler. The request is refused with 500; it never runs unlocked.
var ErrMisconfigured = errors.New("httplock: misconfigured")

// An ErrorHandler answers a request that did not get its lock, or lost it
// before writing a response. err matches redlock.ErrNotAcquired (the
// record is busy), ErrBadRecord, ErrMisconfigured, redlock.ErrLockLost,
// or anything else the locker returned (redlock.ErrUnavailable, usually).
// WriteError is the default; a custom handler can set headers and then
// call it. It need not log: the failures of the server are told to the
// ErrorHook first (see LogError).
type ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)

// Middleware locks records around the handlers it wraps. Build it with New;
// one Middleware can wrap many handlers.
type Middleware struct {
	locker   redlock.Locker
	record   RecordFunc
	records  RecordsFunc    // NewMany: several records at once, through sets
	sets     redlock.Locker // NewMany's locker
	rw       redlock.Locker // WithReadLocks: reads share, writes are writers
	keys     KeySpace
	methods  map[string]bool // upper case; nil: every method but GET, HEAD, OPTIONS and POST
	lockOpts []redlock.Option
	onError  ErrorHandler
	hook     ErrorHook
}

// An Option configures a Middleware.
type Option func(*Middleware) error

// WithMethods replaces the methods that lock (default: every method but
// GET, HEAD, OPTIONS and POST) with exactly these; the others then run
// without a lock. Methods are matched regardless of case, in the option
// and in the request, so that "post" cannot slip past a lock on "POST".
func WithMethods(methods ...string) Option {
	return func(m *Middleware) error {
		if len(methods) == 0 {
			return fmt.Errorf("%w: httplock: WithMethods needs at least one method", redlock.ErrInvalid)
		}
		m.methods = make(map[string]bool, len(methods))
		for _, meth := range methods {
			if meth == "" {
				return fmt.Errorf("%w: httplock: empty method", redlock.ErrInvalid)
			}
			m.methods[strings.ToUpper(meth)] = true
		}
		return nil
	}
}

// WithKeySpace sets the key namespace (default DefaultKeyNamespace,
// "rf:lock").
func WithKeySpace(ks KeySpace) Option {
	return func(m *Middleware) error {
		if _, err := ks.Write("p", "e", "id"); err != nil {
			return err
		}
		m.keys = ks
		return nil
	}
}

// WithLockOptions passes options to every Do, overriding the locker's
// defaults for these routes: a different TTL, strategy or renew interval.
func WithLockOptions(opts ...redlock.Option) Option {
	return func(m *Middleware) error {
		m.lockOpts = append(m.lockOpts, opts...)
		return nil
	}
}

// WithErrorHandler replaces WriteError.
func WithErrorHandler(h ErrorHandler) Option {
	return func(m *Middleware) error {
		if h == nil {
			return fmt.Errorf("%w: httplock: nil error handler", redlock.ErrInvalid)
		}
		m.onError = h
		return nil
	}
}

// WithErrorHook replaces LogError, the ErrorHook told of every failure of
// the lock service; a nil hook is an error matching redlock.ErrInvalid. To
// add to the log line rather than replace it, call LogError from the
// hook.
func WithErrorHook(h ErrorHook) Option {
	return func(m *Middleware) error {
		if h == nil {
			return fmt.Errorf("%w: httplock: nil error hook", redlock.ErrInvalid)
		}
		m.hook = h
		return nil
	}
}

// New returns a Middleware that locks through locker the record that
// record names. The locker is usually the one envconfig.Open returns;
// when distributed locking is disabled there, every lock is granted and
// the middleware costs almost nothing. A nil locker or record (PathRecord
// returns nil for arguments that could never name a record), or a bad
// option, is an error matching redlock.ErrInvalid.
func New(locker redlock.Locker, record RecordFunc, opts ...Option) (*Middleware, error) {
	if locker == nil {
		return nil, fmt.Errorf("%w: httplock: nil locker", redlock.ErrInvalid)
	}
	if record == nil {
		return nil, fmt.Errorf("%w: httplock: nil RecordFunc (PathRecord returns nil when its wildcard is not a valid name, "+
			"or its project or endpoint is empty or contains ':')", redlock.ErrInvalid)
	}
	m := &Middleware{
		locker:  locker,
		record:  record,
		onError: WriteError,
		hook:    LogError,
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Wrap returns next guarded by the record lock. See the package
// documentation for what happens to each request.
//
// Once the handler has started a response, the status is its own: an
// error from the lock after that point (the lock lost while the handler
// was finishing, a release that found the lock expired) cannot be sent
// any more; it goes to the ErrorHook only. When the handler has written
// nothing and the lock was lost, the client gets a 500 rather than an
// empty 200.
//
// A nil or zero Middleware (one New did not build), or a nil next, gives
// a handler that answers every request with 500 (ErrMisconfigured) and
// runs nothing.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	switch {
	case m == nil || m.locker == nil || m.record == nil:
		return refuseAll(m, fmt.Errorf("%w: the Middleware was not built by httplock.New", ErrMisconfigured))
	case next == nil:
		return refuseAll(m, fmt.Errorf("%w: Wrap(nil)", ErrMisconfigured))
	}
	if m.records != nil {
		return m.wrapMany(next)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		read := m.reads(r.Method)
		if !read && !m.locks(r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		rec, ok := m.record(r)
		if !ok { // the RecordFunc says: no record, run unlocked
			next.ServeHTTP(w, r)
			return
		}
		if rec.err != nil {
			m.fail(w, r, nil, rec.err, true)
			return
		}
		key, err := m.keys.Write(rec.Project, rec.Endpoint, rec.ID)
		if err != nil {
			m.fail(w, r, nil, fmt.Errorf("%w: %w", ErrBadRecord, err), true)
			return
		}
		m.serveLocked(w, r, next, []string{key}, func(run func(context.Context) error) error {
			return m.doKey(r.Context(), key, read, run)
		})
	})
}

// wrapMany is Wrap for NewMany's Middleware: every record the request
// names, locked at once.
func (m *Middleware) wrapMany(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.locks(r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		keys, ok, err := m.recordKeys(r)
		switch {
		case !ok: // the RecordsFunc says: no record, run unlocked
			next.ServeHTTP(w, r)
			return
		case err != nil:
			m.fail(w, r, keys, err, true)
			return
		}
		m.serveLocked(w, r, next, keys, func(run func(context.Context) error) error {
			return m.sets.DoMany(r.Context(), keys, run, m.lockOpts...)
		})
	})
}

// serveLocked runs next inside do (the locker's Do or DoMany, taking
// keys) and answers with an error if the lock was not acquired, or was
// lost before the handler wrote anything; the hook hears of a failure of
// the lock service in either case.
func (m *Middleware) serveLocked(w http.ResponseWriter, r *http.Request, next http.Handler, keys []string, do func(run func(context.Context) error) error) {
	tw := &trackingWriter{ResponseWriter: w}
	var ran atomic.Bool
	err := do(func(ctx context.Context) error {
		ran.Store(true)
		next.ServeHTTP(tw, r.WithContext(ctx))
		return nil
	})
	if err == nil && !ran.Load() {
		err = fmt.Errorf("%w: the Locker's Do returned without running the handler", ErrMisconfigured)
	}
	if err != nil {
		m.fail(w, r, keys, err, !tw.started.Load())
	}
}

// fail reports err, the failure of request r on keys: to the hook when it
// is the server's (StatusOf 500), and to the client through the
// ErrorHandler when respond is set (the handler started no response).
func (m *Middleware) fail(w http.ResponseWriter, r *http.Request, keys []string, err error, respond bool) {
	if StatusOf(err) >= http.StatusInternalServerError {
		m.hook(r, keys, err)
	}
	if respond {
		m.onError(w, r, err)
	}
}

// locks reports whether a request with this method takes the lock.
func (m *Middleware) locks(method string) bool {
	if m.methods == nil {
		switch method {
		case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPost:
			return false
		}
		return true
	}
	return m.methods[strings.ToUpper(method)]
}

// refuseAll answers every request with err, through m's ErrorHandler and
// ErrorHook when it has them.
func refuseAll(m *Middleware, err error) http.Handler {
	onError, hook := ErrorHandler(WriteError), ErrorHook(LogError)
	if m != nil && m.onError != nil {
		onError = m.onError
	}
	if m != nil && m.hook != nil {
		hook = m.hook
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hook(r, nil, err)
		onError(w, r, err)
	})
}

// StatusOf returns the HTTP status WriteError answers for err: 409 for an
// error matching redlock.ErrNotAcquired, 400 for ErrBadRecord, 500 for
// anything else.
func StatusOf(err error) int {
	switch {
	case errors.Is(err, redlock.ErrNotAcquired):
		return http.StatusConflict
	case errors.Is(err, ErrBadRecord):
		return http.StatusBadRequest
	default:
		return http.StatusInternalServerError
	}
}

// WriteError is the default ErrorHandler: StatusOf(err) with a JSON body
// {"error": "..."} and Content-Type application/json. The message says
// what happened in terms a client can act on; it does not reveal lock
// keys or node addresses.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	status := StatusOf(err)
	var msg string
	switch {
	case status == http.StatusConflict:
		msg = "the record is being processed by another request; try again later"
	case status == http.StatusBadRequest:
		msg = "the record id cannot be locked: it is empty or contains ':'"
	case errors.Is(err, ErrMisconfigured):
		msg = "the server cannot lock this record"
	case errors.Is(err, redlock.ErrLockLost):
		msg = "the lock on the record was lost while the request was processed"
	default:
		msg = "the lock service is unavailable"
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Error string `json:"error"`
	}{msg})
}

// trackingWriter records whether the handler started a response, so the
// middleware knows whether it may still send an error.
type trackingWriter struct {
	http.ResponseWriter
	started atomic.Bool
}

func (t *trackingWriter) WriteHeader(code int) {
	// 1xx informational headers do not start the response.
	if code >= 200 || code == http.StatusSwitchingProtocols {
		t.started.Store(true)
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(b []byte) (int, error) {
	t.started.Store(true)
	return t.ResponseWriter.Write(b)
}

// Flush lets streaming handlers flush through the wrapper; flushing
// starts the response.
func (t *trackingWriter) Flush() {
	t.started.Store(true)
	_ = http.NewResponseController(t.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the underlying writer, so
// deadlines and hijacking work through the middleware.
func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }
