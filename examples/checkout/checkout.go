package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/httplock"
)

// project is the {project} part of every lock key this service takes:
// rf:lock:checkout:order:{id}:write.
const project = "checkout"

// chargeFunc takes the money for an order: the payment gateway call of a
// real service. It must honour ctx: when the lock on the order is lost,
// ctx is cancelled and the charge must not go through.
type chargeFunc func(ctx context.Context, orderID string, amount int64) error

// newHandler returns the service's routes on a mux the caller may add
// more to:
//
//	POST /orders/{id}/checkout  {"amount": 1500}  charge the order, once
//	GET  /orders/{id}                             is it paid, by whom?
//
// The checkout is a POST, as in the seed, but it acts on an existing
// order, so unlike an insert it must lock: the route's middleware locks
// POST (httplock.WithMethods), with a fencing token (redlock.WithFencing)
// that every database write of the checkout carries (see store). Two
// checkouts of one order at once get one 200 and one 409, whichever
// instance of the service they reach; checkouts of different orders run
// in parallel. A checkout of an order that is already paid answers 200
// with status "already_paid" and charges nothing.
//
// instance names this process in the ledger (orders.charged_by,
// ledger.instance).
func newHandler(locker redlock.Locker, st *store, charge chargeFunc, instance string) (*http.ServeMux, error) {
	mw, err := httplock.New(locker, httplock.PathRecord(project, "order", "id"),
		httplock.WithMethods(http.MethodPost), httplock.WithLockOptions(redlock.WithFencing()))
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}/checkout", mw.Wrap(checkout(st, charge, instance)))
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		o, _, err := st.get(r.Context(), r.PathValue("id"))
		if err != nil {
			reply(w, http.StatusInternalServerError, map[string]any{"error": "the database is unavailable"})
			return
		}
		reply(w, http.StatusOK, map[string]any{"order_id": o.ID, "paid": o.paid(), "amount": o.Amount,
			"charged_by": o.ChargedBy, "fence": o.Fence})
	})
	return mux, nil
}

// checkout runs inside the order's lock. Its writes carry the lock's
// fencing token: claim raises the order's token to ours before the
// payment, and the charge is recorded only if no later holder has claimed
// the order since (store.charge). A checkout whose lock was taken over
// while it was paying (it paused past its validity, a Redis master lost
// the key) is refused by the database and answers 409 with status
// "stale"; a real service would void the payment there.
func checkout(st *store, charge chargeFunc, instance string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, id := r.Context(), r.PathValue("id")
		var body struct {
			Amount int64 `json:"amount"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<10)).Decode(&body); err != nil {
			reply(w, http.StatusBadRequest, map[string]any{"error": "want a JSON body {\"amount\": n}"})
			return
		}
		if body.Amount <= 0 {
			reply(w, http.StatusUnprocessableEntity, map[string]any{"error": "amount must be positive"})
			return
		}
		var fence int64 // the token of the lock the middleware's Do holds
		if l, ok := redlock.FromContext(ctx); ok {
			fence = l.Fence()
		}
		if fence <= 0 { // fail closed: never write without a token
			reply(w, http.StatusInternalServerError, map[string]any{"error": "the order lock carries no fencing token"})
			return
		}
		o, err := st.claim(ctx, id, fence)
		if err != nil {
			refuse(w, ctx, id, fence, err)
			return
		}
		if o.paid() {
			reply(w, http.StatusOK, map[string]any{"status": "already_paid", "order_id": id, "amount": o.Amount})
			return
		}
		if err := charge(ctx, id, body.Amount); err != nil {
			if !lockLost(ctx) { // lost: the middleware answers 500, nothing was recorded
				reply(w, http.StatusUnprocessableEntity, map[string]any{"error": fmt.Sprintf("payment failed: %v", err)})
			}
			return
		}
		if err := st.charge(ctx, id, fence, instance, body.Amount); err != nil {
			refuse(w, ctx, id, fence, err)
			return
		}
		reply(w, http.StatusOK, map[string]any{"status": "success", "order_id": id, "amount": body.Amount, "fence": fence})
	}
}

// refuse answers a checkout whose database write failed: 409 "stale" when
// a later lock holder has written the order, nothing when the lock was
// lost (the middleware answers 500), else 500.
func refuse(w http.ResponseWriter, ctx context.Context, id string, fence int64, err error) {
	switch {
	case errors.Is(err, errStale):
		reply(w, http.StatusConflict, map[string]any{"status": "stale", "order_id": id, "fence": fence, "error": err.Error()})
	case lockLost(ctx):
	default:
		reply(w, http.StatusInternalServerError, map[string]any{"error": "the database is unavailable"})
	}
}

// lockLost reports whether ctx ended because the request's lock was lost.
func lockLost(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), redlock.ErrLockLost)
}

func reply(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
