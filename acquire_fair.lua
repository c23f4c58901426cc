-- Fair acquisition (FairQueuer, WithFairness): SET NX that a free key
-- grants only to the head of the key's queue of waiting Lock calls.
-- KEYS[1] lock key, KEYS[2] the queue (ticket -> the call's score),
-- KEYS[3] the entries' expiries (ticket -> server time in ms), KEYS[4]
-- the entries' grants (ticket -> TTL in ms, a space, the token a release
-- sets the key to for it: release_fair.lua);
-- ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] ticket, ARGV[4] score,
-- ARGV[5] how long the entry stays without a refresh, in ms.
-- Replies 1 if it set the key, otherwise minus the number of entries
-- ahead of ours (0: we are the head).
--
-- Expired entries are dropped first, by the server's clock. Our entry is
-- added or refreshed (the score is the caller's and stable across its
-- attempts, so a waiter keeps or regains its place), and this attempt's
-- token and TTL become what a release grants it. The key is set if it
-- does not exist and our entry is first, as a plain SET NX would; or if
-- it holds the token a release granted to our entry before this attempt
-- (it is ours: the attempt takes it over with its own token). Exclusion
-- rests on the key exactly as in a plain SET NX; the queue only says who
-- may take a free key. A grant keeps our entry at the head: the round may
-- still fall short of a quorum and be rolled back, and the entry must
-- then still hold our place. The holder's release (release_fair.lua)
-- removes it.
-- TIME before writes needs effects replication (the default since Redis 5).
local t = redis.call("time")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call("zrangebyscore", KEYS[3], "-inf", now)
if #dead > 0 then
	redis.call("zrem", KEYS[2], unpack(dead))
	redis.call("zrem", KEYS[3], unpack(dead))
	redis.call("hdel", KEYS[4], unpack(dead))
end
local granted = false
local held = redis.call("get", KEYS[1])
local before = redis.call("hget", KEYS[4], ARGV[3])
if held and before and held == string.sub(before, string.find(before, " ", 1, true) + 1) then
	granted = true -- granted to us by a release
end
local stay = tonumber(ARGV[5])
redis.call("zadd", KEYS[2], ARGV[4], ARGV[3])
redis.call("zadd", KEYS[3], now + stay, ARGV[3])
redis.call("hset", KEYS[4], ARGV[3], ARGV[2] .. " " .. ARGV[1])
local ahead = redis.call("zrank", KEYS[2], ARGV[3])
if not held and ahead == 0 then
	granted = true
end
if granted then
	redis.call("set", KEYS[1], ARGV[1], "px", ARGV[2])
end
-- The queue outlives no entry: its keys expire with the latest one.
if redis.call("pttl", KEYS[2]) < stay then
	redis.call("pexpire", KEYS[2], stay)
	redis.call("pexpire", KEYS[3], stay)
	redis.call("pexpire", KEYS[4], stay)
end
if granted then
	return 1
end
return -ahead
