package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

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

// ledger remembers which orders are paid. In a real service this is the
// database, shared by every worker; the lock is what makes its
// check-then-charge-then-record sequence safe across workers.
type ledger struct {
	mu   sync.Mutex
	paid map[string]int64 // order id → amount charged
}

func (l *ledger) get(id string) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	amount, ok := l.paid[id]
	return amount, ok
}

func (l *ledger) record(id string, amount int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.paid[id] = amount
}

// newHandler returns the service's routes:
//
//	POST /orders/{id}/checkout  {"amount": 1500}  charge the order, once
//	GET  /orders/{id}                             is it paid?
//
// The checkout is a POST, as in the seed, but it acts on an existing
// order, so unlike an insert it must lock: the route's middleware locks
// POST (httplock.WithMethods). Two checkouts of one order at once get one
// 200 and one 409; checkouts of different orders run in parallel. A
// checkout of an order that is already paid answers 200 with status
// "already_paid" and charges nothing: the lock makes that check reliable,
// since no other checkout of the order can run between it and the charge.
func newHandler(locker redlock.Locker, charge chargeFunc) (http.Handler, error) {
	mw, err := httplock.New(locker, httplock.PathRecord(project, "order", "id"),
		httplock.WithMethods(http.MethodPost))
	if err != nil {
		return nil, err
	}
	l := &ledger{paid: make(map[string]int64)}
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}/checkout", mw.Wrap(checkout(l, charge)))
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		amount, paid := l.get(r.PathValue("id"))
		reply(w, http.StatusOK, map[string]any{"order_id": r.PathValue("id"), "paid": paid, "amount": amount})
	})
	return mux, nil
}

func checkout(l *ledger, charge chargeFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
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
		if amount, paid := l.get(id); paid {
			reply(w, http.StatusOK, map[string]any{"status": "already_paid", "order_id": id, "amount": amount})
			return
		}
		if err := charge(r.Context(), id, body.Amount); err != nil {
			if errors.Is(context.Cause(r.Context()), redlock.ErrLockLost) {
				// The middleware answers: nothing was written yet.
				return
			}
			reply(w, http.StatusUnprocessableEntity, map[string]any{"error": fmt.Sprintf("payment failed: %v", err)})
			return
		}
		l.record(id, body.Amount)
		reply(w, http.StatusOK, map[string]any{"status": "success", "order_id": id, "amount": body.Amount})
	}
}

func reply(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
