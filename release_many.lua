-- Compare-and-delete of a set of keys: delete every key that still holds
-- our token (those that expired, or that another holder took since, are
-- left alone), announcing each deletion on the key's release channel so
-- that waiters for any of the keys, single-key or set, retry at once.
-- KEYS[1..n] the lock keys, ARGV[1] token, ARGV[2] "1" to announce with
-- PUBLISH, "2" with SPUBLISH, anything else not to announce (as
-- release.lua). Returns how many keys it deleted: the set was held when
-- that is n.
local deleted = 0
for i = 1, #KEYS do
	if redis.call("get", KEYS[i]) == ARGV[1] then
		redis.call("del", KEYS[i])
		deleted = deleted + 1
		if ARGV[2] == "1" then
			redis.pcall("publish", "redlock:released:" .. KEYS[i], ARGV[1])
		elseif ARGV[2] == "2" then
			redis.pcall("spublish", "redlock:released:" .. KEYS[i], ARGV[1])
		end
	end
end
return deleted
