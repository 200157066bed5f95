# timeline.awk - the drawing of loadtest/timeline (its header describes the input). POSIX awk
# (mawk, gawk), no extension: it reads every event, then draws in END.

function esc(s) {
    gsub(/&/, "\\&amp;", s)
    gsub(/</, "\\&lt;", s)
    gsub(/>/, "\\&gt;", s)
    return s
}
# Where a moment is drawn: true scale, but a stretch where nothing happens (a lease running
# out, a hold) is drawn BREAK_PX high and marked, so that the moments that decide are not
# crammed together (the breaks are chosen in END: NB, B_FROM, B_TO).
function yv(ms,    i, v) {
    v = TOP + (ms - T_START) * K
    for (i = 1; i <= NB; i++) {
        if (ms >= B_TO[i]) v -= (B_TO[i] - B_FROM[i]) * K - BREAK_PX
        else if (ms > B_FROM[i]) { v -= (ms - B_FROM[i]) * K; v += (ms - B_FROM[i]) / (B_TO[i] - B_FROM[i]) * BREAK_PX }
    }
    return v
}
function y(ms) { return sprintf("%.1f", yv(ms)) }
# The height from one moment to a later one.
function hgt(from, to) { return yv(to) - yv(from) }
function text(x, yy, s, anchor, size, color, weight) {
    printf "<text x=\"%s\" y=\"%s\" text-anchor=\"%s\" font-size=\"%s\" fill=\"%s\"%s>%s</text>\n", \
        x, yy, anchor, size, color, (weight != "" ? " font-weight=\"" weight "\"" : ""), esc(s)
}
# A label inside the picture: moved down until it overlaps no label drawn before it (nor an
# arrow: see occupy), and drawn on a white halo, so that a line under it does not cut it.
# Returns the y it was drawn at.
function ltext(x, yy, s, anchor, size, color, weight) {
    yy = place(x, yy, s, anchor, size, weight)
    printf "<text x=\"%s\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%s\" fill=\"%s\"%s paint-order=\"stroke\" stroke=\"#fff\" stroke-width=\"3\" stroke-linejoin=\"round\">%s</text>\n", \
        x, yy, anchor, size, color, (weight != "" ? " font-weight=\"" weight "\"" : ""), esc(s)
    return yy
}
# What the lock lane says of holding i: whose it is, and how that is known.
function holding_label(i) {
    if (H_BY[i] == "attempt") return H_WHO[i] "'s attempt, given back"
    if (H_BY[i] == "named") return "held by " substr(H_VALUE[i], 2)
    return "held by " H_WHO[i]
}

# The lane of extra key k beside the lock's: its header, and each stretch the key existed,
# shaded in its holder's colour (matched as the lock lane's are), with the holder's name.
function extra_lane(k,    ex, lbl, i, from, who, val, on, t, last) {
    ex = LOCK_X + 190 + (k - 0.5) * EXTRA_W
    lbl = LN_LABEL[k]
    if (lbl ~ /^node-/) { sub(/^node-/, "node ", lbl); text(ex, 72, lbl, "middle", 11, "#000", "bold") }
    else { sub(/^goods-/, "goods ", lbl); text(ex, 72, lbl, "middle", 11, "#000", "bold"); text(ex, 88, "its key", "middle", 10, "#333", "") }
    line(ex, TOP, ex, BOTTOM, "#cccccc", 1, "3,3")
    on = 0; last = -1000
    for (i = 1; i <= LN_N[k] + 1; i++) {
        t = (i <= LN_N[k]) ? LN_MS[k, i] : T_END
        val = (i <= LN_N[k] && LN_PTTL[k, i] != -2) ? LN_HOLDER[k, i] : ""
        if (t < -200) continue
        if (on && (i > LN_N[k] || val != cur_val)) {
            rect(ex - 16, y(from), 32, hgt(from, t), COLOR[who], 0.35, COLOR[who])
            ltext(ex, y(from) + 11, who, "middle", 9, "#000", "bold")
            on = 0
        }
        if (!on && val != "") { on = 1; from = t; cur_val = val; who = holder_of(t, val) }
    }
}

# One entry of the legend at (lx, ly), moving lx on: its mark, then its words.
function legend_item(kind, words,    x) {
    x = lx
    if (kind == "flight") rect(x, ly - 9, 8, 12, "#f4f4f4", 1, "#999")
    else if (kind == "hold") rect(x, ly - 9, 10, 12, COLOR["A"], 0.35, "")
    else if (kind == "pause") rect(x, ly - 9, 8, 12, "#555555", 0.45, "")
    else if (kind == "dot") printf "<circle cx=\"%s\" cy=\"%s\" r=\"2.5\" fill=\"#333\"/>\n", x + 4, ly - 3
    else if (kind == "commit" || kind == "twice") {
        line(x, ly - 3, x + 16, ly - 3, (kind == "twice" ? "#d62728" : "#2a7a2a"), 2, "")
        printf "<polygon points=\"%s,%s %s,%s %s,%s\" fill=\"%s\"/>\n", x + 18, ly - 3, x + 12, ly - 6, x + 12, ly, (kind == "twice" ? "#d62728" : "#2a7a2a")
        x += 8
    } else if (kind == "lease") { line(x, ly - 3, x + 18, ly - 3, "#d62728", 2, "6,3"); x += 8 }
    else if (kind == "driver") { line(x, ly - 3, x + 18, ly - 3, "#d62728", 1.5, "2,2"); x += 8 }
    else if (kind == "break") {
        printf "<path d=\"M%s,%s L%s,%s L%s,%s L%s,%s\" fill=\"none\" stroke=\"#999\"/>\n", x, ly - 1, x + 6, ly - 7, x + 12, ly - 1, x + 18, ly - 7
        x += 8
    }
    text(x + 14, ly, words, "start", 9.5, "#333", "")
    lx = x + 14 + length(words) * 5.6 + 18
}

