# timeline.awk - the drawing of loadtest/timeline (its header describes the input). POSIX awk
# (mawk, gawk), no extension: it reads every event, then draws in END.

function esc(s) {
    gsub(/&/, "\\&amp;", s)
    gsub(/</, "\\&lt;", s)
    gsub(/>/, "\\&gt;", s)
    return s
}
function y(ms) { return sprintf("%.1f", TOP + (ms - T_START) * K) }
function text(x, yy, s, anchor, size, color, weight) {
    printf "<text x=\"%s\" y=\"%s\" text-anchor=\"%s\" font-size=\"%s\" fill=\"%s\"%s>%s</text>\n", \
        x, yy, anchor, size, color, (weight != "" ? " font-weight=\"" weight "\"" : ""), esc(s)
}
function line(x1, y1, x2, y2, color, width, dash) {
    printf "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"%s\" stroke-width=\"%s\"%s/>\n", \
        x1, y1, x2, y2, color, width, (dash != "" ? " stroke-dasharray=\"" dash "\"" : "")
}
function rect(x, yy, w, h, fill, opacity, stroke) {
    if (h < 1) h = 1
    printf "<rect x=\"%s\" y=\"%s\" width=\"%s\" height=\"%.1f\" fill=\"%s\" fill-opacity=\"%s\"%s/>\n", \
        x, yy, w, h, fill, opacity, (stroke != "" ? " stroke=\"" stroke "\"" : "")
}
# The request that a replica's event at ms belongs to: sent to that replica by then, and not
# answered long before (the latest sent of those).
function request_of(instance, ms,    i, n, best) {
    n = instance
    sub(/^svc-/, "", n)
    best = ""
    for (i = 1; i <= NREQ; i++)
        if (REPLICA[REQ[i]] == n && SENT[REQ[i]] <= ms + 50 &&
            (!(REQ[i] in ANSWERED) || ANSWERED[REQ[i]] >= ms - 300))
            best = REQ[i]
    return best
}
# The request that took a holding the lock lane shows from ms: by the traces, the request
# that entered its section last by then (a few ms of slack: the sample may come first) and
# has no holding yet; without traces, one in flight then, not yet a holder, the earliest sent
# of those; else any request in flight.
function holder_of(ms,    i, r, best) {
    best = ""
    for (i = 1; i <= NREQ; i++) {
        r = REQ[i]
        if ((r in ENTERED) && !(r in HELD) && ENTERED[r] <= ms + 30 && (best == "" || ENTERED[r] > ENTERED[best]))
            best = r
    }
    if (best != "") return best
    for (i = 1; i <= NREQ; i++) {
        r = REQ[i]
        if (SENT[r] <= ms + 30 && (!(r in ANSWERED) || ANSWERED[r] >= ms - 30) && !(r in HELD))
            return r
    }
    for (i = 1; i <= NREQ; i++) {
        r = REQ[i]
        if (SENT[r] <= ms + 30 && (!(r in ANSWERED) || ANSWERED[r] >= ms - 30))
            return r
    }
    return "?"
}
# A holding of the lock: [from, to), by whom, how it ended.
function holding_open(ms, who) {
    NH++
    H_FROM[NH] = ms
    H_TO[NH] = ms
    H_WHO[NH] = who
    H_END[NH] = ""
    HELD[who] = 1
}

# When a traced request stopped believing it held the lock: its release point, else its
# answer.
function hold_end(r) {
    if (r in RELEASED) return RELEASED[r]
    if (r in SERVED) return SERVED[r]
    if (r in ANSWERED) return ANSWERED[r]
    return T_END
}
# A fencing token as the drawing shows it: as it is when short; a long one (a counter seeded
# from the clock) relative to the row's smallest, "t", "t+1", so that the order shows.
function short_fence(f) {
    if (f == "-" || f == "") return ""
    if (length(f) <= 8) return f
    return (f == FENCE_MIN) ? "t" : "t+" (f - FENCE_MIN)
}

