-- A reader's share of a read-write lock. KEYS[1] the lock key, KEYS[2]
-- its readers (a sorted set: token -> deadline in ms of the node's
-- clock), KEYS[3] its "writer waiting" mark, KEYS[4] its fence counter;
-- ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] "1" to read the fencing token,
-- ARGV[4] the counter's lifetime in ms. Returns, when granted, the current
-- token (fence_lib.lua: the generation of the latest fenced writer, never
-- incremented by a reader), or 0 when not fenced; -1 when refused.
--
-- The lock key holds a writer's token (or a mutex's: they are one and
-- the same lock), or the marker "redlock:readers" while readers hold,
-- with a TTL reaching the latest reader's deadline: so the key exists
-- exactly while someone holds, a writer's SET NX (and a plain mutex's) is
-- refused while any live reader holds, and each reader's share ends at
-- its own deadline, pruned here, in release and in extend.
--
-- A reader is refused while a writer holds (the key holds a token) or
-- waits (the mark exists: writer preference). A resend by a reader that
-- holds answers granted.
local t = redis.call("time")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function fence()
	if ARGV[3] ~= "1" then
		return 0
	end
	return fence_current(KEYS[4], ARGV[4])
end
local v = redis.call("get", KEYS[1])
if v and v ~= "redlock:readers" then
	return -1
end
local mine = redis.call("zscore", KEYS[2], ARGV[1])
if v and mine and tonumber(mine) > now then
	return fence()
end
if redis.call("exists", KEYS[3]) == 1 then
	return -1
end
redis.call("zremrangebyscore", KEYS[2], "-inf", now)
redis.call("zadd", KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
local last = tonumber(redis.call("zrange", KEYS[2], -1, -1, "withscores")[2])
redis.call("set", KEYS[1], "redlock:readers", "PX", last - now)
redis.call("pexpire", KEYS[2], last - now)
return fence()
