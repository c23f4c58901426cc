-- Fenced acquire: SET NX PX and, only when that set the key, the next
-- fencing token (fence_lib.lua), in one atomic step, so a token is issued
-- only to the client that set the key, while its key is there.
-- KEYS[1] lock key, KEYS[2] its fence counter; ARGV[1] token, ARGV[2] TTL
-- in ms, ARGV[3] the counter's lifetime in ms. Returns the new token
-- (>= 1), or 0 when the key was held by another token.
--
-- The same call run twice (a client that resent it after losing the
-- reply) answers the same: while the key holds our token, nobody else can
-- have moved the counter (acquiring needs the key free, raising needs our
-- token), so it still holds the value our call set.
if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
	return fence_next(KEYS[2], ARGV[3])
end
if redis.call("get", KEYS[1]) == ARGV[1] then
	return tonumber(redis.call("get", KEYS[2]) or "0")
end
return 0
