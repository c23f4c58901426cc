-- Leave a key's queue of waiting Lock calls (FairQueuer): a Lock call
-- that ends without the lock, or got it without this node, removes its
-- entry so that it blocks nobody until its expiry.
-- KEYS[1] the queue, KEYS[2] the entries' expiries; ARGV[1] ticket.
-- Replies 1 if the entry was there, 0 otherwise.
redis.call("zrem", KEYS[2], ARGV[1])
return redis.call("zrem", KEYS[1], ARGV[1])