# Where a label of s at (x, yy) goes: moved down below every box it would overlap; its own
# box is then claimed. Returns its y.
function place(x, yy, s, anchor, size, weight,    w, x1, x2, i, moved) {
    w = length(s) * size * (weight == "bold" ? 0.64 : 0.58)
    x1 = (anchor == "end") ? x - w : (anchor == "middle" ? x - w / 2 : x)
    x2 = x1 + w
    do {
        moved = 0
        for (i = 1; i <= NOCC; i++)
            if (x1 < OCC_X2[i] && x2 > OCC_X1[i] && yy - size * 0.8 < OCC_Y2[i] && yy + size * 0.25 > OCC_Y1[i]) {
                yy = OCC_Y2[i] + size * 0.8 + 1.5
                moved = 1
            }
    } while (moved)
    occupy(x1, yy - size * 0.8, x2, yy + size * 0.25)
    return yy
}
# The y of a label of that size, at yy or just under a line of the driver's that would cross
# it (the lines run across every lane, under the labels).
function off_driver(yy, size,    k, ly) {
    for (k = 1; k <= NF_; k++) {
        ly = yv(F_MS[k])
        if (ly > yy - size * 0.8 - 1 && ly < yy + size * 0.25 + 1) yy = ly + size * 0.8 + 2
    }
    return yy
}
# A box no later label may overlap (a label, an arrow).
function occupy(x1, y1, x2, y2) { NOCC++; OCC_X1[NOCC] = x1; OCC_Y1[NOCC] = y1; OCC_X2[NOCC] = x2; OCC_Y2[NOCC] = y2 }
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
# The request that took a holding the lock lane shows from ms, the key holding value: the
# request whose trace names that value as its token (the owner a reentrant lock stores, a
# Redlock attempt's value), when one does; else, by the traces, the request that entered its
# section last by then (a few ms of slack: the sample may come first) and has no holding yet;
# without traces, one in flight then, not yet a holder, the earliest sent of those; else any
# request in flight. HOLDER_BY is set to how it was found: "token" or "timing".
function holder_of(ms, value,    i, r, best) {
    best = ""
    HOLDER_BY = "token"
    if (value != "")
        for (i = 1; i <= NREQ; i++)
            if (index("," value ",", "," TOKEN_OF[REQ[i]] ",") && TOKEN_OF[REQ[i]] != "") return REQ[i]
    HOLDER_BY = "timing"
    # A value that looks like a token and is nobody's traced one: a request that never got in
    # (a Redlock attempt that won too few nodes, given back).
    if (MODE == "redlock" && length(value) >= 8 && value ~ /^[0-9a-f]+$/ && !(value in TOKEN_SEEN))
        for (i = 1; i <= NREQ; i++) {
            r = REQ[i]
            if ((r in T_STARTED) && !(r in ENTERED) && T_STARTED[r] <= ms + 30 && (!(r in SERVED) || SERVED[r] >= ms - 30)) {
                HOLDER_BY = "attempt"
                return r
            }
        }
    for (i = 1; i <= NREQ; i++) {
        r = REQ[i]
        if ((r in ENTERED) && !(r in HELD) && ENTERED[r] <= ms + 30 && (best == "" || ENTERED[r] > ENTERED[best]))
            best = r
    }
    if (best != "") return best
    # Seen before its trace's `entered` (a guard of two locks, cache-rwlock's: the first is in
    # Redis while it waits for the second): a request that enters later, in flight now.
    for (i = 1; i <= NREQ; i++) {
        r = REQ[i]
        if ((r in ENTERED) && SENT[r] <= ms + 30 && (!(r in ANSWERED) || ANSWERED[r] >= ms - 30) && !(r in HELD))
            return r
    }
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

# How a holding whose key vanished between two samples (from, to] ended: the traced release
# that falls between them says who deleted it, its holder or another request.
function deleted_by(who, from, to,    i, r) {
    for (i = 1; i <= NREQ; i++) {
        r = REQ[i]
        # Its release's command runs once its hold there (hold-at=release) ends.
        if ((r in RELEASED) && RELEASE_DONE[r] >= from - 25 && RELEASE_DONE[r] <= to + 5)
            return (r == who) ? "released by " r : "deleted by " r ", not its lock"
    }
    return "released (deleted)"
}

# When a traced request stopped believing it held the lock: its release point, else its
# answer.
function hold_end(r) {
    if (r in RELEASED) return RELEASED[r]
    if (r in SERVED) return SERVED[r]
    if (r in ANSWERED) return ANSWERED[r]
    return T_END
}
# A fencing token as the drawing shows it: as it is when short; a long one (past the clock in
# microseconds) by its place among the row's long tokens, "t", "t+1", "t+2": the order shows,
# which is all a fence compares, and not the microseconds between two holdings.
function short_fence(f) {
    if (f == "-" || f == "") return ""
    if (length(f) <= 8) return f
    return (FENCE_RANK[f] == 0) ? "t" : "t+" FENCE_RANK[f]
}
# Notes a long token of the row, for fence_ranks.
function fence_seen(f) {
    if (f ~ /^[0-9]+$/ && length(f) > 8) FENCE_SEEN[f] = 1
}
# FENCE_RANK[token]: how many of the row's long tokens are smaller (a handful: counted).
function fence_ranks(    f, g, n) {
    for (f in FENCE_SEEN) {
        n = 0
        for (g in FENCE_SEEN) if (g + 0 < f + 0) n++
        FENCE_RANK[f] = n
    }
}

BEGIN {
    COLOR["A"] = "#1f77b4"; COLOR["B"] = "#e377c2"; COLOR["C"] = "#2ca02c"; COLOR["A2"] = "#9467bd"
    COLOR["?"] = "#7f7f7f"
    NREQ = 0; NF_ = 0; NO = 0; NL = 0; ND = 0
    RESET = 100
    T_MAX = 0
}
$1 == "row" { MODE = $2; SCENARIO = $3 }
# A schematic: steps written by hand, not a run (docs/course/schematics/); the rest of the line
# says what it shows, in the subtitle.
$1 == "schematic" { SCHEMATIC = $0; sub(/^schematic +/, "", SCHEMATIC) }
# The lock lane's title and subtitle, where the mode's own would mislead (a schematic's).
# A schematic's database forgets every commit before this moment (a failover that loses them).
$1 == "forget" { FORGET_MS = $2 + 0 }
$1 == "locklane" { LOCKLANE = $0; sub(/^locklane +/, "", LOCKLANE) }
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
    if ($8 != "-" && $8 != "" && !(r in TOKEN_OF)) { TOKEN_OF[r] = $8; TOKEN_SEEN[$8] = 1 }
    if ($4 == "between-locks") { CART[r] = 1; BL_N[r]++; BL_MS[r, BL_N[r]] = $2 + 0; BL_HELD[r, BL_N[r]] = $5 + 0 }
    if ($4 == "read") { READV[r] = $6; if (!(r in READ_MS)) READ_MS[r] = $2 + 0 }
    if ($4 == "written") WROTE[r] = $6
    if ($4 == "checked") CHECKED[r] = $2 + 0
    if ($4 == "begun" && !(r in BEGUN)) BEGUN[r] = $2 + 0
    if ($4 == "committed") COMMITTED[r] = $2 + 0
    if ($4 == "release") { RELEASED[r] = $2 + 0; RELEASE_DONE[r] = $2 + $5 }
    if ($2 + 0 > T_MAX) T_MAX = $2 + 0
}
$1 == "served" { SERVED[$3] = $2 + 0; if ($2 + 0 > T_MAX) T_MAX = $2 + 0 }
$1 == "lock" { L_MS[++NL] = $2 + 0; L_PTTL[NL] = $3 + 0; L_HOLDER[NL] = (NF >= 4 ? $4 : "") }
# Another key, in a lane of its own beside the lock's (Redlock's other nodes, a cart's second
# goods): "lockn MS LABEL PTTL HOLDER".
$1 == "lockn" {
    k = LN_IDX[$3]
    if (!k) { k = ++NLN; LN_IDX[$3] = k; LN_LABEL[k] = $3 }
    n = ++LN_N[k]
    LN_MS[k, n] = $2 + 0; LN_PTTL[k, n] = $4 + 0; LN_HOLDER[k, n] = (NF >= 5 ? $5 : "")
}
$1 == "db" {
    split($3, f, "|")
    D_MS[++ND] = $2 + 0; D_STOCK[ND] = f[1] + 0; D_N[ND] = f[2] + 0; D_LIST[ND] = f[3]; D_ROW[ND] = f[4]
}

