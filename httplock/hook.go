package httplock

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redact"
)

// An ErrorHook is told of every request that failed because of the lock
// service or the server, not the client: every error StatusOf maps to 500
// (redlock.ErrUnavailable when too few nodes answered, redlock.ErrLockLost,
// a lock found expired at its release, ErrMisconfigured), whether the
// client got the error response or, the handler having started its own,
// could not. A busy record (409) and a bad record id (400) are not
// reported.
//
// keys are the request's lock keys, nil when the failure came before they
// were built (ErrMisconfigured). err is the locker's error: it names the
// nodes that failed (redlock.QuorumError), perhaps by URL; LogError masks
// their secrets, and a hook of your own must too. A hook runs on the
// request's goroutine, before the error response, so it must be quick and
// safe for concurrent use.
type ErrorHook func(r *http.Request, keys []string, err error)

// LogError is the default ErrorHook. It writes one line at level Error to
// slog.Default():
//
//	level=ERROR msg="httplock: lock service failed" method=PUT path=/suppliers/abc
//	  keys=[rf:lock:mini-inventory:supplier:abc:write] cause="lock service unavailable"
//	  nodes=["127.0.0.1:6379: goredis: node 127.0.0.1:6379: dial: dial tcp 127.0.0.1:6379: connect: connection refused"]
//	  error="redlock: acquire \"rf:lock:mini-inventory:supplier:abc:write\": 0 of 1 nodes agreed, quorum 1: ..."
//
// cause is err in a few words (see the list below); nodes the nodes of the
// first redlock.QuorumError in err that failed, each with what it said;
// error the whole text. Node names and error texts have the user info and
// credential parameters of any URL in them masked. The request's query
// string and headers are not logged.
//
// The causes: "misconfigured", "lock lost", "lock service unavailable",
// "lock expired before its release", "timed out", "invalid lock request",
// "lock service error".
func LogError(r *http.Request, keys []string, err error) {
	attrs := []slog.Attr{
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Any("keys", keys),
		slog.String("cause", failureCause(err)),
	}
	if nodes := failedNodes(err); nodes != nil {
		attrs = append(attrs, slog.Any("nodes", nodes))
	}
	attrs = append(attrs, slog.String("error", redact.URLs(err.Error())))
	slog.Default().LogAttrs(r.Context(), slog.LevelError, "httplock: lock service failed", attrs...)
}

// failureCause is err in a few words, for LogError.
func failureCause(err error) string {
	switch {
	case errors.Is(err, ErrMisconfigured):
		return "misconfigured"
	case errors.Is(err, redlock.ErrLockLost):
		return "lock lost"
	case errors.Is(err, redlock.ErrUnavailable):
		return "lock service unavailable"
	case errors.Is(err, redlock.ErrNotHeld):
		return "lock expired before its release"
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.Is(err, redlock.ErrInvalid):
		return "invalid lock request"
	default:
		return "lock service error"
	}
}

// failedNodes lists, for the first redlock.QuorumError in err, each node
// that did not agree and what it said, secrets masked; nil when err has
// no QuorumError.
func failedNodes(err error) []string {
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) {
		return nil
	}
	nodes := make([]string, len(qe.Failed))
	for i, f := range qe.Failed {
		nodes[i] = redact.URLs(f.Node) + ": " + redact.URLs(errorText(f.Err))
	}
	return nodes
}

func errorText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
