-- Raise the fence counters of a set of keys, each to at least its fence,
-- only while every key still holds our token (see fence.lua).
-- KEYS[1..n] the lock keys, KEYS[n+1..2n] their fence counters, ARGV[1]
-- token, ARGV[1+i] the fence for key i. Returns 1 if every key held our
-- token (each counter is now at least its fence), 0 otherwise (nothing
-- changed).
local n = #KEYS / 2
for i = 1, n do
	if redis.call("get", KEYS[i]) ~= ARGV[1] then
		return 0
	end
end
for i = 1, n do
	local current = tonumber(redis.call("get", KEYS[n + i]) or "0")
	if current < tonumber(ARGV[1 + i]) then
		redis.call("set", KEYS[n + i], ARGV[1 + i])
	end
end
return 1
