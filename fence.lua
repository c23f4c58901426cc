-- Raise the fence counter to at least ARGV[2], only while the lock key
-- still holds our token: the raise must happen before any later holder can
-- set the key on this node (see fence.go).
-- KEYS[1] lock key, KEYS[2] fence counter, ARGV[1] token, ARGV[2] fence,
-- ARGV[3] the counter's lifetime in ms. Returns 1 if the key held our
-- token (the counter is now >= ARGV[2]), 0 otherwise.
if redis.call("get", KEYS[1]) ~= ARGV[1] then
	return 0
end
fence_raise(KEYS[2], tonumber(ARGV[2]), ARGV[3])
return 1
