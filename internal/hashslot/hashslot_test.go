package hashslot

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fenceSuffix is the adapters' fence counter suffix (key + ":fence").
const fenceSuffix = ":fence"

// TestKey: the documented mapping, key by key.
func TestKey(t *testing.T) {
	for key, want := range map[string]string{
		"order:42":         "{order:42}",    // no tag: wrapped
		"order:{42}":       "order:{42}",    // a tag: as is
		"{order:42}":       "{order:42}",    // the wrapped form is the same lock
		"{a}{}":            "{a}{}",         // only the first tag counts
		"a}{b}":            "a}{b}",         // a "}" before the first "{" is text
		"a{b":              "{a{b}",         // "{" without "}": no tag
		"a}b":              "{a}b}",         // wrapped; its tag is "a", shared by all three names
		"x}y{z":            "{x}y{z}",       // the same
		"a{ }b":            "a{ }b",         // a blank tag is a tag
		"über:{ключ}:é":    "über:{ключ}:é", // bytes, not runes
		"redlock:released": "{redlock:released}",
	} {
		got, err := Key(key)
		if assert.NoError(t, err, key) {
			assert.Equal(t, want, got, key)
		}
	}
	for _, key := range []string{"order:{}", "{}", "{}x", "a{}b{c}", "}", "}x", "}{}", ""} {
		_, err := Key(key)
		assert.ErrorIs(t, err, ErrKey, "%q", key)
	}
}

// TestOfKnownValues: slots Redis documents or computes (CLUSTER KEYSLOT);
// the adapters' tests compare Of with a live cluster too.
func TestOfKnownValues(t *testing.T) {
	for key, want := range map[string]uint16{
		"123456789": 12739, // CRC16/XMODEM's check value 0x31C3 mod 16384
		"foo":       12182,
		"{foo}bar":  12182,
		"":          0,
	} {
		assert.Equal(t, want, Of(key), "%q", key)
	}
	assert.NotEqual(t, Of("a{}b"), Of(""), "an empty tag hashes the whole key")
}

// FuzzKey: whatever the key, either it is refused as ErrKey or its
// three names share a slot; a key with a tag is never rewritten; and a
// key is refused only when its first "{" is followed by "}" or, without a
// tag, it starts with "}" or is empty.
func FuzzKey(f *testing.F) {
	for _, s := range []string{"order:42", "order:{42}", "{}", "a{}", "}x", "a{b", "a}b", "{{}}", "{}}", "x{y}z{", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		k, err := Key(key)
		_, tagged := Tag(key)
		first := strings.IndexByte(key, '{')
		emptyTag := first >= 0 && strings.HasPrefix(key[first+1:], "}")
		wantRefused := !tagged && (emptyTag || key == "" || key[0] == '}')
		if err != nil {
			if !errors.Is(err, ErrKey) || !wantRefused {
				t.Fatalf("Key(%q): %v", key, err)
			}
			return
		}
		if wantRefused {
			t.Fatalf("Key(%q) = %q, want it refused", key, k)
		}
		if tagged && k != key {
			t.Fatalf("Key(%q) = %q: a key with a tag is used as is", key, k)
		}
		if s := Of(k); Of(k+fenceSuffix) != s || Of("redlock:released:"+k) != s {
			t.Fatalf("Key(%q) = %q: slots %d, %d (fence), %d (channel)", key, k,
				s, Of(k+fenceSuffix), Of("redlock:released:"+k))
		}
	})
}

// TestKeys: a set maps key by key, and a set spread over two slots is
// refused, naming both keys.
func TestKeys(t *testing.T) {
	ks, err := Keys([]string{"{acct}:1", "{acct}:2"})
	require.NoError(t, err)
	assert.Equal(t, []string{"{acct}:1", "{acct}:2"}, ks)

	ks, err = Keys([]string{"solo"})
	require.NoError(t, err)
	assert.Equal(t, []string{"{solo}"}, ks)

	_, err = Keys([]string{"a", "b"})
	require.ErrorIs(t, err, ErrKey)
	assert.Contains(t, err.Error(), `"a" and "b"`)

	_, err = Keys([]string{"{acct}:1", "{}x"})
	require.ErrorIs(t, err, ErrKey)
}
