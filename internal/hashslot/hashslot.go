// Package hashslot holds Redis Cluster's hash-slot rules as the core
// applies them to a lock: the lock key and every name derived from it
// (its fence counter, queue, readers, release channel) must share one hash
// slot, so that the scripts run on one master and SPUBLISH reaches the
// key's shard. The adapters use Of to open one sharded subscription per
// slot.
package hashslot

import (
	"errors"
	"fmt"
	"strings"
)

// ErrKey is matched by every refusal of Key and Keys.
var ErrKey = errors.New("key cannot be mapped to one hash slot")

// Key maps a lock key to the key a cluster node uses, so that the key,
// its fence counter and its release channel hash to one slot:
//
//   - a key with a hash tag is used as it is: the other two names share
//     its tag;
//   - a key without one is wrapped in one: "order:42" becomes
//     "{order:42}";
//   - a key whose first "{" is followed at once by "}" (an empty tag, with
//     which Redis hashes the whole key) is refused, as is a key without a
//     tag that starts with "}" (wrapped, its tag would be empty), and the
//     empty key.
//
// Refusals match ErrKey.
func Key(key string) (string, error) {
	if _, ok := Tag(key); ok {
		return key, nil
	}
	if i := strings.IndexByte(key, '{'); i >= 0 && strings.HasPrefix(key[i+1:], "}") {
		return "", fmt.Errorf(`%w: key %q has an empty hash tag "{}": Redis Cluster would hash the whole key, and its fence counter and release channel would land in other slots; put the tag's text between the braces, or drop them`,
			ErrKey, key)
	}
	if strings.HasPrefix(key, "}") || key == "" {
		return "", fmt.Errorf(`%w: key %q has no hash tag and starts with "}" or is empty: the tag a Redis Cluster node gives such a key ("{" + key + "}") would be empty`,
			ErrKey, key)
	}
	return "{" + key + "}", nil
}

// Keys maps a set of lock keys (LockMany) as Key maps each one, and
// refuses a set whose keys land in more than one hash slot: a script may
// touch the keys of one slot only, so the keys of a set must share a hash
// tag ("{acct}:1", "{acct}:2"). Refusals match ErrKey.
func Keys(keys []string) ([]string, error) {
	out := make([]string, len(keys))
	for i, key := range keys {
		k, err := Key(key)
		if err != nil {
			return nil, err
		}
		out[i] = k
		if i > 0 && Of(k) != Of(out[0]) {
			return nil, fmt.Errorf(`%w: keys %q and %q are in different hash slots of the cluster: a set of keys must share one, so give them one hash tag ("{acct}:1", "{acct}:2")`,
				ErrKey, keys[0], key)
		}
	}
	return out, nil
}

// Tag returns the hash tag of key by Redis Cluster's rule: the text
// between its first "{" and the first "}" after it, when that is not
// empty. ok is false when key has no tag (Redis then hashes all of it).
func Tag(key string) (tag string, ok bool) {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return "", false
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return "", false
	}
	return key[i+1 : i+1+j], true
}

// Of returns the hash slot of key: CRC16 (XMODEM) of its hash tag, or of
// the whole key without one, modulo 16384.
func Of(key string) uint16 {
	if tag, ok := Tag(key); ok {
		key = tag
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
