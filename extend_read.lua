-- Extend a reader's share : its deadline becomes
-- ARGV[2] ms from now, only while it is live; an expired share is never
-- revived. KEYS[1] the lock key, KEYS[2] its readers, KEYS[3] its fence
-- counter; ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] the fence lifetime
-- in ms (a counter that exists lives at least that long from now). The
-- lock key's TTL follows the latest deadline.
-- Returns 1 if extended, 0 otherwise. A waiting writer does not stop a
-- reader that holds from extending: it waits for the readers to leave.
local t = redis.call("time")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call("get", KEYS[1]) ~= "redlock:readers" then
	return 0
end
local mine = redis.call("zscore", KEYS[2], ARGV[1])
if not mine or tonumber(mine) <= now then
	return 0
end
redis.call("zremrangebyscore", KEYS[2], "-inf", now)
redis.call("zadd", KEYS[2], "XX", now + tonumber(ARGV[2]), ARGV[1])
local last = tonumber(redis.call("zrange", KEYS[2], -1, -1, "withscores")[2])
redis.call("pexpire", KEYS[1], last - now)
redis.call("pexpire", KEYS[2], last - now)
if redis.call("pttl", KEYS[3]) < tonumber(ARGV[3]) then
	redis.call("pexpire", KEYS[3], ARGV[3])
end
return 1
