-- Compare-and-swap of the holder: hand our lock to the next holder in one
-- step, without the key ever being free (Transferrer, hand-off within a
-- locker). Only if the key still holds our token, set it to the next
-- holder's token with a fresh TTL; a key that expired is never re-created,
-- and nothing is announced (the key is not released).
-- KEYS[1] lock key, ARGV[1] our token, ARGV[2] the next holder's token,
-- ARGV[3] TTL in ms. Returns 1 if handed over, 0 otherwise.
if redis.call("get", KEYS[1]) == ARGV[1] then
	redis.call("set", KEYS[1], ARGV[2], "px", ARGV[3])
	return 1
end
return 0
