-- Compare-and-pexpire of a set of keys, all or nothing: when every key
-- still holds our token, push each key's expiry out to ARGV[2] ms from
-- now; when any does not (it expired, or another holder took it), change
-- nothing. A partly expired set is not held: extending the rest would
-- stretch a lock that no longer excludes. KEYS[1..n] the lock keys,
-- KEYS[n+1..2n] their fence counters; ARGV[1] token, ARGV[2] TTL in ms,
-- ARGV[3] the fence lifetime in ms (a counter that exists lives at least
-- that long from now). Returns 1 if extended, 0 otherwise.
local n = #KEYS / 2
for i = 1, n do
	if redis.call("get", KEYS[i]) ~= ARGV[1] then
		return 0
	end
end
for i = 1, n do
	redis.call("pexpire", KEYS[i], ARGV[2])
	if redis.call("pttl", KEYS[n + i]) < tonumber(ARGV[3]) then
		redis.call("pexpire", KEYS[n + i], ARGV[3])
	end
end
return 1
