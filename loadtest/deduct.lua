-- deduct.lua - a wrk 4.1 script that hammers POST /api/deduct and reports, in one line,
-- what the service answered.
--
--   wrk -t2 -c50 -d120s --timeout 10s -s loadtest/deduct.lua http://127.0.0.1:8080/api/deduct \
--       -- mode=redis goods=1 goods_count=1 count=1 budget=6000 threads=2
--
-- Arguments after "--", each key=value, all optional:
--   mode=NAME       sent as "mode" in the body; empty or absent: the replica's default mode
--   goods=ID        the first goods id (default 1)
--   goods_count=N   1 (default): every request hits goods ID, the "hot goods" case;
--                   N > 1: each request picks one of ID .. ID+N-1 at random
--   count=N         units per request (default 1)
--   budget=N        send exactly N requests in all, then stop (default 0: run for -d)
--   threads=N       with a budget: must equal wrk's -t (wrk does not tell the script)
--   history=PREFIX  record the history: thread i writes PREFIX.i.jsonl (see below)
--   id_prefix=STR   what every request's X-Request-Id begins with (default: "r" and the time);
--                   unique per row, at most 16 characters of A-Za-z0-9_-
--   reads=N         N reads of the stock (GET /api/stock/{goods}) per sale, on each thread in
--                   turn (default 0: sales only); reads_only=1: reads and no sale at all
--   read=KIND       cached (default): GET /api/stock/{goods}?cached=1&mode=MODE, the product
--                   page's read through the cache; plain: the table's read. Every read is
--                   recorded in the history as a `read` (a 200's stock: ok; any other answer:
--                   info, which constrains nothing), and counted apart from the sales
--   process_base=N  the history's process ids of thread i start at N + i * 10^6 (default
--                   0): several wrk runs recorded into one history (the repetitions of
--                   one row) each take a base of their own, N a multiple of 10^8, so that
--                   no process of one run opens an operation while another run's is open
--
-- How wrk runs a script (its SCRIPTING document): every wrk thread has a Lua state of its
-- own for init/delay/request/response, and one more state, the main one, runs setup() for
-- each thread before it starts and done() at the end. States share nothing, so each thread
-- counts its answers in its own globals and done() collects them with thread:get(), through
-- the thread objects setup() kept.
--
-- The budget. wrk has no "stop after N requests": its main thread sleeps for the whole -d
-- and only then stops the threads. So each thread gets a share of the budget and, per
-- connection, wrk asks delay() before every request it sends (delay() is called once per
-- request, then request()). delay() hands out the share one request at a time and parks
-- the connection (a delay of a day) once it is spent, so the thread sends its share
-- exactly, never more. When the last of its answers is in, the thread stops its own event
-- loop (wrk.thread:stop()) and says so on stderr; when every thread has said so, the
-- driver (loadtest/run) sends wrk SIGINT, which wrk takes as "stop sleeping and report".
-- A request lost to a socket error is re-sent by wrk on the new connection without
-- asking delay(): `sent` then exceeds the budget and the error counters say why.
--
-- The summary: done() prints one line starting with RESULT, key=value pairs:
--   requests sent s200 s409 s503 other e503_lock_timeout e503_lock_lost e503_unavailable
--   seconds rps p50_ms p90_ms p99_ms max_ms errors_connect errors_read errors_write
--   errors_timeout threads reads reads_ok
-- (reads and reads_ok: the reads answered and those answered 200; the latencies count sales
-- and reads alike, s200 ... other the sales only)
-- and, when there were answers other than 200/409/503, a line OTHER status=count ...
-- Latencies are wrk's own: every answer (200, 409 and 503 alike), after wrk's correction
-- for coordinated omission. seconds spans the first request to the last answer, measured
-- by the threads themselves (so the driver's SIGINT delay is not counted); rps is
-- requests / seconds.

local PARK_MS = 24 * 3600 * 1000 -- "never" for a connection whose thread's share is spent
local MAX_GOODS = 100000         -- requests are prebuilt, one per goods

-- A monotonic clock in seconds, through LuaJIT's FFI (wrk links LuaJIT); os.clock is CPU
-- time and os.time whole seconds, neither of any use here.
local now
do
    local ok, ffi = pcall(require, "ffi")
    if ok then
        ffi.cdef [[
            typedef struct { long tv_sec; long tv_nsec; } deduct_timespec;
            int clock_gettime(int clock_id, deduct_timespec *tp);
        ]]
        local ts = ffi.new("deduct_timespec")
        local CLOCK_MONOTONIC = 1 -- Linux
        now = function()
            ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
            return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
        end
    end
end

-- The history (history=PREFIX). Every request is one operation of HISTORY's format: its
-- invocation when request() builds it, its completion when response() sees its answer, both
-- stamped with CLOCK_MONOTONIC in ns. wrk's response() does not say which connection (and so
-- which request) an answer is for; the request does: each one carries an X-Request-Id of its
-- own (ID_PREFIX-thread-n), and the service (and nginx, for its own 502/504) sends it back in
-- the answer's header of the same name. A sale writes the id into its order row, in the
-- INSERT it runs anyway, so loadtest/lib/history.sh settles afterwards, from the orders, the
-- answers that left the outcome unknown, and recording costs the service nothing (an
-- Idempotency-Key would do the same, at the price of two more statements per sale).
-- A "process" of the history is a client with at most one operation open: each thread hands
-- out process ids from a pool of free ones, an id going back to the pool when its operation
-- completes. A request whose answer never comes (a socket error: wrk reconnects and sends a
-- new one) keeps its id forever, as the format wants for an operation that never ends.
-- Each thread writes its lines to its own file, through the C library's buffer (64 KiB):
-- flushed when it has spent its budget, and by the process's exit otherwise (a run for a
-- duration, which no thread sees end). Nothing goes to done() through thread:get(): a table
-- copied that way between wrk's Lua states came out with a line of garbage in it, several
-- times (wrk 4.1 with LuaJIT: a heap pointer in the middle of a string). The driver merges
-- the files by time.
local HIST_BUFFER = 65536
local now_ns
do
    local ok, ffi = pcall(require, "ffi")
    if ok then
        local ts = ffi.new("deduct_timespec")
        now_ns = function()
            ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
            return string.format("%d%09d", tonumber(ts.tv_sec), tonumber(ts.tv_nsec))
        end
    end
