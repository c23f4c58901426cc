-- Compare-and-delete: remove the lock only if it still holds our token, so a
-- holder whose lock expired can never delete the next holder's lock. On
-- deletion, announce it on the key's release channel ("redlock:released:"
-- followed by the key, see ReleaseChannel) so waiters retry at once instead
-- of sleeping out their backoff. KEYS[1] lock key, ARGV[1] token.
-- Returns 1 if deleted, 0 otherwise.
if redis.call("get", KEYS[1]) == ARGV[1] then
	redis.call("del", KEYS[1])
	redis.call("publish", "redlock:released:" .. KEYS[1], "")
	return 1
end
return 0