BEGIN {
    COLOR["A"] = "#1f77b4"; COLOR["B"] = "#e377c2"; COLOR["C"] = "#2ca02c"; COLOR["A2"] = "#9467bd"
    COLOR["?"] = "#7f7f7f"
    NREQ = 0; NF_ = 0; NO = 0; NL = 0; ND = 0
    RESET = 100
    T_MAX = 0
}
$1 == "row" { MODE = $2; SCENARIO = $3 }
$1 == "lease" { LEASE = $2 + 0 }
$1 == "reset" { RESET = $2 + 0 }
$1 == "books" { SOLD = $2; TAKEN = $3; OVERSOLD = $4 }
$1 == "send" {
    REQ[++NREQ] = $3; SENT[$3] = $2 + 0; REPLICA[$3] = $4; FAULT[$3] = $5
    if ($2 + 0 > T_MAX) T_MAX = $2 + 0
}
$1 == "answer" {
    ANSWERED[$3] = $2 + 0; STATUS[$3] = $4; ERROR[$3] = $5
    if ($2 + 0 > T_MAX) T_MAX = $2 + 0
}
$1 == "fault" {
    F_MS[++NF_] = $2 + 0
    s = $0
    sub(/^fault [-0-9]+ /, "", s)
    F_TEXT[NF_] = s
    if ($2 + 0 > T_MAX) T_MAX = $2 + 0
}
$1 == "order" { O_MS[++NO] = $2 + 0; O_INST[NO] = $3; O_FENCE[NO] = $4 }
# A replica's trace of a request (GET /api/lab/trace/ID): the points it passed, what it saw.
$1 == "started" { TRACED[$3] = 1; T_STARTED[$3] = $2 + 0 }
$1 == "point" {
    r = $3; k = ++NP[r]; TRACED[r] = 1
    P_MS[r, k] = $2 + 0; P_NAME[r, k] = $4; P_HELD[r, k] = $5 + 0
    P_STOCK[r, k] = $6; P_FENCE[r, k] = $7; P_TOKEN[r, k] = $8
    if ($4 == "entered" && !(r in ENTERED)) ENTERED[r] = $2 + 0
    if ($4 == "read") READV[r] = $6
    if ($4 == "written") WROTE[r] = $6
    if ($4 == "checked") CHECKED[r] = $2 + 0
    if ($4 == "begun" && !(r in BEGUN)) BEGUN[r] = $2 + 0
    if ($4 == "committed") COMMITTED[r] = $2 + 0
    if ($4 == "release") RELEASED[r] = $2 + 0
    if ($2 + 0 > T_MAX) T_MAX = $2 + 0
}
$1 == "served" { SERVED[$3] = $2 + 0; if ($2 + 0 > T_MAX) T_MAX = $2 + 0 }
$1 == "lock" { L_MS[++NL] = $2 + 0; L_PTTL[NL] = $3 + 0; L_HOLDER[NL] = (NF >= 4 ? $4 : "") }
$1 == "db" {
    split($3, f, "|")
    D_MS[++ND] = $2 + 0; D_STOCK[ND] = f[1] + 0; D_N[ND] = f[2] + 0; D_LIST[ND] = f[3]; D_ROW[ND] = f[4]
}

