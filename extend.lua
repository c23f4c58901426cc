-- Compare-and-pexpire: push the expiry of our lock out to ARGV[2] ms from
-- now, only if it still holds our token. A lock that expired is never
-- re-created here. KEYS[1] lock key; ARGV[1] token, ARGV[2] TTL in ms.
-- A fenced lock adds KEYS[2], its fence counter, and ARGV[3], the fence
-- lifetime in ms: a counter that exists lives at least that long from
-- now, so a fenced lock renewed past the lifetime keeps its counter (and
-- an election its term). Returns 1 if extended, 0 otherwise.
if redis.call("get", KEYS[1]) ~= ARGV[1] then
	return 0
end
if KEYS[2] and redis.call("pttl", KEYS[2]) < tonumber(ARGV[3]) then
	redis.call("pexpire", KEYS[2], ARGV[3])
end
return redis.call("pexpire", KEYS[1], ARGV[2])
