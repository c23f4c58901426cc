-- The release of a lock taken through the queue, and a waiter's leaving
-- it (FairQueuer, WithFairness). KEYS[1] lock key, KEYS[2], KEYS[3] and
-- KEYS[4] its queue, expiries and grants (acquire_fair.lua); ARGV[1]
-- token ("" to leave without a lock), ARGV[2] announce ("1" PUBLISH,
-- "2" SPUBLISH, else none, as in release.lua), ARGV[3] ticket, ARGV[4]
-- "1" to grant the key to the next waiter, else only to name it;
-- ARGV[5] "1" to return, rather than announce, a grant to a waiter of the
-- releasing ticket's own locker (below).
-- Returns 1 if the key was deleted, 0 otherwise; or, having deleted it,
-- the grant it did not announce.
--
-- It removes the ticket's entry, whether or not the key still held the
-- token (the Lock call is over either way), and deletes the key if it
-- holds the token, or the token a release granted to the entry (a grant
-- that came too late for its waiter, or to a waiter that gives up).
--
-- Having deleted the key, it hands it on to the queue's head: the first
-- entry, in queue order, whose expiry has not passed by the server's
-- clock (the script looks at a few entries only). With ARGV[4] "1" the
-- key is set to the token the head's latest attempt registered, with its
-- TTL, and the announcement is "grant=" .. ticket .. " " .. that token:
-- the head's waiter may take the lock without another round (fair.go
-- says when that is safe). Otherwise the announcement is "next=" ..
-- ticket .. " " .. our token, which wakes the head alone. With no live
-- head it is our bare token, as release.lua's. A token begins with a hex
-- digit and a ticket has no space, so the forms cannot be confused.
-- The grant, or the name, goes to the head's locker's channel when its
-- ticket begins with a locker's id and "." (the key's channel, followed
-- by ":" and the id), so that only the process it runs in hears it.
-- With ARGV[5] "1", a grant to a head whose ticket begins with the same
-- locker's id as ARGV[3] is not announced at all but returned: the
-- releasing process hands it to its own waiter itself (GrantPending,
-- lines.handGrant), and saves the subscriber in that process a wake-up.
local held = redis.call("get", KEYS[1])
local mine = held and held == ARGV[1]
local grants = nil
if held and not mine then -- the entry's grant is looked at only then
	grants = redis.call("hget", KEYS[4], ARGV[3])
end
redis.call("zrem", KEYS[2], ARGV[3])
redis.call("zrem", KEYS[3], ARGV[3])
redis.call("hdel", KEYS[4], ARGV[3])
if not held then
	return 0
end
-- A grant is "TTL attempt token" (acquire_fair.lua).
local function granted(g)
	local sp1 = string.find(g, " ", 1, true)
	local sp2 = string.find(g, " ", sp1 + 1, true)
	return string.sub(g, sp2 + 1), string.sub(g, 1, sp1 - 1)
end
if not mine and grants then
	mine = held == granted(grants)
end
if not mine then
	return 0
end
redis.call("del", KEYS[1])
if ARGV[2] ~= "1" and ARGV[2] ~= "2" then
	return 1
end
local msg, channel = held, "redlock:released:" .. KEYS[1]
local t = redis.call("time")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, ticket in ipairs(redis.call("zrange", KEYS[2], 0, 7)) do
	local exp = tonumber(redis.call("zscore", KEYS[3], ticket))
	if exp ~= nil and exp > now then
		local g = redis.call("hget", KEYS[4], ticket)
		if ARGV[4] == "1" and g then
			local tok, ttl = granted(g)
			redis.call("set", KEYS[1], tok, "px", ttl)
			msg = "grant=" .. ticket .. " " .. tok
		else
			msg = "next=" .. ticket .. " " .. held
		end
		-- A ticket that begins with its locker's id and "." is announced
		-- on that locker's channel alone (FairQueuer.NotifyGrants).
		local dot = string.find(ticket, ".", 1, true)
		if dot then
			local locker = string.sub(ticket, 1, dot)
			if ARGV[5] == "1" and g and ARGV[4] == "1" and string.sub(ARGV[3], 1, dot) == locker then
				return msg
			end
			channel = channel .. ":" .. string.sub(locker, 1, dot - 1)
		end
		break
	end
end
local publish = "publish"
if ARGV[2] == "2" then
	publish = "spublish"
end
redis.pcall(publish, channel, msg)
return 1
