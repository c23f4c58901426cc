-- Fenced acquire: SET NX PX and, only when that set the key, INCR of the
-- key's fence counter, in one atomic step, so a counter value is issued
-- only to the client that set the key, while its key is there.
-- KEYS[1] lock key, KEYS[2] fence counter (never expires), ARGV[1] token,
-- ARGV[2] TTL in ms. Returns the new counter value (>= 1), or 0 when the
-- key was held by another token.
--
-- The same call run twice (a client that resent it after losing the
-- reply) answers the same: while the key holds our token, nobody else can
-- have moved the counter (acquiring needs the key free, raising needs our
-- token), so it still holds the value our INCR returned.
if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
	return redis.call("incr", KEYS[2])
end
if redis.call("get", KEYS[1]) == ARGV[1] then
	return tonumber(redis.call("get", KEYS[2]) or "0")
end
return 0
