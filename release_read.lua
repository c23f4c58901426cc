-- Release a reader's share (RWLocker.ReleaseRead). KEYS[1] the lock key,
-- KEYS[2] its readers; ARGV[1] token, ARGV[2] "1" to announce with
-- PUBLISH, "2" with SPUBLISH, anything else not to (as release.lua).
-- Returns 1 if the token held a live share, 0 otherwise.
--
-- Expired shares are pruned; when no live reader is left the lock key
-- (the readers' marker) is deleted and the release announced, since only
-- then can a writer take it. Otherwise the key's TTL shrinks to the
-- latest remaining deadline. A release whose share is already gone still
-- prunes, so a marker never outlives the last live reader.
local t = redis.call("time")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call("get", KEYS[1]) ~= "redlock:readers" then
	return 0
end
local mine = redis.call("zscore", KEYS[2], ARGV[1])
redis.call("zrem", KEYS[2], ARGV[1])
redis.call("zremrangebyscore", KEYS[2], "-inf", now)
local last = redis.call("zrange", KEYS[2], -1, -1, "withscores")[2]
if last then
	redis.call("pexpire", KEYS[1], tonumber(last) - now)
	redis.call("pexpire", KEYS[2], tonumber(last) - now)
else
	redis.call("del", KEYS[1], KEYS[2])
	if ARGV[2] == "1" then
		redis.pcall("publish", "redlock:released:" .. KEYS[1], ARGV[1])
	elseif ARGV[2] == "2" then
		redis.pcall("spublish", "redlock:released:" .. KEYS[1], ARGV[1])
	end
end
if mine and tonumber(mine) > now then
	return 1
end
return 0
