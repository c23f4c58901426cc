package envconfig

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDotEnvParse(t *testing.T) {
	const file = `# config/production.env
LOCK_DISTRIBUTED_ENABLED=true

  export LOCK_DISTRIBUTED_STRATEGY=retry   # trailing comment
LOCK_DISTRIBUTED_TTL = 10
LOCK_DISTRIBUTED_NODES="redis://127.0.0.1:7001, redis://127.0.0.1:7002"
SINGLE='literal # not a comment \n $HOME'
DOUBLE="a \"quoted\" line\nnext\\ \x"  # comment
HASH=abc#def
EMPTY=
EMPTY_QUOTED=""
export=not the export keyword
CRLF=value` + "\r" + `
LOCK_DISTRIBUTED_TTL=20
`
	got, err := ParseDotEnv(strings.NewReader(file))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		"LOCK_DISTRIBUTED_ENABLED":  "true",
		"LOCK_DISTRIBUTED_STRATEGY": "retry",
		"LOCK_DISTRIBUTED_TTL":      "20", // the later line wins
		"LOCK_DISTRIBUTED_NODES":    "redis://127.0.0.1:7001, redis://127.0.0.1:7002",
		"SINGLE":                    `literal # not a comment \n $HOME`,
		"DOUBLE":                    "a \"quoted\" line\nnext\\ \\x",
		"HASH":                      "abc#def",
		"EMPTY":                     "",
		"EMPTY_QUOTED":              "",
		"export":                    "not the export keyword",
		"CRLF":                      "value",
	}, got)
}

func TestDotEnvMalformed(t *testing.T) {
	tests := map[string]string{
		"no equals":          "A=1\nJUSTTEXT\n",
		"empty key":          "A=1\n=value\n",
		"key with dash":      "A=1\nLOCK-TTL=1\n",
		"key with digit":     "A=1\n1A=1\n",
		"unterminated ''":    "A=1\nB='abc\n",
		"unterminated \"\"":  "A=1\nB=\"abc\n",
		"backslash at end":   "A=1\nB=\"abc\\\n",
		"text after quote":   "A=1\nB=\"abc\" def\n",
		"export without key": "A=1\nexport \n",
	}
	for name, file := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseDotEnv(strings.NewReader(file))
			require.Error(t, err)
			assert.ErrorIs(t, err, redlock.ErrInvalid)
			assert.Contains(t, err.Error(), "line 2")
		})
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

// Real environment variables override the .env files, and an earlier file
// overrides a later one; what nobody sets takes its default.
func TestDotEnvPrecedence(t *testing.T) {
	first := writeFile(t, "first.env", "LOCK_DISTRIBUTED_TTL=20\nLOCK_DISTRIBUTED_RETRY=5\nLOCK_DISTRIBUTED_STRATEGY=reject\n")
	second := writeFile(t, "second.env", "LOCK_DISTRIBUTED_TTL=30\nLOCK_DISTRIBUTED_RETRY_DELAY=50\nLOCK_DISTRIBUTED_RETRY=9\n")
	t.Setenv(VarRetry, "7")
	t.Setenv(VarStrategy, "") // set but empty: counts as unset, the file decides
	t.Setenv(VarTTL, "  ")

	lookup, err := Lookup(first, second)
	require.NoError(t, err)
	c, err := Load(lookup)
	require.NoError(t, err)
	assert.Equal(t, 7, c.Retries, "the environment wins over both files")
	assert.Equal(t, StrategyReject, c.Strategy, "an empty environment variable does not hide the file")
	assert.Equal(t, 20*1e9, float64(c.TTL), "the first file wins over the second")
	assert.Equal(t, 50*1e6, float64(c.RetryDelay), "the second file fills what the first does not set")
	assert.False(t, c.Enabled, "defaults remain for what nobody sets")

	t.Setenv(VarTTL, "3")
	c, err = Load(lookup)
	require.NoError(t, err)
	assert.Equal(t, 3*1e9, float64(c.TTL), "the environment is read at lookup time")
}

func TestDotEnvErrors(t *testing.T) {
	_, err := Lookup(filepath.Join(t.TempDir(), "missing.env"))
	assert.ErrorIs(t, err, fs.ErrNotExist)

	bad := writeFile(t, "bad.env", "# ok\nLOCK_DISTRIBUTED_TTL\n")
	_, err = Lookup(bad)
	assert.ErrorIs(t, err, redlock.ErrInvalid)
	assert.Contains(t, err.Error(), bad)
	assert.Contains(t, err.Error(), "line 2")

	// A malformed value in a file is reported like one in the environment.
	malformed := writeFile(t, "malformed.env", "LOCK_DISTRIBUTED_TTL=ten\n")
	_, _, err = Open(malformed)
	var ee *Error
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, VarTTL, ee.Var)
	assert.Equal(t, "ten", ee.Value)
}

func TestDotEnvOpen(t *testing.T) {
	srv := miniredis.RunT(t)
	p := writeFile(t, ".env", "export LOCK_DISTRIBUTED_ENABLED=true\nLOCK_DISTRIBUTED_STRATEGY=reject\nLOCK_DISTRIBUTED_NODES=redis://"+srv.Addr()+"\n")
	l, closer, err := Open(p)
	require.NoError(t, err)
	defer closer.Close()
	lk, err := l.Lock(t.Context(), "k")
	require.NoError(t, err)
	_, err = l.Lock(t.Context(), "k")
	assert.ErrorIs(t, err, redlock.ErrNotAcquired, "enabled by the file: a real lock on the file's node")
	require.NoError(t, lk.Unlock(t.Context()))

	t.Setenv(VarEnabled, "false")
	l, closer2, err := Open(p)
	require.NoError(t, err)
	defer closer2.Close()
	a, err := l.Lock(t.Context(), "k")
	require.NoError(t, err)
	b, err := l.Lock(t.Context(), "k")
	require.NoError(t, err, "disabled by the environment over the file")
	require.NoError(t, a.Unlock(t.Context()))
	require.NoError(t, b.Unlock(t.Context()))
}

// A malformed .env line may hold a password: the error gives its line
// number and what is wrong, never its text.
func TestDotEnvErrorsHidePasswords(t *testing.T) {
	tests := map[string]string{
		"no equals":          "A=1\nredis://:pa55/w0rd@10.0.0.1:6379\n",
		"bad key":            "A=1\nredis://:pa55/w0rd@10.0.0.1:6379/0?db=1\n",
		"key with blank":     "A=1\nLOCK PASSWORD pa55/w0rd=1\n",
		"text after quote":   "A=1\nLOCK_DISTRIBUTED_NODES=\"redis://:pa55\"/w0rd@10.0.0.1:6379\n",
		"text after quote 2": "A=1\nREDIS_PASSWORD='x'pa55/w0rd\n",
		"unterminated":       "A=1\nREDIS_PASSWORD=\"pa55/w0rd\n",
	}
	for name, file := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseDotEnv(strings.NewReader(file))
			require.ErrorIs(t, err, redlock.ErrInvalid)
			assert.Contains(t, err.Error(), "line 2")
			assertNoSecret(t, err)

			p := writeFile(t, "secret.env", file)
			_, err = Lookup(p)
			require.ErrorIs(t, err, redlock.ErrInvalid)
			assert.Contains(t, err.Error(), p)
			assertNoSecret(t, err)
		})
	}
}
