-- Compare-and-delete: remove the lock only if it still holds our token, so a
-- holder whose lock expired can never delete the next holder's lock.
-- KEYS[1] lock key, ARGV[1] token, ARGV[2] "1" to announce the release
-- with PUBLISH, "2" with SPUBLISH (sharded pub/sub, Redis 7.0: a Redis
-- Cluster node, where a PUBLISH would reach every shard), anything else
-- not to announce it. Returns 1 if deleted, 0 otherwise.
--
-- Announcing publishes the token on the key's release channel
-- ("redlock:released:" followed by the key, see ReleaseChannel) so waiters
-- retry at once instead of sleeping out their backoff; a waiter ignores
-- announcements of its own tokens (the rollback of its failed attempt).
-- On a cluster the channel must hash to KEYS[1]'s slot (a key with a hash
-- tag: the channel has the same tag), or SPUBLISH is refused.
-- The announcement is best effort: a PUBLISH that fails (an ACL without
-- +publish, SPUBLISH before Redis 7.0) must not turn a done deletion into
-- an error, hence pcall.
if redis.call("get", KEYS[1]) == ARGV[1] then
	redis.call("del", KEYS[1])
	if ARGV[2] == "1" then
		redis.pcall("publish", "redlock:released:" .. KEYS[1], ARGV[1])
	elseif ARGV[2] == "2" then
		redis.pcall("spublish", "redlock:released:" .. KEYS[1], ARGV[1])
	end
	return 1
end
return 0
