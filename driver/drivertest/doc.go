// Package drivertest is the conformance suite of package driver, in the
// manner of testing/fstest: the author of an adapter (a Redis client as a
// driver.Node) proves it with one call from the adapter's tests.
//
//	func TestConformance(t *testing.T) {
//		srv := miniredis.RunT(t) // or a real server shared by every subtest
//		drivertest.Run(t, func(t *testing.T) drivertest.Target {
//			c := myclient.New(srv.Addr())
//			t.Cleanup(func() { c.Close() })
//			return drivertest.Target{Node: myadapter.New(c), Elapse: srv.FastForward}
//		})
//	}
//
// It checks the contract's rules, each in a subtest that names the rule
// it found broken:
//
//   - Info: a name, the same on every call.
//   - Replies: integers, strings, nil, nested arrays and status replies
//     converted as the contract says; an error reply is an error carrying
//     the node's text.
//   - NoScript: a script the node has never seen runs once (EVALSHA, then
//     EVAL on NOSCRIPT).
//   - Atomic: concurrent scripts never see another's writes half done.
//   - Cancelled: a call whose context is done sends nothing.
//   - Stalled (with Target.Stall): on a node that does not answer, calls
//     return by their deadline, alone and several at once, and none runs
//     twice; the node works again once it answers.
//   - Subscribe (for a driver.Subscriber): a message published once
//     Subscribe returned reaches every subscriber of its channel, and
//     none arrives after stop returned.
//
// Then it runs every primitive of the core over the node, through package
// redlock: the mutex (refusal, extension, expiry, a late holder's Unlock),
// fencing tokens, sets of keys, read-write locks, a semaphore, an
// election, fair locks and, for a Subscriber, the hand-off that wakes a
// waiter. When the function given to Run returns three nodes of distinct
// names, the primitives run over a Redlock of the three as well.
//
// The suite uses keys of its own, with one hash tag per subtest (so a
// Redis Cluster node holds them), and leaves only keys that expire. It
// takes about three seconds against a local redis-server or miniredis;
// the expiry check sleeps without Target.Elapse.
package drivertest
