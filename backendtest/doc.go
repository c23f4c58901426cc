// Package backendtest is a conformance suite for redlock.Backend
// adapters, in the manner of testing/fstest: the author of an adapter for
// a Redis client, or for another store, runs it from the adapter's own
// tests to check that the adapter keeps the contract the lockers rely on
// (redlock.Backend, and the optional redlock.Fencer, redlock.Notifier,
// redlock.MultiLocker, redlock.Peeker, redlock.Starter and
// redlock.FairStarter when it
// implements them). It
// imports only the redlock package and the
// standard library, so an adapter's module inherits nothing else from it.
//
// # Running it
//
// Call Run from a test with a function that gives each subtest a node:
//
//	func TestConformance(t *testing.T) {
//		srv := miniredis.RunT(t) // or a real server shared by every subtest
//		backendtest.Run(t, func(t *testing.T) backendtest.Target {
//			c := myclient.New(srv.Addr())
//			t.Cleanup(func() { c.Close() })
//			return backendtest.Target{
//				Backend: myadapter.New(c),
//				Elapse:  srv.FastForward, // nil on a real server: the suite sleeps
//			}
//		})
//	}
//
// Run it with the race detector (go test -race): the Concurrency checks
// and the Notifier checks call the adapter from several goroutines.
//
// Target.Elapse makes expiry cost no time on a node with a fake clock; on
// real time (Elapse nil) the suite sleeps about 1.5 Target.TTL for each of
// its seven expiry checks, about 1 s in all with the default TTL of
// 100 ms. The Notifier checks wait Quiet four times and the Stall checks
// about 0.7 s, on any node: against a local redis-server the whole suite
// takes under 3 s.
// Target.Stall enables the checks on a node that stops answering: pause
// the server (SIGSTOP, then SIGCONT to resume) or put a proxy in front of
// it that holds the traffic. Without it those checks are skipped, and
// they are the ones that show that a call honours its deadline while the
// reply is awaited, the case that keeps a paused node from stalling every
// acquisition.
//
// The suite uses keys under KeyPrefix, fresh in every subtest, so one
// server may serve every subtest, and serve other tests at the same time.
// It leaves behind only keys that expire within 30 s and, when the
// adapter is a Fencer, one fence counter per key it fenced, which never
// expires by design. Subtests run one at a time.
//
// # What it checks
//
// Every check is a subtest of its own (Run's t, then the group, then the
// check) and fails with a message that names the rule broken.
//
//   - Name: non-empty and the same on every call.
//   - Acquire is SET key token NX PX ttl: it sets a free key (true);
//     refuses a held key (false, nil error), whatever the token; answers
//     false also with the token that holds the key, as a resent SET NX
//     does (the lockers rely on it); the key expires after its TTL and not
//     long before (the TTL is taken in milliseconds).
//   - Release deletes the key only while it holds the token, with or
//     without announce: a wrong token answers false and leaves the key; a
//     free, never set or expired key answers false and stays free; a
//     Release sent again after the key changed hands answers false and
//     leaves the new holder's key.
//   - Extend resets the TTL only while the key holds the token: the key
//     then outlives its first TTL; a wrong token answers false and leaves
//     the holder's TTL alone; an expired or never set key is never
//     created again.
//   - Fencer (skipped if not implemented): successive holders of a key get
//     counters that go up by one; a refused AcquireFenced is ok=false and
//     does not move the counter; the fenced key is the same key Acquire,
//     Extend and Release see; a resent AcquireFenced while the key holds
//     its token answers ok=true with the same counter and does not
//     increment it; the counter survives the key's expiry; RaiseFence
//     raises the counter only while the key holds the token (a wrong token
//     or a released key answer false and leave it alone) and never lowers
//     it; each key has a counter of its own.
//   - Notifier (skipped if not implemented): once Notify returns, a
//     Release(announce=true) calls released with the releasing token; a
//     Release(announce=false), a Release that deleted nothing and a
//     release of another key do not call it with their token (waited for
//     Quiet, a bounded negative check); after stop returns released is
//     never called again (and stop returns within PromptBound); several
//     subscribers on one key are all called, and stopping one leaves the
//     others subscribed. Calls with payloads the suite did not cause (""
//     after a reconnection) are allowed, as Notifier documents. Which pub/sub
//     channel carries the announcement is the adapter's business, not
//     checked here.
//   - MultiLocker (skipped if not implemented), on sets of keys sharing
//     one hash tag: AcquireMany sets every key or none (a set with one key
//     held elsewhere leaves no key set; an overlapping set is refused) and
//     each key then refuses Acquire; every key expires after the TTL;
//     ReleaseMany deletes exactly the keys holding its token (a wrong
//     token deletes none) and answers true only when all did, and
//     announces each key's release; ExtendMany of a set with a key gone
//     answers false, changes no other key's TTL and re-creates nothing;
//     AcquireManyFenced increments each key's own counter once (a resend
//     answers the same, a refusal moves none) and RaiseFences raises each
//     counter only with the token, never lowering one.
//   - Peeker (skipped if not implemented): Peek of a free key answers ("",
//     0) and leaves it free; of a held key, its token; with a Fencer,
//     the counter beside the token after AcquireFenced and RaiseFence,
//     and after the release (the counter outlives the key); an expired
//     key reads as free.
//   - Context: with an already cancelled context every method, including
//     AcquireFenced, RaiseFence, Peek and Notify when implemented, returns an
//     error matching context.Canceled within PromptBound (whether the
//     command was sent is not asked). With Target.Stall: on a stalled node
//     every method given a StallDeadline deadline returns, within
//     StallBound, an error matching context.DeadlineExceeded or
//     os.ErrDeadlineExceeded (a deadline set on the connection), alone and
//     with Racers concurrent callers; after resume the adapter works again
//     (acquire, release, fenced acquire, a notification).
//   - Concurrency: of Racers goroutines racing Acquire (or AcquireFenced)
//     on one free key with distinct tokens exactly one wins, and the
//     losers do not move the fence counter; of Racers goroutines racing
//     Release of one key with its token exactly one reports true.
//   - Starter (skipped if not implemented): started calls answer as the
//     calls they split (acquire, refusal, extension, release by the
//     holder only); several calls started on one goroutine before any is
//     finished answer in order; a call started with a cancelled context
//     sets nothing and its Finish returns an error matching
//     context.Canceled within PromptBound; a Finish after the call's
//     deadline returns within PromptBound, with no error or a deadline's,
//     and the next call's answer matches the key's state (no late reply
//     taken for it); of Racers goroutines starting and finishing Acquire
//     on one free key exactly one wins.
//   - FairStarter (skipped if not implemented): started AcquireFair and
//     ReleaseFair calls, several started before any is finished, answer
//     as the calls they split (the head granted, the others told how
//     many entries are ahead, a release by another token removes only
//     its entry); a call started with a cancelled context sets nothing
//     and its FinishFair returns an error matching context.Canceled.
//
// Not checked: what an adapter does with an empty key (the lockers refuse
// one before any node sees it), the exact TTL left on a key, and how long
// anything takes beyond the generous bounds above, which only tell a call
// that returns from one that hangs.
//
// # Time and goroutines
//
// A check that waits for a key set with a TTL to still be there, and
// finds it gone when more than that TTL of real time has passed (a loaded
// machine), cannot blame the adapter: it starts again on fresh keys, and
// fails only after three such attempts, telling you to raise Target.TTL.
// Every goroutine the suite starts ends before its subtest does; a call
// that does not return within its bound is reported and then waited for
// up to a minute more, after which it is abandoned (the test has failed).
package backendtest
