-- Acquire: SET key token NX PX ttl. KEYS[1] lock key, ARGV[1] token,
-- ARGV[2] TTL in ms (always PX, so the TTL on the node is exactly the
-- one the validity was computed from). Returns 1 if it set the key, 0 if
-- the key exists, whatever it holds: a resent acquire by the holder is
-- refused too, and its round rolls it back.
if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
	return 1
end
return 0
