-- Compare-and-delete: remove the lock only if it still holds our token, so a
-- holder whose lock expired can never delete the next holder's lock.
-- KEYS[1] lock key, ARGV[1] token, ARGV[2] "1" to announce the release.
-- Returns 1 if deleted, 0 otherwise.
--
-- Announcing publishes the token on the key's release channel
-- ("redlock:released:" followed by the key, see ReleaseChannel) so waiters
-- retry at once instead of sleeping out their backoff; a waiter ignores
-- announcements of its own tokens (the rollback of its failed attempt).
-- The announcement is best effort: a PUBLISH that fails (an ACL without
-- +publish) must not turn a done deletion into an error, hence pcall.
if redis.call("get", KEYS[1]) == ARGV[1] then
	redis.call("del", KEYS[1])
	if ARGV[2] == "1" then
		redis.pcall("publish", "redlock:released:" .. KEYS[1], ARGV[1])
	end
	return 1
end
return 0
