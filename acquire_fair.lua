-- Fair acquisition (FairQueuer, WithFairness): SET NX that a free key
-- grants only to the head of the key's queue of waiting Lock calls.
-- KEYS[1] lock key, KEYS[2] the queue (ticket -> the call's score),
-- KEYS[3] the entries' expiries (ticket -> server time in ms), KEYS[4]
-- the entries' grants (ticket -> TTL in ms, the attempt's number and the
-- token a release sets the key to for it, separated by spaces:
-- release_fair.lua);
-- ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] ticket, ARGV[4] score,
-- ARGV[5] how long the entry stays without a refresh, in ms, ARGV[6] the
-- attempt's number within its Lock call (increasing); for a fenced call,
-- KEYS[5] the fence counter, ARGV[7] "1" and ARGV[8] the counter's
-- lifetime in ms.
-- Replies, if it set the key, 1 or for a fenced call the next fencing
-- token (fence_lib.lua, >= 1); otherwise minus the number of entries ahead
-- of ours (0: we are the head).
--
-- Expired entries are dropped first, by the server's clock. Our entry is
-- added or refreshed (the score is the caller's and stable across its
-- attempts, so a waiter keeps or regains its place), and this attempt's
-- token and TTL become what a release grants it, unless a later attempt
-- of the call registered already (this one was delivered late). The key
-- is set if it does not exist and our entry is first, as a plain SET NX
-- would; or if it holds the token a release granted to our entry, from
-- an earlier attempt than this one (it is ours: the attempt takes it
-- over with its own token). A late attempt never takes over a later
-- one's grant: its rollback would delete what a claim counts on. Exclusion
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
local granted, newer = false, true
local held = redis.call("get", KEYS[1])
local before = redis.call("hget", KEYS[4], ARGV[3])
if before then
	local sp1 = string.find(before, " ", 1, true)
	local sp2 = string.find(before, " ", sp1 + 1, true)
	newer = tonumber(ARGV[6]) > tonumber(string.sub(before, sp1 + 1, sp2 - 1))
	if newer and held and held == string.sub(before, sp2 + 1) then
		granted = true -- granted to an earlier attempt by a release
	end
end
local stay = tonumber(ARGV[5])
redis.call("zadd", KEYS[2], ARGV[4], ARGV[3])
redis.call("zadd", KEYS[3], now + stay, ARGV[3])
if newer then
	redis.call("hset", KEYS[4], ARGV[3], ARGV[2] .. " " .. ARGV[6] .. " " .. ARGV[1])
end
local ahead = redis.call("zrank", KEYS[2], ARGV[3])
if not held and ahead == 0 then
	granted = true
end
if granted then
	redis.call("set", KEYS[1], ARGV[1], "px", ARGV[2])
end
-- The queue outlives no entry: its keys expire after the latest one,
-- within twice its stay. An expiry moved only when it would come before
-- the entry's (to twice the stay, so that the calls of the next stay
-- need not move it again: a PEXPIRE per key and call was a good part of
-- this script's cost). Each key is checked on its own: one written by an
-- older version of this script, or created by this call under a queue
-- that lives longer, must not be left without an expiry.
for _, k in ipairs({KEYS[2], KEYS[3], KEYS[4]}) do
	if redis.call("pttl", k) < stay then
		redis.call("pexpire", k, 2 * stay)
	end
end
if granted then
	if ARGV[7] == "1" then
		return fence_next(KEYS[5], ARGV[8])
	end
	return 1
end
return -ahead
