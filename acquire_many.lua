-- All-or-nothing acquire of a set of keys: set every key to our token with
-- a TTL, or none of them when any key exists (whatever it holds), in one
-- atomic step. KEYS[1..n] the lock keys (distinct, in the caller's
-- canonical order), ARGV[1] token, ARGV[2] TTL in ms. Returns 1 if it set
-- every key, 0 if it set none.
--
-- Each key is an ordinary lock key (SET NX semantics): a single-key lock
-- on one of them refuses while this set holds it, and this script refuses
-- while a single-key lock holds one.
for i = 1, #KEYS do
	if redis.call("exists", KEYS[i]) == 1 then
		return 0
	end
end
for i = 1, #KEYS do
	redis.call("set", KEYS[i], ARGV[1], "PX", ARGV[2])
end
return 1
