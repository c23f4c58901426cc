-- Raise the fence counters of a set of keys, each to at least its fence,
-- only while every key still holds our token (see fence.lua).
-- KEYS[1..n] the lock keys, KEYS[n+1..2n] their fence counters, ARGV[1]
-- token, ARGV[2] the counters' lifetime in ms, ARGV[2+i] the fence for
-- key i. Returns 1 if every key held our token (each counter is now at
-- least its fence), 0 otherwise (nothing changed).
local n = #KEYS / 2
for i = 1, n do
	if redis.call("get", KEYS[i]) ~= ARGV[1] then
		return 0
	end
end
for i = 1, n do
	fence_raise(KEYS[n + i], tonumber(ARGV[2 + i]), ARGV[2])
end
return 1
