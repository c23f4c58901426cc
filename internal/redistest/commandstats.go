package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// CommandStat is one command's line of INFO commandstats: how many times
// the server ran it, the calls of scripts included, and the server time
// those runs took in all, in µs.
type CommandStat struct {
	Calls int64
	Usec  int64
}

// CommandStats returns the server's INFO commandstats by command name, in
// lower case, a subcommand as "client|setinfo". A command the server has
// not run since its start (or CONFIG RESETSTAT) is absent.
func CommandStats(t testing.TB, c *redis.Client) map[string]CommandStat {
	t.Helper()
	info, err := c.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatalf("redistest: INFO commandstats on %s: %v", c.Options().Addr, err)
	}
	stats, err := parseCommandStats(info)
	if err != nil {
		t.Fatalf("redistest: INFO commandstats on %s: %v", c.Options().Addr, err)
	}
	return stats
}

// Calls returns how many times the server ran command (lower case),
// scripts' calls included: CommandStats(t, c)[command].Calls.
func Calls(t testing.TB, c *redis.Client, command string) int {
	t.Helper()
	return int(CommandStats(t, c)[command].Calls)
}

// parseCommandStats reads the lines "cmdstat_<name>:calls=<n>,usec=<n>,…"
// of an INFO commandstats reply; other lines are ignored.
func parseCommandStats(info string) (map[string]CommandStat, error) {
	stats := map[string]CommandStat{}
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			return nil, fmt.Errorf("no fields in %q", line)
		}
		var s CommandStat
		for f := range strings.SplitSeq(fields, ",") {
			key, value, _ := strings.Cut(f, "=")
			var dst *int64
			switch key {
			case "calls":
				dst = &s.Calls
			case "usec":
				dst = &s.Usec
			default:
				continue
			}
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s of %s in %q: %w", key, name, line, err)
			}
			*dst = n
		}
		stats[name] = s
	}
	return stats, nil
}
