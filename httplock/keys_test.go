package httplock_test

import (
	"testing"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/httplock"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKeySpaceWrite(t *testing.T) {
	k, err := httplock.KeySpace{}.Write("mini-inventory", "supplier", "550e8400-e29b-41d4-a716-446655440000")
	require.NoError(t, err)
	assert.Equal(t, "rf:lock:mini-inventory:supplier:550e8400-e29b-41d4-a716-446655440000:write", k)

	k, err = httplock.KeySpace{Namespace: "shop:v2:locks"}.Write("shop", "order", "42")
	require.NoError(t, err)
	assert.Equal(t, "shop:v2:locks:shop:order:42:write", k)

	k, err = httplock.KeySpace{Namespace: "x"}.Write("p", "e/with/slash", "id {1} with space")
	require.NoError(t, err)
	assert.Equal(t, "x:p:e/with/slash:id {1} with space:write", k, "only ':' is reserved")

	a, _ := httplock.KeySpace{}.Write("p", "supplier", "abc")
	b, _ := httplock.KeySpace{}.Write("p", "supplier", "xyz")
	c, _ := httplock.KeySpace{}.Write("p", "customer", "abc")
	assert.NotEqual(t, a, b, "different records, different locks")
	assert.NotEqual(t, a, c, "same id on another endpoint, different lock")
}

func TestKeySpaceRejects(t *testing.T) {
	tests := []struct {
		name                   string
		ns, project, endp, rec string
	}{
		{"empty project", "", "", "e", "1"},
		{"empty endpoint", "", "p", "", "1"},
		{"empty record", "", "p", "e", ""},
		{"colon in project", "", "a:b", "e", "1"},
		{"colon in endpoint", "", "p", "b:c", "1"},
		{"colon in record", "", "p", "e", "1:write"},
		{"namespace trailing colon", "rf:lock:", "p", "e", "1"},
		{"namespace leading colon", ":rf", "p", "e", "1"},
		{"namespace empty segment", "rf::lock", "p", "e", "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := httplock.KeySpace{Namespace: tt.ns}.Write(tt.project, tt.endp, tt.rec)
			assert.ErrorIs(t, err, redlock.ErrInvalid)
			assert.Empty(t, k)
		})
	}
}