END {
    # The row's long tokens, in order, for short_fence.
    for (key in P_FENCE) fence_seen(P_FENCE[key])
    for (i = 1; i <= NO; i++) fence_seen(O_FENCE[i])
    fence_ranks()
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
                # A schematic names a holder that is no request ("=node-1"): drawn grey.
                holding_open(ms, (holder ~ /^=/) ? "?" : holder_of(ms, holder))
                H_BY[NH] = (holder ~ /^=/) ? "named" : HOLDER_BY
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
                H_END[NH] = deleted_by(H_WHO[NH], prev_ms, ms)
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
    T_END = T_MAX + 150
    for (i = 1; i <= NH; i++) if (H_TO[i] + 100 > T_END && H_TO[i] < T_MAX + 1500) T_END = H_TO[i] + 100
    span = T_END - T_START
    # The moments something happens at; a stretch of more than GAP_MS between two of them is a
    # break, drawn BREAK_PX high, keeping MARGIN_MS of true scale at each end.
    GAP_MS = 400; MARGIN_MS = 120; BREAK_PX = 26
    nm = 0
    MOM[++nm] = T_START; MOM[++nm] = 0; MOM[++nm] = T_END
    for (i = 1; i <= NREQ; i++) {
        r = REQ[i]; MOM[++nm] = SENT[r]
        if (r in ANSWERED) MOM[++nm] = ANSWERED[r]
        if (r in T_STARTED) MOM[++nm] = T_STARTED[r]
        if (r in SERVED) MOM[++nm] = SERVED[r]
        for (k = 1; k <= NP[r]; k++) { MOM[++nm] = P_MS[r, k]; if (P_HELD[r, k] > 0) MOM[++nm] = P_MS[r, k] + P_HELD[r, k] }
    }
    for (i = 1; i <= NF_; i++) MOM[++nm] = F_MS[i]
    for (i = 1; i <= NH; i++) { MOM[++nm] = H_FROM[i]; MOM[++nm] = H_TO[i] }
    for (i = 1; i <= NC; i++) MOM[++nm] = C_MS[i]
    for (k = 1; k <= NLN; k++)
        for (i = 2; i <= LN_N[k]; i++)
            if ((LN_PTTL[k, i] == -2) != (LN_PTTL[k, i - 1] == -2) || LN_HOLDER[k, i] != LN_HOLDER[k, i - 1]) MOM[++nm] = LN_MS[k, i]
    for (i = 1; i <= NO; i++) MOM[++nm] = O_MS[i]
    for (i = 2; i <= nm; i++)
        for (j = i; j > 1 && MOM[j] < MOM[j - 1]; j--) { t = MOM[j]; MOM[j] = MOM[j - 1]; MOM[j - 1] = t }
    NB = 0; shown = span
    for (i = 2; i <= nm; i++)
        if (MOM[i] > T_START && MOM[i - 1] < T_END && MOM[i] - MOM[i - 1] > GAP_MS) {
            NB++; B_FROM[NB] = MOM[i - 1] + MARGIN_MS; B_TO[NB] = MOM[i] - MARGIN_MS
            shown -= B_TO[NB] - B_FROM[NB]
        }
    K = 0.5
    if (shown * K > 900) K = 900 / shown
    TOP = 128
    LANE_W = 150
    X0 = 70
    nl = NREQ
    LOCK_X = X0 + nl * LANE_W
    EXTRA_W = 64
    STOCK_X = LOCK_X + 190 + NLN * EXTRA_W
    SUBTITLE = (SCHEMATIC != "") ? "a schematic, not a run: " SCHEMATIC : "a ladder row drawn from a real run: requests straight to the replicas, their points as the replicas traced them; lease L = " LEASE " ms"
    # The right end of the lanes' lines: the driver's short words ("the driver continues
    # svc-1"), right-aligned there, must start clear of the stock row's line (scx + 8, below);
    # a sentence longer than that lane runs on to the left, above the lanes, as a caption.
    RIGHT_X = STOCK_X + 200
    for (i = 1; i <= NF_; i++)
        if (length(F_TEXT[i]) <= 30 && STOCK_X + 78 + length(F_TEXT[i]) * 5.8 > RIGHT_X)
            RIGHT_X = int(STOCK_X + 78 + length(F_TEXT[i]) * 5.8)
    WIDTH = RIGHT_X + 35
    # Wide enough for the subtitle and the legend.
    if (24 + length(SUBTITLE) * 6.2 > WIDTH) WIDTH = int(24 + length(SUBTITLE) * 6.2)
    if (WIDTH < 900) WIDTH = 900
    BOTTOM = yv(T_END)
    HEIGHT = BOTTOM + 112

    printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Verdana, sans-serif\">\n", WIDTH, HEIGHT, WIDTH, HEIGHT
    rect(0, 0, WIDTH, HEIGHT, "#ffffff", 1, "")
    text(12, 24, MODE " / " SCENARIO, "start", 17, "#000", "bold")
    text(12, 44, SUBTITLE, "start", 11, "#444", "")

    # The ruler: ms since A was sent, a line every step but inside a break; each break marked
    # across the picture (a zigzag) with the time it leaves out.
    step = (shown > 2400) ? 500 : ((shown > 1000) ? 200 : 100)
    for (t = 0; t <= T_END; t += step) {
        inb = 0
        for (i = 1; i <= NB; i++) if (t > B_FROM[i] - 30 && t < B_TO[i] + 30) inb = 1
        if (inb) continue
        line(X0 - 6, y(t), RIGHT_X, y(t), "#ececec", 1, "")
        text(X0 - 10, y(t) + 4, t " ms", "end", 10, "#666", "")
    }
    for (i = 1; i <= NB; i++) {
        y1 = yv(B_FROM[i]) + 4; y2 = yv(B_TO[i]) - 4
        printf "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"#f6f6f6\"/>\n", X0 - 6, y1, RIGHT_X + 6 - X0, y2 - y1
        for (e = 0; e < 2; e++) {
            yy = (e == 0) ? y1 : y2
            d = ""
            for (x = X0 - 6; x <= RIGHT_X; x += 12) d = d (d == "" ? "M" : " L") x "," sprintf("%.1f", yy + ((x / 12) % 2 ? -3 : 3))
            printf "<path d=\"%s\" fill=\"none\" stroke=\"#999\" stroke-width=\"1\"/>\n", d
        }
        text(X0 - 10, (y1 + y2) / 2 + 4, "+" int(B_TO[i] - B_FROM[i]) " ms", "end", 9.5, "#555", "bold")
        occupy(0, y1, X0 - 6, y2)
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
    # A schematic names its own lock lane: "locklane TITLE | SUBTITLE".
    lsub = ""
    if (LOCKLANE != "") {
        ltitle = LOCKLANE; lsub = ""
        if (index(LOCKLANE, " | ")) { ltitle = substr(LOCKLANE, 1, index(LOCKLANE, " | ") - 1); lsub = substr(LOCKLANE, index(LOCKLANE, " | ") + 3) }
    }
    text(lcx, 72, ltitle, "middle", 13, "#000", "bold")
    ncart = 0
    for (i = 1; i <= NREQ; i++) if (REQ[i] in CART) ncart++
    if (LOCKLANE != "") text(lcx, 88, lsub, "middle", 10, "#333", "")
    else if (NL > 0 && ncart > 0) text(lcx, 88, (NLN > 0 ? "the first goods' key" : "the first goods' key only"), "middle", 10, "#333", "")
    else if (NL > 0) text(lcx, 88, (MODE == "redlock" ? (NLN > 0 ? "node 1" : "(node 1 of 5)") : "holder, PTTL"), "middle", 10, "#333", "")
    else if (MODE ~ /^pg-lockrow/) text(lcx, 88, "its owner", "middle", 10, "#333", "")
    else text(lcx, 88, "(PostgreSQL's own locks)", "middle", 10, "#333", "")
    line(lcx, TOP, lcx, BOTTOM, "#cccccc", 1, "3,3")
    for (k = 1; k <= NLN; k++) extra_lane(k)
    scx = STOCK_X + 70
    text(scx, 72, "stock row", "middle", 13, "#000", "bold")
    text(scx, 88, "goods.stock, orders", "middle", 10, "#333", "")

    for (i = 1; i <= NF_; i++) line(X0 - 4, y(F_MS[i]), RIGHT_X, y(F_MS[i]), "#d62728", 1.5, "2,2")
    # What later labels must keep clear of, claimed before any is drawn: the commits' arrows
    # (drawn later, above the lanes) and the driver's notes at the right.
    for (i = 1; i <= NC; i++)
        for (j = 1; j <= NREQ; j++) if (REQ[j] == C_REQ[i]) {
            cx = X0 + (j - 0.5) * LANE_W
            occupy(cx + 16, yv(C_MS[i]) - 2.5, scx - 12, yv(C_MS[i]) + 2.5)
        }
    for (i = 1; i <= NF_; i++) {
        F_Y[i] = place(RIGHT_X, yv(F_MS[i]) - 4, F_TEXT[i], "end", 10, "")
    }

    # The lock's holdings, shaded in the holder's colour, in the lock lane and the holder's.
    for (i = 1; i <= NH; i++) {
        to = H_TO[i]
        if (i == NH && still_held) to = T_END
        w = H_WHO[i]
        hh = hgt(H_FROM[i], to)
        rect(lcx - 40, y(H_FROM[i]), 80, hh, COLOR[w], 0.35, COLOR[w])
        # A short holding: one label beside it, not two on top of each other.
        short = (hh < 30 && H_END[i] != "lease ran out" && !(i == NH && still_held))
        if (short) {
            ltext(lcx + 44, y(H_FROM[i]) + hh / 2, holding_label(i) ", " int(to - H_FROM[i]) " ms", "start", 9, "#000", "bold")
            if (H_END[i] != "") ltext(lcx + 44, y(H_FROM[i]) + hh / 2 + 10, H_END[i], "start", 8.5, "#333", "")
        } else
            ltext(lcx, y(H_FROM[i]) + 13, holding_label(i), "middle", 10, "#000", "bold")
        # In the holder's own lane only while it lives: a dead holder's lock outlives it. A
        # traced holder's lane shows its own view instead (below).
        for (j = 1; j <= NREQ; j++) if (REQ[j] == w && !(w in TRACED)) {
            cx = X0 + (j - 0.5) * LANE_W
            rto = (w in ANSWERED && ANSWERED[w] < to) ? ANSWERED[w] : to
            if (rto > H_FROM[i]) rect(cx - 11, y(H_FROM[i]), 22, hgt(H_FROM[i], rto), COLOR[w], 0.30, "")
        }
        if (H_END[i] == "lease ran out") {
            line(lcx - 60, y(H_TO[i]), lcx + 60, y(H_TO[i]), "#d62728", 2, "6,3")
            ltext(lcx + 2, y(H_TO[i]) - 4, "lease ran out (" (H_BY[i] == "named" ? substr(H_VALUE[i], 2) : w) "'s)", "middle", 10, "#d62728", "bold")
        } else if (H_END[i] != "" && !short) {
            ltext(lcx, y(H_TO[i]) - 4, H_END[i], "middle", 9, "#333", "")
        } else if (i == NH && still_held) {
            ltext(lcx, y(H_TO[i]) + 13, (H_PTTL[i] == -1 ? "still held: no expiry" : "still held"), "middle", 10, "#d62728", "bold")
        }
        if (H_PTTL[i] == -1 && H_END[i] != "lease ran out" && NL > 0)
            ltext(lcx + 44, y(H_FROM[i]) + 26, "no TTL", "start", 9, "#d62728", "")
        # The lease ran out while its holder, by its own trace, was still inside: mark it there.
        if (H_END[i] == "lease ran out" && (w in ENTERED) && H_TO[i] > ENTERED[w] && H_TO[i] < hold_end(w)) {
            for (j = 1; j <= NREQ; j++) if (REQ[j] == w) {
                cx = X0 + (j - 0.5) * LANE_W
                line(cx - 30, y(H_TO[i]), lcx - 60, y(H_TO[i]), "#d62728", 1, "2,3")
                line(cx - 16, y(H_TO[i]), cx + 16, y(H_TO[i]), "#d62728", 2, "6,3")
                ltext(cx - 18, y(H_TO[i]) - 3, "lease gone,", "end", 9, "#d62728", "bold")
                ltext(cx - 18, y(H_TO[i]) + 8, w " still inside", "end", 9, "#d62728", "bold")
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
            rect(cx - 11, y(ENTERED[w]), 22, hgt(ENTERED[w], hold_end(w)), COLOR[w], 0.30, "")
        }

    # The requests: from sent to answered, with their transaction's start and their sale.
    for (i = 1; i <= NREQ; i++) {
        r = REQ[i]; cx = X0 + (i - 0.5) * LANE_W
        end = (r in ANSWERED) ? ANSWERED[r] : T_END
        rect(cx - 6, y(SENT[r]), 12, hgt(SENT[r], end), "#f4f4f4", 1, "#999")
        ltext(cx - 14, y(SENT[r]) + 4, "sent", "end", 9, "#333", "")
        if (!(r in ANSWERED)) continue
        if (STATUS[r] == "000") {
            ltext(cx, y(end) + 14, "no answer: died", "middle", 10, "#d62728", "bold")
            line(cx - 8, y(end) - 8, cx + 8, y(end) + 8, "#d62728", 2, "")
            line(cx - 8, y(end) + 8, cx + 8, y(end) - 8, "#d62728", 2, "")
        } else {
            s = STATUS[r] (ERROR[r] != "-" ? " " ERROR[r] : "")
            ltext(cx, off_driver(yv(end) + 14, 10), s, "middle", 10, (STATUS[r] == "200" ? "#2a7a2a" : "#c05000"), "bold")
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
                rect(cx - 6, y(pfrom), 12, hgt(pfrom, pend), "#555555", 0.45, "")
                lbl = (what ~ /^stop-before-/) ? "process stopped" : (what == "pause-before-release" ? "paused in release" : "paused")
                ltext(cx - 10, y((pfrom + pend) / 2), lbl, "end", 9, "#333", "")
                ltext(cx - 10, y((pfrom + pend) / 2) + 11, int(pend - pfrom) " ms", "end", 9, "#333", "")
                continue
            }
            if (what == "pause-before-commit" || what == "stop-before-commit") {
                for (j = 1; j <= NC; j++) if (C_REQ[j] == r) { pend = C_MS[j]; break }
                if (pend == "" && (r in ANSWERED)) pend = ANSWERED[r]
            } else if (what == "pause-before-release" && (r in ANSWERED))
                pend = ANSWERED[r]
            if (pend == "") continue
            rect(cx - 6, y(pend - p), 12, hgt(pend - p, pend), "#555555", 0.45, "")
            lbl = (what == "stop-before-commit") ? "process stopped" : (what == "pause-before-release" ? "paused in release" : "paused")
            ltext(cx - 10, y(pend - p / 2), lbl, "end", 9, "#333", "")
            ltext(cx - 10, y(pend - p / 2) + 11, p " ms", "end", 9, "#333", "")
        }
    }
    for (i = 1; i <= NO; i++) {
        r = request_of(O_INST[i], O_MS[i])
        if (r in TRACED) continue
        for (j = 1; j <= NREQ; j++) if (REQ[j] == r) {
            cx = X0 + (j - 0.5) * LANE_W
            printf "<circle cx=\"%s\" cy=\"%s\" r=\"3.5\" fill=\"#333\"/>\n", cx, y(O_MS[i])
            ltext(cx + 8, y(O_MS[i]) + 4, "BEGIN" (short_fence(O_FENCE[i]) != "" ? ", token " short_fence(O_FENCE[i]) : ""), "start", 9, "#333", "")
        }
    }

    # A traced request's time at its replica before its section (or its answer, when it never
    # got in): waiting for the lock where there is one, framed by a bracket.
    for (j = 1; j <= NREQ; j++) {
        r = REQ[j]; cx = X0 + (j - 0.5) * LANE_W
        if (!(r in T_STARTED) || (r in CART)) continue
        # Until it got in: its section's entry, else its first traced point (a PostgreSQL
        # rung's BEGIN), else its answer.
        wend = (r in ENTERED) ? ENTERED[r] : (NP[r] > 0 ? P_MS[r, 1] : ((r in SERVED) ? SERVED[r] : T_STARTED[r]))
        line(cx - 16, y(T_STARTED[r]), cx - 8, y(T_STARTED[r]), "#333", 1, "")
        ltext(cx - 18, y(T_STARTED[r]) + 3, "at svc-" REPLICA[r], "end", 8.5, "#333", "")
        if (wend - T_STARTED[r] >= 100) {
            line(cx - 12, y(T_STARTED[r]), cx - 12, y(wend), "#333", 1, "2,2")
            if (NL > 0 || MODE ~ /^pg-lockrow/) {
                ltext(cx - 16, y((T_STARTED[r] + wend) / 2), "waiting for", "end", 8.5, "#333", "")
                ltext(cx - 16, y((T_STARTED[r] + wend) / 2) + 10, "the lock " int(wend - T_STARTED[r]) " ms", "end", 8.5, "#333", "")
            }
        }
        if ((r in SERVED) && !(r in ENTERED)) {
            line(cx - 16, y(SERVED[r]), cx - 8, y(SERVED[r]), "#333", 1, "")
            ltext(cx - 18, y(SERVED[r]) + 3, "answered", "end", 8.5, "#333", "")
        }
    }

    # A wait inside PostgreSQL: a read that came long after its BEGIN, as another request's
    # transaction committed (its claim or FOR UPDATE waited for that transaction's row lock).
    for (j = 1; j <= NREQ; j++) {
        r = REQ[j]; cx = X0 + (j - 0.5) * LANE_W
        if (!(r in BEGUN) || !(r in READ_MS) || READ_MS[r] - BEGUN[r] < 40) continue
        for (i = 1; i <= NREQ; i++) {
            q = REQ[i]
            if (q == r || !(q in COMMITTED) || COMMITTED[q] < BEGUN[r] || COMMITTED[q] > READ_MS[r] + 10) continue
            line(cx + 9, y(BEGUN[r]), cx + 9, y(READ_MS[r]), "#8c564b", 2, "")
            ltext(cx + 14, (yv(BEGUN[r]) + yv(READ_MS[r])) / 2 + 10, "waits for " q "'s " (MODE == "pg-advisory" ? "advisory lock " : "row lock ") int(READ_MS[r] - BEGUN[r]) " ms", "start", 8.5, "#8c564b", "bold")
            break
        }
    }
    # A section that took its own lock again and waited for itself (X-Fault: nested, a lock
    # that is not reentrant): from its entry to its answer.
    for (j = 1; j <= NREQ; j++) {
        r = REQ[j]; cx = X0 + (j - 0.5) * LANE_W
        if (FAULT[r] !~ /(^|,)nested/ || ERROR[r] != "lock_timeout" || !(r in ENTERED)) continue
        wend = (r in RELEASED) ? RELEASED[r] : ((r in SERVED) ? SERVED[r] : ANSWERED[r])
        line(cx + 9, y(ENTERED[r] + 5), cx + 9, y(wend), "#8c564b", 2, "")
        ltext(cx + 14, (yv(ENTERED[r]) + yv(wend)) / 2, "takes its own lock again:", "start", 8.5, "#8c564b", "bold")
        ltext(cx + 14, (yv(ENTERED[r]) + yv(wend)) / 2 + 11, "waits for itself " int(wend - ENTERED[r]) " ms", "start", 8.5, "#8c564b", "bold")
    }

    # Two carts that each own their first lock and wait for the other's: from each one's step
    # after its first hold to its second hold (held again, having given up), an arrow to the
    # lane of the cart whose lock it waits for, both ways while both wait: the cycle.
    # The arrows are claimed first, so that no label is drawn across one; the words saying it
    # is a cycle go under the lower arrow.
    cyc_y = ""; cyc_x = 0
    for (j = 1; j <= NREQ; j++) {
        r = REQ[j]
        if (!(r in CART) || BL_N[r] < 2) continue
        for (i = 1; i <= NREQ; i++) {
            q = REQ[i]
            if (q == r || !(q in CART) || BL_N[q] < 2) continue
            wfrom = BL_MS[r, 1] + BL_HELD[r, 1]; wto = BL_MS[r, 2]
            qfrom = BL_MS[q, 1] + BL_HELD[q, 1]; qto = BL_MS[q, 2]
            if (wto - wfrom < 50) continue
            cx = X0 + (j - 0.5) * LANE_W; qx = X0 + (i - 0.5) * LANE_W
            line(cx - 9, y(wfrom), cx - 9, y(wto), "#8c564b", 2, "")
            ym = (yv(wfrom) + yv(wto)) / 2 + (j < i ? -14 : 14)
            line(cx + (qx > cx ? 8 : -8), ym, qx + (qx > cx ? -14 : 14), ym, "#8c564b", 1.5, "")
            printf "<polygon points=\"%s,%.1f %s,%.1f %s,%.1f\" fill=\"#8c564b\"/>\n", qx + (qx > cx ? -8 : 8), ym, qx + (qx > cx ? -15 : 15), ym - 4, qx + (qx > cx ? -15 : 15), ym + 4
            occupy((cx < qx ? cx : qx) + 8, ym - 4.5, (cx < qx ? qx : cx) - 8, ym + 4.5)
            W_R[++NW] = r; W_Q[NW] = q; W_X[NW] = (cx + qx) / 2; W_Y[NW] = ym
            if (wfrom < qto && qfrom < wto) {
                cyc_x = (cx + qx) / 2
                if (cyc_y == "" || ym > cyc_y) cyc_y = ym
            }
        }
    }
    for (k = 1; k <= NW; k++)
        ltext(W_X[k], W_Y[k] - 8, W_R[k] " waits for " W_Q[k] "'s lock", "middle", 8.5, "#8c564b", "bold")
    if (cyc_y != "") ltext(cyc_x, cyc_y + 18, "each waits for the other: a cycle", "middle", 9, "#d62728", "bold")

    # Where a request was held at a point (X-Fault: hold-at) until the driver stepped it on:
    # grey from the moment it reached the point for as long as it was held there.
    for (j = 1; j <= NREQ; j++) {
        r = REQ[j]; cx = X0 + (j - 0.5) * LANE_W
        for (k = 1; k <= NP[r]; k++) {
            if (P_HELD[r, k] <= 0) continue
            rect(cx - 6, y(P_MS[r, k]), 12, hgt(P_MS[r, k], P_MS[r, k] + P_HELD[r, k]), "#555555", 0.45, "")
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
            else if (pn == "cache-miss-read") lbl = "cache miss: read " P_STOCK[r, k] " from the table"
            else { lbl = pn; gsub(/-/, " ", lbl) }
            if (P_HELD[r, k] > 0) lbl = lbl " (held " P_HELD[r, k] " ms)"
            col = "#333"; wt = ""
            if (pn == "read" || pn == "written" || pn == "committed") { col = "#000"; wt = "bold" }
            # The read of a sale that sold a unit twice: a stock an earlier sale had read.
            if ((pn == "read" || pn == "committed") && (r in SOLD_TWICE)) {
                col = "#d62728"
                if (pn == "read") lbl = lbl " (stale)"
            }
            printf "<circle cx=\"%s\" cy=\"%.1f\" r=\"2.5\" fill=\"#333\"/>\n", cx, yy
            ty = ltext(cx + 14, off_driver(yy + 3, 8.5), lbl, "start", 8.5, col, wt)
            if (ty > yy + 6) line(cx + 3, yy, cx + 12, ty - 3, "#999", 0.6, "")
        }
    }

    # A schematic's database that forgot its commits before FORGET_MS (a failover): they no
    # longer count as orders after it, and the stock lane says so there.
    forgot = 0
    if (FORGET_MS != "") {
        ltext(scx + 8, yv(FORGET_MS) + 14, "the new primary: stock " RESET ", orders 0", "start", 10, "#d62728", "bold")
        ltext(scx + 8, yv(FORGET_MS) + 27, "(the sales before it forgotten)", "start", 9, "#d62728", "")
    }
    # The stock row: its value over time, each commit an arrow from its request.
    line(scx, TOP, scx, BOTTOM, "#888", 2, "")
    ltext(scx + 8, y(T_START) + 14, "stock " FIRST_STOCK ", orders 0", "start", 10, "#000", "")
    last_label = -1000
    for (i = 1; i <= NC; i++) {
        r = C_REQ[i]
        if (FORGET_MS != "" && C_MS[i] > FORGET_MS && (i == 1 || C_MS[i - 1] < FORGET_MS)) forgot = i - 1
        # A schematic whose one COMMIT records several orders (a batch) says how many in a db
        # line at that moment.
        if (SCHEMATIC != "") for (k = 1; k <= ND; k++) if (D_MS[k] >= C_MS[i] && D_MS[k] <= C_MS[i] + 5) forgot = i - D_N[k]
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
            if (!C_OBS[i]) ltext(cx + 10, (ty == yy ? yy - 4 : ty), lbl, "start", 9, col, (C_TWICE[i] ? "bold" : ""))
        }
        if (C_TWICE[i]) {
            ty = ltext(scx + 8, ty + 2, "stock " C_WROTE[i] ", orders " (i - forgot), "start", 10, "#d62728", "bold")
            ltext(scx + 8, ty + 13, "one unit sold twice", "start", 10, "#d62728", "bold")
            rect(scx + 4, ty - 13, 150, 30, "#d62728", 0.12, "#d62728")
        } else {
            ltext(scx + 8, ty + 4, "stock " C_WROTE[i] ", orders " (i - forgot), "start", 10, "#000", "")
        }
    }

    # The faults the driver caused, across every lane (their lines were drawn first, under
    # the labels; their words last, above all).
    for (i = 1; i <= NF_; i++) {
        printf "<text x=\"%s\" y=\"%.1f\" text-anchor=\"end\" font-size=\"10\" fill=\"#d62728\" paint-order=\"stroke\" stroke=\"#fff\" stroke-width=\"3\">%s</text>\n", RIGHT_X, F_Y[i], esc(F_TEXT[i])
    }

    # The books, and what the picture is made of.
    text(12, BOTTOM + 26, "the books: sold " SOLD ", the stock gave up " TAKEN ", oversold " OVERSOLD, "start", 13, (OVERSOLD > 0 ? "#d62728" : "#000"), "bold")
    # The legend: each mark the picture uses, once.
    lx = 12; ly = BOTTOM + 48
    legend_item("flight", "a request, sent to answered")
    legend_item("hold", "holding the lock (its lane: as it believed)")
    legend_item("pause", "paused or held by its X-Fault")
    legend_item("dot", "a point its replica traced")
    lx = 12; ly += 18
    legend_item("commit", "COMMIT: the stock row's new value")
    legend_item("twice", "a unit sold twice")
    legend_item("lease", "the lease ran out")
    legend_item("driver", "what the driver did")
    legend_item("break", "time left out")
    ntr = 0
    for (i = 1; i <= NREQ; i++) if (REQ[i] in TRACED) ntr++
    if (SCHEMATIC != "")
        src = "Drawn by loadtest/timeline from steps written by hand (docs/course/schematics/): the order of the steps is the point, not their times."
    else if (ntr > 0)
        src = "Drawn by loadtest/timeline from the row's events: points as the replicas traced them (one wall clock), sends and answers as the driver saw them, the lock sampled every 20 ms."
    else
        src = "Drawn by loadtest/timeline from the row's events: sends and answers as the driver saw them, the lock and the row sampled every few tens of ms."
    text(12, ly + 22, src, "start", 9, "#555", "")
    print "</svg>"
}