end

-- ---------------------------------------------------------------------------------------
-- The main state: setup() and done().

local threads = {}

function setup(thread)
    threads[#threads + 1] = thread
    thread:set("thread_index", #threads) -- 1-based, set before the thread starts
end

local function sum_counter(name)
    local total = 0
    for _, t in ipairs(threads) do
        total = total + (t:get("stats")[name] or 0)
    end
    return total
end

function done(summary, latency, requests)
    local first, last
    local others = {}
    for _, t in ipairs(threads) do
        local s = t:get("stats")
        if s.t_first and (not first or s.t_first < first) then first = s.t_first end
        if s.t_last and (not last or s.t_last > last) then last = s.t_last end
        for status, n in pairs(t:get("others")) do
            others[status] = (others[status] or 0) + n
        end
    end

    local answers = sum_counter("answers")
    local seconds
    if first and last and last > first then
        seconds = last - first
    else
        seconds = summary.duration / 1e6 -- no FFI clock: wrk's own run time
    end

    local function ms(us) return string.format("%.3f", us / 1000) end
    local e = summary.errors
    io.write(string.format(
        "RESULT requests=%d sent=%d s200=%d s409=%d s503=%d other=%d " ..
        "e503_lock_timeout=%d e503_lock_lost=%d e503_unavailable=%d " ..
        "seconds=%.3f rps=%.1f p50_ms=%s p90_ms=%s p99_ms=%s max_ms=%s " ..
        "errors_connect=%d errors_read=%d errors_write=%d errors_timeout=%d threads=%d " ..
        "reads=%d reads_ok=%d\n",
        answers, sum_counter("sent"), sum_counter("s200"), sum_counter("s409"),
        sum_counter("s503"), sum_counter("other"),
        sum_counter("e503_lock_timeout"), sum_counter("e503_lock_lost"),
        sum_counter("e503_unavailable"),
        seconds, answers / seconds,
        ms(latency:percentile(50)), ms(latency:percentile(90)), ms(latency:percentile(99)),
        ms(latency.max),
        e.connect, e.read, e.write, e.timeout, #threads, sum_counter("reads"),
        sum_counter("reads_ok")))

    -- The history lines each thread still buffers reach its file when the process exits.
    local unmatched = sum_counter("unmatched")
    if unmatched > 0 then
        io.write(string.format("HISTORY unmatched=%d (answers with no X-Request-Id of ours)\n",
                               unmatched))
    end

    local parts = {}
    for status, n in pairs(others) do parts[#parts + 1] = status .. "=" .. n end
    if #parts > 0 then
        table.sort(parts)
        io.write("OTHER " .. table.concat(parts, " ") .. "\n")
    end
    io.flush()
end

-- ---------------------------------------------------------------------------------------
-- Each thread's state: init(), delay(), request(), response().

-- Read by done() through thread:get(): only numbers and tables of numbers travel.
stats = {
    sent = 0, answers = 0, s200 = 0, s409 = 0, s503 = 0, other = 0,
    e503_lock_timeout = 0, e503_lock_lost = 0, e503_unavailable = 0, unmatched = 0,
    reads = 0, reads_ok = 0,
}
hist_path = nil   -- this thread's history file; nil: no history
others = {} -- status -> count, for the statuses outside 200/409/503

local requests_by_goods = {} -- prebuilt HTTP requests, one per goods
local reads_by_goods = {}    -- the same for the reads (reads=N)
local reads_per_sale = 0     -- reads=N; -1: reads only
local turn = 0               -- requests sent: which are reads
local share = nil            -- this thread's part of the budget; nil: no budget
local reserved = 0           -- requests delay() has let through
local finished = false
local verified = false       -- see request()
local hist_file = nil        -- this thread's history file, open for appending
local id_prefix = nil
local seq = 0                -- requests built: the id's last part
local open_ops = {}          -- X-Request-Id -> the open operation
local free_pids = {}         -- process ids whose operation completed
local next_pid = 0           -- the next new process id (thread i: from i * 10^6)

local function fail(msg)
    io.stderr:write("deduct.lua: " .. msg .. "\n")
    os.exit(2)
end

local function integer_arg(opts, key, default, min, max)
    local v = opts[key]
    if v == nil or v == "" then return default end
    if not v:match("^%d+$") then fail(key .. " must be a whole number, got '" .. v .. "'") end
    local n = tonumber(v)
    if n < min or n > max then
        fail(string.format("%s must be from %d to %d, got %s", key, min, max, v))
    end
    return n
end

function init(args)
    local opts = {}
    -- args[0] is the URL; the script's own arguments follow from args[1].
    for _, a in ipairs(args) do
        local k, v = a:match("^([%w_]+)=(.*)$")
        if not k then fail("arguments are key=value, got '" .. a .. "'") end
        opts[k] = v
    end
    local known = { mode = true, goods = true, goods_count = true, count = true,
                    budget = true, threads = true, history = true, id_prefix = true,
                    reads = true, reads_only = true, read = true,
                    process_base = true }
    for k in pairs(opts) do
        if not known[k] then fail("unknown argument '" .. k .. "'") end
    end

    local mode = opts.mode or ""
    if not mode:match("^[%w_%-]*$") then fail("mode must be a plain name, got '" .. mode .. "'") end
    local goods = integer_arg(opts, "goods", 1, 1, 2 ^ 53)
    local goods_count = integer_arg(opts, "goods_count", 1, 1, MAX_GOODS)
    local count = integer_arg(opts, "count", 1, 1, 10000)
    local budget = integer_arg(opts, "budget", 0, 0, 2 ^ 53)
    local nthreads = integer_arg(opts, "threads", 1, 1, 10000)
    local process_base = integer_arg(opts, "process_base", 0, 0, 2 ^ 50)

    local path = wrk.path
    if path == nil or path == "/" then path = "/api/deduct" end
    local headers = { ["Content-Type"] = "application/json" }
    local mode_field = mode ~= "" and string.format(',"mode":"%s"', mode) or ""
    -- thread_index was set by setup() before this thread started.
    if opts.history and opts.history ~= "" then
        if not now_ns then fail("history= needs LuaJIT's FFI (for CLOCK_MONOTONIC)") end
        id_prefix = opts.id_prefix or string.format("r%x", os.time())
        -- "<prefix>-<thread>-<n>" must fit the API's 32 characters of A-Za-z0-9_-.
        if not id_prefix:match("^[%w_-]+$") or #id_prefix > 16 then
            fail("id_prefix must be 1 to 16 characters of A-Za-z0-9_-")
        end
        hist_path = string.format("%s.%d.jsonl", opts.history, thread_index)
        hist_file = io.open(hist_path, "w")
        if hist_file then hist_file:setvbuf("full", HIST_BUFFER) end
        if not hist_file then fail("cannot write " .. hist_path) end
        next_pid = process_base + thread_index * 1000000
        -- The id changes with every request: the request is built around a placeholder,
        -- cut in two, and each request is the two halves with its id between them.
        headers["X-Request-Id"] = "@KEY@"
    end
    reads_per_sale = integer_arg(opts, "reads", 0, 0, 1000)
    if integer_arg(opts, "reads_only", 0, 0, 1) == 1 then reads_per_sale = -1 end
    local read_kind = opts.read or "cached"
    if read_kind ~= "cached" and read_kind ~= "plain" then
        fail("read must be cached or plain, got '" .. read_kind .. "'")
    end
    local read_query = read_kind == "cached" and
        ("?cached=1" .. (mode ~= "" and ("&mode=" .. mode) or "")) or ""
    for i = 1, goods_count do
        reads_by_goods[i] = prebuilt(wrk.format("GET",
            string.format("/api/stock/%d%s", goods + i - 1, read_query),
            { ["X-Request-Id"] = headers["X-Request-Id"] }), "read",
            string.format('"goods_id":%d', goods + i - 1), string.format(',"goods_id":%d', goods + i - 1))
    end
    for i = 1, goods_count do
        local body = string.format('{"goods_id":%d,"count":%d%s}', goods + i - 1, count,
                                   mode_field)
        requests_by_goods[i] = prebuilt(wrk.format("POST", path, headers, body), "deduct",
            string.format('"goods_id":%d,"count":%d', goods + i - 1, count),
            string.format(',"goods_id":%d', goods + i - 1))
    end

    math.randomseed(os.time() + thread_index * 7919)

    if budget > 0 then
        if thread_index > nthreads then
            fail(string.format("threads=%d but wrk runs more threads: pass threads=<wrk -t>",
                               nthreads))
        end
        -- Thread i of n gets budget/n, the first budget%n threads one more.
        share = math.floor(budget / nthreads)
        if thread_index <= budget % nthreads then share = share + 1 end
    else
        delay = nil -- no budget: wrk then skips delay() altogether (checked after init)
    end
end

local flush_history -- defined below, with record()

-- A prebuilt request: the request itself, or, when recording, its two halves around the
-- X-Request-Id placeholder, with what its history lines say of it: f, the invocation's
-- fields (fields) and the goods every completion names (goods, "" for an order).
function prebuilt(req, f, fields, goods)
    if not hist_file then return req end
    local at = req:find("@KEY@", 1, true)
    return { req:sub(1, at - 1), req:sub(at + 5), f = f, fields = fields, goods = goods }
end

-- Called when this thread has every answer of its share.
local function finish()
    if finished then return end
    finished = true
    if hist_file then flush_history() end
    io.stderr:write(string.format("deduct.lua: thread %d spent its budget of %d\n",
                                  thread_index, share))
    wrk.thread:stop()
end

function delay()
    if reserved < share then
        reserved = reserved + 1
        return 0
    end
    if stats.answers >= share then finish() end -- a share of 0 ends here
    return PARK_MS
end

-- Writes out what this thread's file still buffers.
flush_history = function()
    hist_file:flush()
end

local function record(line)
    hist_file:write(line, "\n")
end

-- One request with an id of its own, its invocation recorded.
local function recorded_request(r)
    seq = seq + 1
    local key = string.format("%s-%d-%d", id_prefix, thread_index, seq)
    local pid = table.remove(free_pids)
    if not pid then
        pid = next_pid
        next_pid = next_pid + 1
    end
    open_ops[key] = { pid, r }
    record(string.format('{"time":%s,"process":%d,"type":"invoke","f":"%s",%s,"request_id":"%s"}',
                         now_ns(), pid, r.f, r.fields, key))
    return r[1] .. key .. r[2]
end

-- An order's ok: the answer's items (each goods' count and remaining) as they came, and the
-- cart's order id. nil when the answer lacks them.
local function order_ok(body)
    local items = body:match('"items":(%b[])')
    local order_id = body:match('"order_id":(%d+)')
    if items and order_id then
        return string.format('"type":"ok","items":%s,"order_id":%s', items, order_id)
    end
end

-- The completion of the request whose id the answer carries: ok, fail or info, HISTORY's
-- classes (what the API promises for each status and error).
local function record_answer(status, headers, body)
    local key = headers["X-Request-Id"] or headers["x-request-id"]
    local op = key and open_ops[key]
    if not op then
        stats.unmatched = stats.unmatched + 1
        return nil
    end
    open_ops[key] = nil
    free_pids[#free_pids + 1] = op[1]
    local t = now_ns()
    local r = op[2]
    local head = string.format('{"time":%s,"process":%d,', t, op[1])
    local tail = string.format(',"f":"%s"%s,"request_id":"%s","status":%d}', r.f, r.goods, key,
                               status)
    if r.f == "read" then
        -- A read's answer: its stock, or no effect either way (HISTORY: info).
        local stock = status == 200 and body:match('"stock":(%-?%d+)')
        record(head .. (stock and ('"type":"ok","stock":' .. stock) or
            string.format('"type":"info","error":"http_%d"', status)) .. tail)
        return r.f
    end
    if status == 200 then
        local ok
        if r.f == "order" then
            ok = order_ok(body)
        else
            local remaining = body:match('"remaining":(%-?%d+)')
            local order_id = body:match('"order_id":(%d+)')
            if remaining and order_id then
                ok = string.format('"type":"ok","remaining":%s,"order_id":%s', remaining, order_id)
            end
        end
        record(head .. (ok or '"type":"info","error":"unreadable_200"') .. tail)
        return r.f
    end
    local err = body:match('"error":"([%w_]+)"') or ("http_" .. status)
    local kind
    if status == 409 and r.f == "order" and err == "sold_out" then
        -- a cart's 409 names the goods it found short
        kind = "fail"
        tail = string.format(',"goods_id":%s', body:match('"goods_id":(%d+)') or "0") .. tail
    elseif status == 409 and err == "insufficient_stock" then
        kind, err = "fail", "sold_out"
    elseif status == 503 then
        kind = (err == "commit_unknown") and "info" or "fail"
    elseif status == 502 then
        -- "unavailable": no replica received it; "upstream_failed": one did and may have sold.
        kind = (err == "unavailable") and "fail" or "info"
    elseif status == 504 then
        kind = "info"
    elseif status >= 400 and status < 500 then
        kind = "fail"
    else
        kind = "info" -- a 500 or anything unforeseen: it may have sold
    end
    record(head .. string.format('"type":"%s","error":"%s"', kind, err) .. tail)
    return r.f
end

-- Sends the prebuilt request r (prebuilt()): counted, and recorded when recording.
function send_request(r)
    -- Before starting the first thread, wrk calls its request() once to check that the
    -- request parses; that one is never sent, so it is not counted (nor recorded).
    if not verified then
        verified = true
        if thread_index == 1 then
            return hist_file and (r[1] .. "verify" .. r[2]) or r
        end
    end
    if now and not stats.t_first then stats.t_first = now() end
    stats.sent = stats.sent + 1
    if hist_file then return recorded_request(r) end
    return r
end

function request()
    -- With reads=N, N reads and then a sale, in turn; reads_only=1, reads alone.
    local pool = requests_by_goods
    turn = turn + 1
    if reads_per_sale < 0 or (reads_per_sale > 0 and turn % (reads_per_sale + 1) ~= 0) then
        pool = reads_by_goods
    end
    if #pool == 1 then return send_request(pool[1]) end
    return send_request(pool[math.random(#pool)])
end

-- Whether an answer is a read's: the recorded operation says (history=), else every one with
-- reads_only=1, else a 200 whose body is a stock report ("source": cached, "initial":
-- plain); an error answer then counts as a sale's.
local function answer_is_read(f, status, body)
    if f then return f == "read" end
    if reads_per_sale < 0 then return true end
    return reads_per_sale > 0 and status == 200 and
        (body:find('"source"', 1, true) or body:find('"initial"', 1, true)) ~= nil
end

function response(status, headers, body)
    local f = hist_file and record_answer(status, headers, body)
    if now then stats.t_last = now() end
    stats.answers = stats.answers + 1
    if answer_is_read(f, status, body) then
        stats.reads = stats.reads + 1
        if status == 200 then stats.reads_ok = stats.reads_ok + 1 end
    elseif status == 200 then
        stats.s200 = stats.s200 + 1
    elseif status == 409 then
        stats.s409 = stats.s409 + 1
    elseif status == 503 then
        stats.s503 = stats.s503 + 1
        -- Which 503: the error names are API.md's.
        if body:find('"lock_timeout"', 1, true) then
            stats.e503_lock_timeout = stats.e503_lock_timeout + 1
        elseif body:find('"lock_lost"', 1, true) then
            stats.e503_lock_lost = stats.e503_lock_lost + 1
        elseif body:find('"unavailable"', 1, true) then
            stats.e503_unavailable = stats.e503_unavailable + 1
        end
    else
        stats.other = stats.other + 1
        others[status] = (others[status] or 0) + 1
    end
    if share and stats.answers >= share then finish() end
end
