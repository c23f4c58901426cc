-- Compare-and-delete: remove the lock only if it still holds our token, so a
-- holder whose lock expired can never delete the next holder's lock.
-- KEYS[1] lock key, ARGV[1] token. Returns 1 if deleted, 0 otherwise.
if redis.call("get", KEYS[1]) == ARGV[1] then
	return redis.call("del", KEYS[1])
end
return 0
