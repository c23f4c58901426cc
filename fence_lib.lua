-- Fence counters (docs/fencing.md), the functions every script that
-- issues or reads a fencing token begins with. A counter, key + ":fence",
-- lives `life` ms after its last use. When it does not exist (never used,
-- expired, evicted, flushed, lost in a restart) the next token starts
-- from the node's clock in microseconds, above every token the node
-- issued before, given the clock assumption of docs/fencing.md. Values
-- stay below 2^53 (until the year 2255), exact in Lua's numbers.
local function fence_now()
	local t = redis.call("time")
	return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function fence_set(k, f, life)
	redis.call("set", k, string.format("%.0f", f), "PX", life)
	return f
end
-- The next token: the counter plus one, or the clock without a counter.
local function fence_next(k, life)
	local c = redis.call("get", k)
	if c then
		return fence_set(k, tonumber(c) + 1, life)
	end
	return fence_set(k, fence_now(), life)
end
-- The current token, for a reader: the counter, or the clock without one
-- (kept, so that the next writer's token is above it).
local function fence_current(k, life)
	local c = redis.call("get", k)
	if c then
		redis.call("pexpire", k, life)
		return tonumber(c)
	end
	return fence_set(k, fence_now(), life)
end
-- Raise the counter to at least f; it never goes down.
local function fence_raise(k, f, life)
	local c = redis.call("get", k)
	if c and tonumber(c) >= f then
		redis.call("pexpire", k, life)
		return
	end
	fence_set(k, f, life)
end
