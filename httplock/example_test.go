package httplock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/envconfig"
	"github.com/quorumlock/redlock/httplock"
)

// Updates and deletes of one supplier take turns across workers; other
// suppliers, and reads, are not held up.
func Example() {
	srv := miniredis.NewMiniRedis() // stands in for a real Redis master
	if err := srv.Start(); err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	// In a service: locker, closer, err := envconfig.Open(".env")
	cfg := envconfig.Config{Enabled: true, Strategy: envconfig.StrategyReject, TTL: envconfig.DefaultTTL,
		Nodes: []string{"redis://" + srv.Addr()}}
	locker, closer, err := cfg.Open()
	if err != nil {
		log.Fatal(err)
	}
	defer closer.Close()

	mw, err := httplock.New(locker, httplock.PathRecord("mini-inventory", "supplier", "id"))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/suppliers/{id}", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, r.Method, "supplier", r.PathValue("id")) // r.Context() ends if the lock is lost
	})))

	// Another worker is updating supplier abc right now.
	ctx := context.Background()
	key, _ := httplock.KeySpace{}.Write("mini-inventory", "supplier", "abc")
	other, _ := locker.Lock(ctx, key)

	send := func(method, path string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		fmt.Print(rec.Code, " ", rec.Body.String())
	}
	send(http.MethodPut, "/suppliers/abc")
	send(http.MethodPut, "/suppliers/xyz")
	send(http.MethodGet, "/suppliers/abc")
	other.Unlock(ctx)
	send(http.MethodDelete, "/suppliers/abc")
	// Output:
	// 409 {"error":"the record is being processed by another request; try again later"}
	// 200 PUT supplier xyz
	// 200 GET supplier abc
	// 200 DELETE supplier abc
}

func ExampleKeySpace_Write() {
	key, err := httplock.KeySpace{}.Write("mini-inventory", "supplier", "550e8400-e29b-41d4-a716-446655440000")
	fmt.Println(key, err)
	_, err = httplock.KeySpace{}.Write("mini-inventory", "supplier", "abc:write")
	fmt.Println(errors.Is(err, redlock.ErrInvalid))
	key, _ = httplock.KeySpace{Namespace: "shop:locks"}.Write("shop", "order", "42")
	fmt.Println(key)
	// Output:
	// rf:lock:mini-inventory:supplier:550e8400-e29b-41d4-a716-446655440000:write <nil>
	// true
	// shop:locks:shop:order:42:write
}
