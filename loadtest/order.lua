-- order.lua - a wrk 4.1 script that sends carts to POST /api/order: deduct.lua's load, with
-- a cart of several goods in each request instead of one goods.
--
--   wrk -t2 -c50 -d120s --timeout 10s -s loadtest/order.lua http://127.0.0.1:8080/api/order \
--       -- mode=redis goods=1 goods_count=5 count=1 budget=6000 threads=2
--
-- The arguments are deduct.lua's, and so are the budget, the counters, the RESULT line and
-- the history (this script runs deduct.lua first and keeps all of it): with history=PREFIX
-- each cart is recorded as an `order` of HISTORY's format, its items on the invocation, the
-- answer's items (each goods' remaining) and the cart's order id on an ok, the goods the 409
-- names on a sold_out. What differs is the body: the
-- goods ID .. ID+goods_count-1 are the hot goods (goods_count 2 or more), and each request is
-- one of CARTS prebuilt carts, picked at random: half of them one item, the others 2 to 4
-- (at most goods_count), of distinct goods listed in random order, `count` units each. Two
-- carts that share goods thus often list them in opposite orders: the load under which a
-- cart mode that took its locks as listed would deadlock. A 200 counts one cart sold, all of
-- its items; a 409 (sold_out) one that sold nothing.

local CARTS = 1000

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(here .. "deduct.lua")

local deduct_init = init
local carts = {}

function init(args)
    deduct_init(args) -- checks the arguments, shares the budget, seeds math.random
    local opts = {}
    for _, a in ipairs(args) do
        local k, v = a:match("^([%w_]+)=(.*)$")
        opts[k] = v
    end
    local goods = tonumber(opts.goods or "1")
    local goods_count = tonumber(opts.goods_count or "1")
    local count = tonumber(opts.count or "1")
    local mode = opts.mode or ""
    if goods_count < 2 then
        io.stderr:write("order.lua: goods_count must be 2 or more: carts need several goods\n")
        os.exit(2)
    end
    local path = wrk.path
    if path == nil or path == "/" then path = "/api/order" end
    local headers = { ["Content-Type"] = "application/json" }
    if hist_path then headers["X-Request-Id"] = "@KEY@" end -- recording: see deduct.lua
    local mode_field = mode ~= "" and string.format(',"mode":"%s"', mode) or ""
    for c = 1, CARTS do
        local n = 1
        if math.random(2) == 2 then n = math.random(2, math.min(4, goods_count)) end
        local pool = {}
        for i = 1, goods_count do pool[i] = goods + i - 1 end
        local items = {}
        for i = 1, n do -- a random draw without repeats, in the order drawn
            local k = math.random(i, goods_count)
            pool[i], pool[k] = pool[k], pool[i]
            items[i] = string.format('{"goods_id":%d,"count":%d}', pool[i], count)
        end
        local list = "[" .. table.concat(items, ",") .. "]"
        local body = '{"items":' .. list .. mode_field .. "}"
        carts[c] = prebuilt(wrk.format("POST", path, headers, body), "order",
                            '"items":' .. list, "")
    end
end

function request()
    return send_request(carts[math.random(#carts)])
end
