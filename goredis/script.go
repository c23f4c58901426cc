package goredis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"

	"github.com/quorumlock/redlock"

	"github.com/redis/go-redis/v9"
)

// script is a Lua script embedded in the binary. A node runs it by its SHA1
// (EVALSHA), so the source crosses the wire only the first time a node
// does not know it: after its start, a restart or SCRIPT FLUSH, the
// NOSCRIPT reply is answered with one EVAL, which also caches it there.
type script struct {
	src, sha string
	id       uint8 // its bit in wire.known
}

// scripts counts the scripts made, to give each its id.
var scripts uint8

var (
	releaseScript       = newScript(redlock.Lua.Release)
	extendScript        = newScript(redlock.Lua.Extend)
	acquireFencedScript = newScript(redlock.Lua.AcquireFenced)
	raiseFenceScript    = newScript(redlock.Lua.RaiseFence)

	acquireManyScript       = newScript(redlock.Lua.AcquireMany)
	acquireManyFencedScript = newScript(redlock.Lua.AcquireManyFenced)
	raiseFencesScript       = newScript(redlock.Lua.RaiseFences)
	releaseManyScript       = newScript(redlock.Lua.ReleaseMany)
	extendManyScript        = newScript(redlock.Lua.ExtendMany)
)

func newScript(src string) script {
	sum := sha1.Sum([]byte(src))
	scripts++
	if scripts > 32 {
		panic("goredis: more scripts than wire.known has bits")
	}
	return script{src: src, sha: hex.EncodeToString(sum[:]), id: scripts - 1}
}

// run executes s on the node with the given keys and arguments, laid out
// as EVALSHA's arguments after the script: numkeys, keys..., args... It
// returns the script's integer reply.
func (g *node) run(ctx context.Context, s script, numKeys int, keysAndArgs ...any) (int64, error) {
	n, _, err := g.exec(ctx, false, s, numKeys, keysAndArgs...)
	return n, err
}

// exec is run for a write that a node WithReplicaAck follows with WAIT
// when acked is set (see send): it also returns the WAIT, nil without.
func (g *node) exec(ctx context.Context, acked bool, s script, numKeys int, keysAndArgs ...any) (int64, *redis.IntCmd, error) {
	cmd, wait, err := g.eval(ctx, acked, s, numKeys, keysAndArgs...)
	if err != nil { // cmd may still be in flight: read nothing from it
		return 0, nil, err
	}
	n, err := cmd.Int64()
	return n, wait, err
}

// eval is exec returning the script's reply as it came, for a script that
// replies with more than an integer.
func (g *node) eval(ctx context.Context, acked bool, s script, numKeys int, keysAndArgs ...any) (*redis.Cmd, *redis.IntCmd, error) {
	args := make([]any, 0, 3+len(keysAndArgs))
	args = append(args, "evalsha", s.sha, numKeys)
	args = append(args, keysAndArgs...)
	var key string // the first key: the one an acked write is routed by
	if numKeys > 0 {
		key, _ = keysAndArgs[0].(string)
	}
	cmd := redis.NewCmd(ctx, args...)
	wait, err := g.send(ctx, acked, key, cmd)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// NOSCRIPT means the node ran nothing: sending EVAL is no resend.
		args[0], args[1] = "eval", s.src
		cmd = redis.NewCmd(ctx, args...)
		wait, err = g.send(ctx, acked, key, cmd)
	}
	if err != nil { // cmd may still be in flight: read nothing from it
		return nil, nil, err
	}
	return cmd, wait, nil
}
