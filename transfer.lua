-- Compare-and-swap of the holder: hand our lock to the next holder in one
-- step, without the key ever being free (Transferrer, hand-off within a
-- locker). Only if the key still holds our token, and no Lock call waits
-- in the key's queue (acquire_fair.lua), set it to the next holder's
-- token with a fresh TTL; a key that expired is never re-created, and
-- nothing is announced (the key is not released).
-- KEYS[1] lock key, KEYS[2] its queue; ARGV[1] our token, ARGV[2] the
-- next holder's token, ARGV[3] TTL in ms. Returns 1 if handed over, 0 if
-- the key does not hold our token, -1 if it does but the queue has
-- entries: the queue's head came first (the caller releases the key to
-- it, release_fair.lua). An entry whose waiter died counts until a fair
-- attempt drops it or the queue expires (within twice the entry's stay):
-- meanwhile Unlock releases where it would have handed over.
if redis.call("get", KEYS[1]) ~= ARGV[1] then
	return 0
end
if redis.call("exists", KEYS[2]) == 1 then
	return -1
end
redis.call("set", KEYS[1], ARGV[2], "px", ARGV[3])
return 1
