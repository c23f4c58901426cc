-- Fenced all-or-nothing acquire of a set of keys: acquire_many.lua and,
-- only when it set the keys, each key's next fencing token (fence_lib.lua),
-- in one atomic step. KEYS[1..n] the lock keys, KEYS[n+1..2n] their fence
-- counters (in the same order), ARGV[1] token, ARGV[2] TTL in ms, ARGV[3]
-- the counters' lifetime in ms. Returns the n new tokens (each >= 1), in
-- key order, or an empty array when any key was held by another token
-- (nothing set).
--
-- Run again while every key holds our token (a resend after a lost reply),
-- it answers the counters' current values, unchanged: nobody else can have
-- moved them meanwhile (see acquire_fenced.lua).
local n = #KEYS / 2
local ours = 0
for i = 1, n do
	local v = redis.call("get", KEYS[i])
	if v == ARGV[1] then
		ours = ours + 1
	elseif v then
		return {}
	end
end
local fences = {}
if ours == n then
	for i = 1, n do
		fences[i] = tonumber(redis.call("get", KEYS[n + i]) or "0")
	end
	return fences
end
if ours > 0 then
	-- part of an earlier acquisition of ours expired: not granted now
	return {}
end
for i = 1, n do
	redis.call("set", KEYS[i], ARGV[1], "PX", ARGV[2])
	fences[i] = fence_next(KEYS[n + i], ARGV[3])
end
return fences