END {
    # The row's smallest long token, from which short_fence counts.
    for (key in P_FENCE)
        if (P_FENCE[key] ~ /^[0-9]+$/ && length(P_FENCE[key]) > 8 && (FENCE_MIN == "" || P_FENCE[key] + 0 < FENCE_MIN + 0))
            FENCE_MIN = P_FENCE[key]
    for (i = 1; i <= NO; i++)
        if (O_FENCE[i] ~ /^[0-9]+$/ && length(O_FENCE[i]) > 8 && (FENCE_MIN == "" || O_FENCE[i] + 0 < FENCE_MIN + 0))
            FENCE_MIN = O_FENCE[i]
    # Sort the request lanes by when they were sent (insertion sort: a handful).
    for (i = 2; i <= NREQ; i++)
        for (j = i; j > 1 && SENT[REQ[j]] < SENT[REQ[j - 1]]; j--) { t = REQ[j]; REQ[j] = REQ[j - 1]; REQ[j - 1] = t }

    # ---- the lock's holdings: from the Redis key's samples, else from the lock row's ----
    NH = 0
    use_row = (NL == 0)
    prev_present = 0; prev_holder = ""; prev_pttl = 0; prev_ms = 0
    n = use_row ? ND : NL
    for (i = 1; i <= n; i++) {
        if (use_row) { ms = D_MS[i]; holder = D_ROW[i]; present = (holder != ""); pttl = -1 }
        else { ms = L_MS[i]; holder = L_HOLDER[i]; pttl = L_PTTL[i]; present = (pttl != -2) }
        if (ms < -200) continue
        if (present) {
            # A new holding: the key appeared, its holder changed, or (an owner-less "1")
            # its lease went back up: set again by someone else.
            renewed = (!use_row && pttl > 0 && prev_pttl >= 0 && pttl > prev_pttl + 50)
            if (!prev_present || holder != prev_holder || (renewed && holder == "1")) {
                # Set again as the old lease said it would end: it ran out, and the next
                # waiter took it at once (between two samples).
                if (prev_present)
                    H_END[NH] = (prev_pttl >= 0 && ms >= prev_ms + prev_pttl - 40) ? "lease ran out" : "ended: next holder in"
                holding_open(ms, holder_of(ms))
            }
            H_TO[NH] = ms
            H_PTTL[NH] = pttl
            H_LASTMS[NH] = ms
            H_VALUE[NH] = holder
        } else if (prev_present) {
            H_TO[NH] = ms
            # Gone at about the moment its lease said: it ran out; else someone deleted it.
            if (!use_row && prev_pttl >= 0 && ms >= prev_ms + prev_pttl - 40)
                H_END[NH] = "lease ran out"
            else
                H_END[NH] = "released (deleted)"
        }
        prev_present = present; prev_holder = holder; prev_pttl = pttl; prev_ms = ms
    }
    # A holding still there at the last sample: to the end of the picture.
    still_held = prev_present

    # ---- the commits: each sample that shows more orders ----
    # From the reset: a commit made before the probe's first sample is drawn at that sample.
    NC = 0
    last_n = 0; last_stock = RESET
    FIRST_STOCK = RESET
    for (i = 1; i <= ND; i++) {
        if (D_N[i] > last_n) {
            k = split(D_LIST[i], items, ",")
            dstock = last_stock - D_STOCK[i]
            for (j = last_n + 1; j <= D_N[i]; j++) {
                NC++
                C_MS[NC] = D_MS[i]
                split(items[j], parts, "/")
                C_INST[NC] = parts[1]; C_FENCE[NC] = parts[2]
                # The first dstock new orders took a unit each; the rest took none: sold twice.
                if (j - last_n <= dstock) { C_WROTE[NC] = last_stock - (j - last_n); C_TWICE[NC] = 0 }
                else { C_WROTE[NC] = D_STOCK[i]; C_TWICE[NC] = 1 }
                C_REQ[NC] = request_of(C_INST[NC], C_MS[NC])
                if (C_MS[NC] > T_MAX) T_MAX = C_MS[NC]
            }
        }
        last_n = D_N[i]; last_stock = D_STOCK[i]
    }

    # ---- the commits the replicas traced: they replace the probe's for traced requests ----
    # (their moment is the replica's own "committed" point, their read and write observed,
    # not inferred; a sale is a unit sold twice when it read a stock an earlier sale read).
    for (i = 1; i <= NC; i++) C_OBS[i] = 0
    ntc = 0
    for (i = 1; i <= NREQ; i++) if (REQ[i] in COMMITTED) ntc++
    if (ntc > 0) {
        n2 = 0
        for (i = 1; i <= NC; i++) if (!(C_REQ[i] in TRACED)) {
            n2++
            K_MS[n2] = C_MS[i]; K_REQ[n2] = C_REQ[i]; K_WROTE[n2] = C_WROTE[i]; K_READ[n2] = C_WROTE[i] + 1
            K_TWICE[n2] = C_TWICE[i]; K_OBS[n2] = 0
        }
        for (i = 1; i <= NREQ; i++) {
            r = REQ[i]
            if (!(r in COMMITTED)) continue
            n2++
            K_MS[n2] = COMMITTED[r]; K_REQ[n2] = r; K_OBS[n2] = 1
            K_WROTE[n2] = (r in WROTE) ? WROTE[r] : "?"; K_READ[n2] = (r in READV) ? READV[r] : "?"
        }
        for (i = 2; i <= n2; i++)
            for (j = i; j > 1 && K_MS[j] < K_MS[j - 1]; j--) {
                t = K_MS[j]; K_MS[j] = K_MS[j - 1]; K_MS[j - 1] = t
                t = K_REQ[j]; K_REQ[j] = K_REQ[j - 1]; K_REQ[j - 1] = t
                t = K_WROTE[j]; K_WROTE[j] = K_WROTE[j - 1]; K_WROTE[j - 1] = t
                t = K_READ[j]; K_READ[j] = K_READ[j - 1]; K_READ[j - 1] = t
                t = K_TWICE[j]; K_TWICE[j] = K_TWICE[j - 1]; K_TWICE[j - 1] = t
                t = K_OBS[j]; K_OBS[j] = K_OBS[j - 1]; K_OBS[j - 1] = t
            }
        split("", seen_read)
        for (i = 1; i <= n2; i++) {
            if (K_OBS[i]) K_TWICE[i] = (K_READ[i] in seen_read) ? 1 : 0
            seen_read[K_READ[i]] = 1
            C_MS[i] = K_MS[i]; C_REQ[i] = K_REQ[i]; C_WROTE[i] = K_WROTE[i]; C_READ[i] = K_READ[i]
            C_TWICE[i] = K_TWICE[i]; C_OBS[i] = K_OBS[i]
            if (C_OBS[i] && C_TWICE[i]) SOLD_TWICE[C_REQ[i]] = 1
        }
        NC = n2
    }

    # ---- the scale ----
    T_START = -100
    T_END = T_MAX + 250
    for (i = 1; i <= NH; i++) if (H_TO[i] + 100 > T_END && H_TO[i] < T_MAX + 1500) T_END = H_TO[i] + 100
    span = T_END - T_START
    K = 0.32
    if (span * K > 900) K = 900 / span
    TOP = 128
    LANE_W = 150
    X0 = 70
    nl = NREQ
    LOCK_X = X0 + nl * LANE_W
    STOCK_X = LOCK_X + 190
    WIDTH = STOCK_X + 235
    BOTTOM = TOP + span * K
    HEIGHT = BOTTOM + 84

    printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Verdana, sans-serif\">\n", WIDTH, HEIGHT, WIDTH, HEIGHT
    rect(0, 0, WIDTH, HEIGHT, "#ffffff", 1, "")
    text(12, 24, MODE " / " SCENARIO, "start", 17, "#000", "bold")
    text(12, 44, "a ladder row drawn from a real run: requests straight to the replicas, their points as the replicas traced them; lease L = " LEASE " ms", "start", 11, "#444", "")

    # The ruler: ms since A was sent.
    step = (span > 4000) ? 1000 : 500
    for (t = 0; t <= T_END; t += step) {
        line(X0 - 6, y(t), STOCK_X + 200, y(t), "#e8e8e8", 1, "")
        text(X0 - 10, y(t) + 4, t " ms", "end", 10, "#666", "")
    }

    # Lane headers.
    for (i = 1; i <= NREQ; i++) {
        r = REQ[i]; cx = X0 + (i - 0.5) * LANE_W
        text(cx, 72, r, "middle", 15, COLOR[r], "bold")
        text(cx, 88, "to svc-" REPLICA[r], "middle", 10, "#333", "")
        if (FAULT[r] != "-") {
            text(cx, 101, "X-Fault:", "middle", 9, "#b00", "")
            text(cx, 112, FAULT[r], "middle", 9, "#b00", "")
        }
        line(cx, TOP, cx, BOTTOM, "#cccccc", 1, "3,3")
    }
    lcx = LOCK_X + 85
    if (MODE ~ /^pg-lockrow/) ltitle = "lock row (goods_locks)"
    else if (NL > 0) ltitle = "lock key in Redis"
    else ltitle = "no lock key"
    text(lcx, 72, ltitle, "middle", 13, "#000", "bold")
    if (NL > 0) text(lcx, 88, (MODE == "redlock" ? "(node 1 of 5)" : "holder, PTTL"), "middle", 10, "#333", "")
    else if (MODE ~ /^pg-lockrow/) text(lcx, 88, "its owner", "middle", 10, "#333", "")
    else text(lcx, 88, "(PostgreSQL's own locks)", "middle", 10, "#333", "")
    line(lcx, TOP, lcx, BOTTOM, "#cccccc", 1, "3,3")
    scx = STOCK_X + 70
    text(scx, 72, "stock row", "middle", 13, "#000", "bold")
    text(scx, 88, "goods.stock, orders", "middle", 10, "#333", "")

    # The lock's holdings, shaded in the holder's colour, in the lock lane and the holder's.
    for (i = 1; i <= NH; i++) {
        to = H_TO[i]
        if (i == NH && still_held) to = T_END
        w = H_WHO[i]
        h = (to - H_FROM[i]) * K
        rect(lcx - 40, y(H_FROM[i]), 80, h, COLOR[w], 0.35, COLOR[w])
        # A short holding: one label beside it, not two on top of each other.
        short = (h < 30 && H_END[i] != "lease ran out" && !(i == NH && still_held))
        if (short) {
            text(lcx + 44, y(H_FROM[i]) + h / 2, "held by " w ", " int(to - H_FROM[i]) " ms", "start", 9, "#000", "bold")
            if (H_END[i] != "") text(lcx + 44, y(H_FROM[i]) + h / 2 + 10, H_END[i], "start", 8.5, "#333", "")
        } else
            text(lcx, y(H_FROM[i]) + 13, "held by " w, "middle", 10, "#000", "bold")
        # In the holder's own lane only while it lives: a dead holder's lock outlives it. A
        # traced holder's lane shows its own view instead (below).
        for (j = 1; j <= NREQ; j++) if (REQ[j] == w && !(w in TRACED)) {
            cx = X0 + (j - 0.5) * LANE_W
            rto = (w in ANSWERED && ANSWERED[w] < to) ? ANSWERED[w] : to
            if (rto > H_FROM[i]) rect(cx - 11, y(H_FROM[i]), 22, (rto - H_FROM[i]) * K, COLOR[w], 0.30, "")
        }
        if (H_END[i] == "lease ran out") {
            line(lcx - 60, y(H_TO[i]), lcx + 60, y(H_TO[i]), "#d62728", 2, "6,3")
            text(lcx + 2, y(H_TO[i]) - 4, "lease ran out (" w "'s)", "middle", 10, "#d62728", "bold")
        } else if (H_END[i] != "" && !short) {
            text(lcx, y(H_TO[i]) - 4, H_END[i], "middle", 9, "#333", "")
        } else if (i == NH && still_held) {
            text(lcx, y(H_TO[i]) + 13, "still held: no expiry", "middle", 10, "#d62728", "bold")
        }
        if (H_PTTL[i] == -1 && H_END[i] != "lease ran out" && NL > 0)
            text(lcx + 44, y(H_FROM[i]) + 26, "no TTL", "start", 9, "#d62728", "")
        # The lease ran out while its holder, by its own trace, was still inside: mark it there.
        if (H_END[i] == "lease ran out" && (w in ENTERED) && H_TO[i] > ENTERED[w] && H_TO[i] < hold_end(w)) {
            for (j = 1; j <= NREQ; j++) if (REQ[j] == w) {
                cx = X0 + (j - 0.5) * LANE_W
                line(cx - 30, y(H_TO[i]), lcx - 60, y(H_TO[i]), "#d62728", 1, "2,3")
                line(cx - 16, y(H_TO[i]), cx + 16, y(H_TO[i]), "#d62728", 2, "6,3")
                text(cx - 18, y(H_TO[i]) - 3, "lease gone,", "end", 9, "#d62728", "bold")
                text(cx - 18, y(H_TO[i]) + 8, w " still inside", "end", 9, "#d62728", "bold")
            }
        }
    }
    # A traced request's own view of its holding: from its section's entry to its release
    # (or its answer), shaded in its lane. Only where there is a lock to hold.
    if (NL > 0 || MODE ~ /^pg-lockrow/)
        for (j = 1; j <= NREQ; j++) {
            w = REQ[j]
            if (!(w in ENTERED)) continue
            cx = X0 + (j - 0.5) * LANE_W
            rect(cx - 11, y(ENTERED[w]), 22, (hold_end(w) - ENTERED[w]) * K, COLOR[w], 0.30, "")
        }

    # The requests: from sent to answered, with their transaction's start and their sale.
    for (i = 1; i <= NREQ; i++) {
        r = REQ[i]; cx = X0 + (i - 0.5) * LANE_W
        end = (r in ANSWERED) ? ANSWERED[r] : T_END
        rect(cx - 6, y(SENT[r]), 12, (end - SENT[r]) * K, "#f4f4f4", 1, "#999")
        text(cx - 14, y(SENT[r]) + 4, "sent", "end", 9, "#333", "")
        if (!(r in ANSWERED)) continue
        if (STATUS[r] == "000") {
            text(cx, y(end) + 14, "no answer: died", "middle", 10, "#d62728", "bold")
            line(cx - 8, y(end) - 8, cx + 8, y(end) + 8, "#d62728", 2, "")
            line(cx - 8, y(end) + 8, cx + 8, y(end) - 8, "#d62728", 2, "")
        } else {
            s = STATUS[r] (ERROR[r] != "-" ? " " ERROR[r] : "")
            text(cx, y(end) + 14, s, "middle", 10, (STATUS[r] == "200" ? "#2a7a2a" : "#c05000"), "bold")
            line(cx - 10, y(end), cx + 10, y(end), "#333", 2, "")
        }
    }
    # The pauses its X-Fault asked for, drawn back from where they end: a pause before the
    # commit ends at its commit, one before the release (which follows the commit) at its
    # answer. Only their length is known, not their start: placed, not observed.
    for (i = 1; i <= NREQ; i++) {
        r = REQ[i]; cx = X0 + (i - 0.5) * LANE_W
        nf = split(FAULT[r], fl, ",")
        for (k = 1; k <= nf; k++) {
            if (split(fl[k], kv, "=") != 2) continue
            what = kv[1]; p = kv[2] + 0
            pend = ""
            # Traced: where the pause really was, between two of its points.
            pfrom = ""
            if ((what == "pause-before-commit" || what == "stop-before-commit") && (r in CHECKED) && (r in COMMITTED)) {
                pfrom = CHECKED[r]; pend = COMMITTED[r]
            } else if (what == "pause-before-release" && (r in RELEASED) && (r in SERVED)) {
                pfrom = RELEASED[r]; pend = SERVED[r]
            } else if (what == "stop-before-claim" && (r in ENTERED) && (r in BEGUN)) {
                pfrom = ENTERED[r]; pend = BEGUN[r]
            }
            if (pfrom != "") {
                rect(cx - 6, y(pfrom), 12, (pend - pfrom) * K, "#555555", 0.45, "")
                lbl = (what ~ /^stop-before-/) ? "process stopped" : (what == "pause-before-release" ? "paused in release" : "paused")
                text(cx - 10, y((pfrom + pend) / 2), lbl, "end", 9, "#333", "")
                text(cx - 10, y((pfrom + pend) / 2) + 11, int(pend - pfrom) " ms", "end", 9, "#333", "")
                continue
            }
            if (what == "pause-before-commit" || what == "stop-before-commit") {
                for (j = 1; j <= NC; j++) if (C_REQ[j] == r) { pend = C_MS[j]; break }
                if (pend == "" && (r in ANSWERED)) pend = ANSWERED[r]
            } else if (what == "pause-before-release" && (r in ANSWERED))
                pend = ANSWERED[r]
            if (pend == "") continue
            rect(cx - 6, y(pend - p), 12, p * K, "#555555", 0.45, "")
            lbl = (what == "stop-before-commit") ? "process stopped" : (what == "pause-before-release" ? "paused in release" : "paused")
            text(cx - 10, y(pend - p / 2), lbl, "end", 9, "#333", "")
            text(cx - 10, y(pend - p / 2) + 11, p " ms", "end", 9, "#333", "")
        }
    }
    for (i = 1; i <= NO; i++) {
        r = request_of(O_INST[i], O_MS[i])
        if (r in TRACED) continue
        for (j = 1; j <= NREQ; j++) if (REQ[j] == r) {
            cx = X0 + (j - 0.5) * LANE_W
            printf "<circle cx=\"%s\" cy=\"%s\" r=\"3.5\" fill=\"#333\"/>\n", cx, y(O_MS[i])
            text(cx + 8, y(O_MS[i]) + 4, "BEGIN" (short_fence(O_FENCE[i]) != "" ? ", token " short_fence(O_FENCE[i]) : ""), "start", 9, "#333", "")
        }
    }

    # A traced request's time at its replica before its section (or its answer, when it never
    # got in): waiting for the lock where there is one, framed by a bracket.
    for (j = 1; j <= NREQ; j++) {
        r = REQ[j]; cx = X0 + (j - 0.5) * LANE_W
        if (!(r in T_STARTED)) continue
        wend = (r in ENTERED) ? ENTERED[r] : ((r in SERVED) ? SERVED[r] : T_STARTED[r])
        line(cx - 16, y(T_STARTED[r]), cx - 8, y(T_STARTED[r]), "#333", 1, "")
        text(cx - 18, y(T_STARTED[r]) + 3, "at svc-" REPLICA[r], "end", 8.5, "#333", "")
        if (wend - T_STARTED[r] >= 100) {
            line(cx - 12, y(T_STARTED[r]), cx - 12, y(wend), "#333", 1, "2,2")
            if (NL > 0 || MODE ~ /^pg-lockrow/) {
                text(cx - 16, y((T_STARTED[r] + wend) / 2), "waiting for", "end", 8.5, "#333", "")
                text(cx - 16, y((T_STARTED[r] + wend) / 2) + 10, "the lock " int(wend - T_STARTED[r]) " ms", "end", 8.5, "#333", "")
            }
        }
        if ((r in SERVED) && !(r in ENTERED)) {
            line(cx - 16, y(SERVED[r]), cx - 8, y(SERVED[r]), "#333", 1, "")
            text(cx - 18, y(SERVED[r]) + 3, "answered", "end", 8.5, "#333", "")
        }
    }

    # Where a request was held at a point (X-Fault: hold-at) until the driver stepped it on:
    # grey from the moment it reached the point for as long as it was held there.
    for (j = 1; j <= NREQ; j++) {
        r = REQ[j]; cx = X0 + (j - 0.5) * LANE_W
        for (k = 1; k <= NP[r]; k++) {
            if (P_HELD[r, k] <= 0) continue
            rect(cx - 6, y(P_MS[r, k]), 12, P_HELD[r, k] * K, "#555555", 0.45, "")
        }
    }

    # The points each traced request passed, as its replica recorded them: a dot at the true
    # moment, its label pushed down below the one before when they come too close.
    for (j = 1; j <= NREQ; j++) {
        r = REQ[j]; cx = X0 + (j - 0.5) * LANE_W
        last_label = -1000
        for (k = 1; k <= NP[r]; k++) {
            pn = P_NAME[r, k]; yy = y(P_MS[r, k]) + 0
            if (pn == "entered") {
                lbl = (NL > 0 || MODE ~ /^pg-lockrow/) ? "lock taken" : "entered"
                fz = short_fence(P_FENCE[r, k])
                if (fz != "") lbl = lbl ", token " fz
            } else if (pn == "begun") {
                lbl = "BEGIN"
                # Refused at its claim, the read: its token older than the row's.
                if (ERROR[r] == "lock_lost" && !(r in READV)) lbl = lbl "; its claim refused"
            }
            else if (pn == "read") lbl = "read " P_STOCK[r, k]
            else if (pn == "written") lbl = "wrote " P_STOCK[r, k]
            else if (pn == "checked") lbl = "checked"
            else if (pn == "committed") lbl = "COMMIT"
            else if (pn == "release") lbl = "release"
            else lbl = pn
            if (P_HELD[r, k] > 0) lbl = lbl " (held " P_HELD[r, k] " ms)"
            ty = yy + 3
            if (ty < last_label + 10) ty = last_label + 10
            last_label = ty
            col = "#333"; wt = ""
            if (pn == "read" || pn == "written" || pn == "committed") { col = "#000"; wt = "bold" }
            # The read of a sale that sold a unit twice: a stock an earlier sale had read.
            if ((pn == "read" || pn == "committed") && (r in SOLD_TWICE)) {
                col = "#d62728"
                if (pn == "read") lbl = lbl " (stale)"
            }
            printf "<circle cx=\"%s\" cy=\"%.1f\" r=\"2.5\" fill=\"#333\"/>\n", cx, yy
            if (ty > yy + 4) line(cx + 3, yy, cx + 12, ty - 3, "#999", 0.6, "")
            text(cx + 14, ty, lbl, "start", 8.5, col, wt)
        }
    }

    # The stock row: its value over time, each commit an arrow from its request.
    line(scx, TOP, scx, BOTTOM, "#888", 2, "")
    text(scx + 8, y(T_START) + 14, "stock " FIRST_STOCK ", orders 0", "start", 10, "#000", "")
    last_label = -1000
    for (i = 1; i <= NC; i++) {
        r = C_REQ[i]
        col = C_TWICE[i] ? "#d62728" : "#2a7a2a"
        yy = y(C_MS[i])
        # Two commits in one sample: the second's labels below the first's.
        ty = yy + 0
        if (ty < last_label + 30) ty = last_label + 30
        last_label = ty
        for (j = 1; j <= NREQ; j++) if (REQ[j] == r) {
            cx = X0 + (j - 0.5) * LANE_W
            line(cx + 6, yy, scx - 4, yy, col, (C_TWICE[i] ? 2.5 : 1.5), "")
            printf "<polygon points=\"%s,%s %s,%s %s,%s\" fill=\"%s\"/>\n", scx - 4, yy, scx - 12, yy - 4, scx - 12, yy + 4, col
            # A traced commit is labelled among its request's points; a probe's here.
            lbl = "COMMIT: wrote " C_WROTE[i] " (read " C_WROTE[i] + 1 ")"
            if (!C_OBS[i]) text(cx + 10, (ty == yy ? yy - 4 : ty), lbl, "start", 9, col, (C_TWICE[i] ? "bold" : ""))
        }
        if (C_TWICE[i]) {
            rect(scx + 4, ty - 11, 150, 30, "#d62728", 0.12, "#d62728")
            text(scx + 8, ty + 2, "stock " C_WROTE[i] ", orders " i, "start", 10, "#d62728", "bold")
            text(scx + 8, ty + 15, "one unit sold twice", "start", 10, "#d62728", "bold")
        } else {
            text(scx + 8, ty + 4, "stock " C_WROTE[i] ", orders " i, "start", 10, "#000", "")
        }
    }

    # The faults the driver caused, across every lane.
    for (i = 1; i <= NF_; i++) {
        line(X0 - 4, y(F_MS[i]), STOCK_X + 200, y(F_MS[i]), "#d62728", 1.5, "2,2")
        text(STOCK_X + 200, y(F_MS[i]) - 4, F_TEXT[i], "end", 10, "#d62728", "")
    }

    # The books, and what the picture is made of.
    text(12, BOTTOM + 26, "the books: sold " SOLD ", the stock gave up " TAKEN ", oversold " OVERSOLD, "start", 13, (OVERSOLD > 0 ? "#d62728" : "#000"), "bold")
    ntr = 0
    for (i = 1; i <= NREQ; i++) if (REQ[i] in TRACED) ntr++
    if (ntr > 0) {
        text(12, BOTTOM + 46, "Drawn by loadtest/timeline: each request's points (dots), its reads and writes, and its COMMIT as its replica traced them (GET /api/lab/trace/ID, on the wall clock);", "start", 9, "#555", "")
        text(12, BOTTOM + 59, "its lane shaded from taking the lock to its release, as it believed; sends and answers as the driver saw them; the lock lane as a probe sampled the key every 20 ms;", "start", 9, "#555", "")
        text(12, BOTTOM + 72, "grey: the pause or the hold its X-Fault asked for, between its points. No dots: it never got in (its replica's wait, bracketed), or no trace (its replica died with it).", "start", 9, "#555", "")
    } else {
        text(12, BOTTOM + 46, "Drawn by loadtest/timeline from loadtest/ladder's events: sends and answers as the driver saw them; the lock and the row sampled every few tens of ms;", "start", 9, "#555", "")
        text(12, BOTTOM + 59, "BEGIN is the sale's transaction start (orders.created); a COMMIT is placed at the first sample showing it, its read inferred (read = written + 1);", "start", 9, "#555", "")
        text(12, BOTTOM + 72, "grey in a lane: the pause its X-Fault asked for, drawn back from where it ends (its commit, or its answer).", "start", 9, "#555", "")
    }
    print "</svg>"
}
