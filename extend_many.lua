-- Compare-and-pexpire of a set of keys, all or nothing: when every key
-- still holds our token, push each key's expiry out to ARGV[2] ms from
-- now; when any does not (it expired, or another holder took it), change
-- nothing. A partly expired set is not held: extending the rest would
-- stretch a lock that no longer excludes. KEYS[1..n] the lock keys,
-- ARGV[1] token, ARGV[2] TTL in ms. Returns 1 if extended, 0 otherwise.
for i = 1, #KEYS do
	if redis.call("get", KEYS[i]) ~= ARGV[1] then
		return 0
	end
end
for i = 1, #KEYS do
	redis.call("pexpire", KEYS[i], ARGV[2])
end
return 1
