package redistest

import (
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// OtherClients returns the connections the server behind admin has open,
// admin's own excepted, one CLIENT LIST line each.
func OtherClients(t testing.TB, admin *redis.Client) []string {
	t.Helper()
	ctx := t.Context()
	id, err := admin.ClientID(ctx).Result()
	if err != nil {
		t.Fatalf("CLIENT ID: %v", err)
	}
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	own := "id=" + strconv.FormatInt(id, 10) + " "
	var others []string
	for line := range strings.Lines(list) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, own) {
			others = append(others, line)
		}
	}
	return others
}
