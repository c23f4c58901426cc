-- The release of a lock taken through the queue (FairQueuer, WithFairness):
-- release.lua that also removes the holder's queue entry, in the same
-- step, whether or not the key still held the token (the Lock call is
-- over either way), so the next waiter is the head when the key is free.
-- KEYS[1] lock key, KEYS[2] and KEYS[3] its queue and expiries; ARGV[1]
-- token, ARGV[2] announce ("1" PUBLISH, "2" SPUBLISH, else none, as in
-- release.lua), ARGV[3] ticket. Returns 1 if the key was deleted, 0
-- otherwise.
redis.call("zrem", KEYS[2], ARGV[3])
redis.call("zrem", KEYS[3], ARGV[3])
if redis.call("get", KEYS[1]) == ARGV[1] then
	redis.call("del", KEYS[1])
	if ARGV[2] == "1" then
		redis.pcall("publish", "redlock:released:" .. KEYS[1], ARGV[1])
	elseif ARGV[2] == "2" then
		redis.pcall("spublish", "redlock:released:" .. KEYS[1], ARGV[1])
	end
	return 1
end
return 0
