package envconfig

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
)

// Clients are what Config.Open made for a Config's nodes: the Redis
// clients, to close when the application stops, and what it takes to
// check that the nodes answer (Ping). Printing Clients (String, any fmt
// verb, slog) shows the Config, its secrets masked, and so says when
// locking is disabled.
type Clients struct {
	cfg     Config // as opened; printed masked only
	nodes   []Node // parsed, with their credentials
	closers []io.Closer

	once sync.Once
	err  error
}

// Close closes every client Open made, once: later calls return the
// first call's result. Closing Clients of a disabled Config, or nil
// Clients, does nothing.
func (c *Clients) Close() error {
	if c == nil {
		return nil
	}
	c.once.Do(func() { c.err = closeAll(c.closers) })
	return c.err
}

// Disabled reports whether the Config was not Enabled: the Locker Open
// returned with these Clients grants every lock at once, without Redis and
// without mutual exclusion.
func (c *Clients) Disabled() bool { return c == nil || !c.cfg.Enabled }

// String is the Config's String, secrets masked: it starts with "enabled:",
// or with Disabled.
func (c *Clients) String() string {
	if c == nil {
		return "<nil>"
	}
	return c.cfg.String()
}

// Format implements fmt.Formatter: every verb formats the Config (see
// Config.Format), %#v inside envconfig.Clients{...}, so that no verb
// prints a client's options and their passwords.
func (c *Clients) Format(f fmt.State, verb rune) {
	if c == nil {
		io.WriteString(f, "<nil>")
		return
	}
	if verb == 'v' && f.Flag('#') {
		io.WriteString(f, "&envconfig.Clients{Config:"+c.cfg.GoString()+"}")
		return
	}
	c.cfg.Format(f, verb)
}

// LogValue implements slog.LogValuer: the Config's LogValue, secrets
// masked.
func (c *Clients) LogValue() slog.Value {
	if c == nil {
		return slog.StringValue("<nil>")
	}
	return c.cfg.LogValue()
}
