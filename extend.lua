-- Compare-and-pexpire: push the expiry of our lock out to ARGV[2] ms from
-- now, only if it still holds our token. A lock that expired is never
-- re-created here. KEYS[1] lock key, ARGV[1] token, ARGV[2] TTL in ms.
-- Returns 1 if extended, 0 otherwise.
if redis.call("get", KEYS[1]) == ARGV[1] then
	return redis.call("pexpire", KEYS[1], ARGV[2])
end
return 0
