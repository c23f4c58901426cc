package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for postgres:// URLs
	_ "modernc.org/sqlite"             // database/sql driver "sqlite", pure Go (no cgo)
)

// store is the service's database, shared by every instance: the orders
// and the ledger of charges. One code path serves SQLite and PostgreSQL:
// both drivers take $1-style placeholders and both databases understand
// every statement below.
//
// # The fencing rule
//
// orders.fence is the highest fencing token that has written the order.
// Every write a lock holder makes carries its token (redlock.WithFencing)
// and is conditioned on it in the same statement:
//
//   - claim, at the start of the critical section, raises orders.fence to
//     the holder's token, and is refused when the order already carries a
//     higher one;
//   - charge marks the order charged and appends its ledger row, in one
//     transaction whose UPDATE matches only while orders.fence is still at
//     most the holder's token and the order is not charged.
//
// A holder that lost its lock without knowing (it paused past its
// validity, a master forgot the key) has a lower token than the next
// holder, whose claim has already raised orders.fence: its charge matches
// no row and nothing is written (errStale). And since the UPDATE also
// requires charged_by IS NULL, a second charge of one order matches no row
// either, whatever the locks did.
type store struct {
	db     *sql.DB
	driver string // "sqlite" or "pgx"
}

// errStale is returned by claim and charge when the order carries a
// fencing token higher than the caller's: a later lock holder has written
// it, so the caller's lock is gone and it must write nothing.
var errStale = errors.New("stale fencing token: a later checkout of this order holds it now")

// order is one row of orders.
type order struct {
	ID        string
	Amount    int64  // what was charged; 0 until charged
	ChargedBy string // the instance that charged it; "" until charged
	Fence     int64  // the highest fencing token that has written it
}

func (o order) paid() bool { return o.ChargedBy != "" }

// openStore opens the database that dsn names and creates the tables if
// they are missing:
//
//	postgres://user:pass@host:5432/db?sslmode=disable   PostgreSQL (also postgresql://)
//	sqlite:checkout.db                                  SQLite file
//	checkout.db                                         SQLite file, without the prefix
//
// A SQLite file may be shared by instances on one machine: it is opened in
// WAL mode with a busy timeout, and every transaction takes the write lock
// when it begins (BEGIN IMMEDIATE), so concurrent writers wait for each
// other instead of failing.
func openStore(ctx context.Context, dsn string) (*store, error) {
	s := &store{}
	var source string
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		s.driver, source = "pgx", dsn
	default:
		path := strings.TrimPrefix(dsn, "sqlite:")
		if path == "" || strings.ContainsAny(path, "?#") {
			return nil, fmt.Errorf("checkout: database %q: want postgres://... or a SQLite file path without '?' or '#'", dsn)
		}
		s.driver = "sqlite"
		source = path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_txlock=immediate"
	}
	db, err := sql.Open(s.driver, source)
	if err != nil {
		return nil, fmt.Errorf("checkout: opening the database: %w", err)
	}
	db.SetMaxOpenConns(8)
	s.db = db
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

func (s *store) Close() error { return s.db.Close() }

// migrate creates the tables, once however many instances start together:
// in one transaction that, on PostgreSQL, first takes an advisory lock
// (concurrent CREATE TABLE IF NOT EXISTS can fail there) and, on SQLite,
// holds the write lock from BEGIN.
func (s *store) migrate(ctx context.Context) error {
	at := "TIMESTAMP"
	if s.driver == "pgx" {
		at = "TIMESTAMPTZ"
	}
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS orders (
			id         TEXT PRIMARY KEY,
			amount     BIGINT NOT NULL DEFAULT 0,
			charged_by TEXT,
			fence      BIGINT NOT NULL DEFAULT 0
		)`,
		// No UNIQUE (order_id): one row per order is the fenced charge's
		// doing, and the audit query (README) checks it.
		`CREATE TABLE IF NOT EXISTS ledger (
			order_id TEXT NOT NULL REFERENCES orders (id),
			fence    BIGINT NOT NULL,
			instance TEXT NOT NULL,
			amount   BIGINT NOT NULL,
			at       ` + at + ` NOT NULL DEFAULT CURRENT_TIMESTAMP,
			PRIMARY KEY (order_id, fence)
		)`,
	}
	if s.driver == "pgx" {
		stmts = append([]string{`SELECT pg_advisory_xact_lock(7215)`}, stmts...)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		for _, q := range stmts {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("checkout: creating the tables: %w", err)
			}
		}
		return nil
	})
}

// claim raises the order's fence to the caller's token, creating the order
// if it does not exist, and returns the order. It returns errStale, and
// writes nothing, when the order already carries a token at least as high.
func (s *store) claim(ctx context.Context, id string, fence int64) (order, error) {
	o := order{ID: id, Fence: fence}
	var chargedBy sql.NullString
	err := s.db.QueryRowContext(ctx, `
		INSERT INTO orders (id, fence) VALUES ($1, $2)
		ON CONFLICT (id) DO UPDATE SET fence = excluded.fence WHERE orders.fence < excluded.fence
		RETURNING amount, charged_by`, id, fence).Scan(&o.Amount, &chargedBy)
	if errors.Is(err, sql.ErrNoRows) {
		return order{}, errStale
	}
	if err != nil {
		return order{}, fmt.Errorf("checkout: claiming order %s: %w", id, err)
	}
	o.ChargedBy = chargedBy.String
	return o, nil
}

// charge records that instance charged amount for the order under the
// fencing token fence: the order is marked charged and one ledger row is
// appended, in one transaction, only if no later holder has written the
// order and nobody charged it. Otherwise it writes nothing and returns
// errStale.
func (s *store) charge(ctx context.Context, id string, fence int64, instance string, amount int64) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
			UPDATE orders SET charged_by = $1, amount = $2, fence = $3
			WHERE id = $4 AND fence <= $3 AND charged_by IS NULL`, instance, amount, fence, id)
		if err != nil {
			return fmt.Errorf("checkout: charging order %s: %w", id, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("checkout: charging order %s: %w", id, err)
		} else if n != 1 {
			return errStale
		}
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO ledger (order_id, fence, instance, amount) VALUES ($1, $2, $3, $4)`,
			id, fence, instance, amount); err != nil {
			return fmt.Errorf("checkout: ledger row for order %s: %w", id, err)
		}
		return nil
	})
}

// get returns the order, and false when there is none.
func (s *store) get(ctx context.Context, id string) (order, bool, error) {
	o := order{ID: id}
	var chargedBy sql.NullString
	err := s.db.QueryRowContext(ctx, `SELECT amount, charged_by, fence FROM orders WHERE id = $1`, id).
		Scan(&o.Amount, &chargedBy, &o.Fence)
	if errors.Is(err, sql.ErrNoRows) {
		return order{ID: id}, false, nil
	}
	if err != nil {
		return order{}, false, fmt.Errorf("checkout: reading order %s: %w", id, err)
	}
	o.ChargedBy = chargedBy.String
	return o, true, nil
}

// inTx runs fn in a transaction, committed when fn returns nil.
func (s *store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("checkout: %w", err)
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, ignoreDone(tx.Rollback()))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("checkout: commit: %w", err)
	}
	return nil
}

// ignoreDone drops the error Rollback returns when the transaction already
// ended (its context was cancelled).
func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}
