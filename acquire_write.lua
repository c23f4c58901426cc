-- A writer's acquire of a read-write lock: SET NX PX of the lock key, as a
-- mutex, so a writer excludes readers (the key holds their marker),
-- writers and mutexes alike. KEYS[1] the lock key, KEYS[2] its "writer
-- waiting" mark, KEYS[3] its fence counter; ARGV[1] token, ARGV[2] TTL in
-- ms, ARGV[3] "1" to issue a fencing token, ARGV[4] the mark's TTL in ms
-- ("0": leave none, the writer will not wait), ARGV[5] the counter's
-- lifetime in ms. Returns, when granted, 1 (unfenced) or the next token
-- (fenced, as acquire_fenced.lua; a resend by the holder answers its
-- current value); 0 when refused.
--
-- A refused writer leaves the mark, which refuses new readers (writer
-- preference) until it expires: it is refreshed on every refused attempt,
-- so it lasts while the writer keeps trying and ends on its own when the
-- writer gives up or dies. A granted writer deletes it: another writer
-- still waiting sets it again on its next refused attempt.
if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
	redis.call("del", KEYS[2])
	if ARGV[3] == "1" then
		return fence_next(KEYS[3], ARGV[5])
	end
	return 1
end
if redis.call("get", KEYS[1]) == ARGV[1] then
	if ARGV[3] == "1" then
		return tonumber(redis.call("get", KEYS[3]) or "0")
	end
	return 0
end
if tonumber(ARGV[4]) > 0 then
	redis.call("set", KEYS[2], "1", "PX", ARGV[4])
end
return 0
