-- Raise the fence counter to at least ARGV[2] while a reader's share is
-- live (see fence.lua). KEYS[1] the lock key, KEYS[2] its readers,
-- KEYS[3] its fence counter; ARGV[1] token, ARGV[2] fence, ARGV[3] the
-- counter's lifetime in ms. Returns 1 if the share was live (the counter
-- is now >= ARGV[2]), 0 otherwise.
local t = redis.call("time")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call("get", KEYS[1]) ~= "redlock:readers" then
	return 0
end
local mine = redis.call("zscore", KEYS[2], ARGV[1])
if not mine or tonumber(mine) <= now then
	return 0
end
fence_raise(KEYS[3], tonumber(ARGV[2]), ARGV[3])
return 1
