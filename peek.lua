-- Peek: read a lock key and its fence counter in one atomic step, for
-- leader election (Election.Leader, Observe). KEYS[1] lock key, KEYS[2]
-- its fence counter. Returns {token or false, counter or false}; changes
-- nothing.
return redis.call("mget", KEYS[1], KEYS[2])
