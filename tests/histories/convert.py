#!/usr/bin/env python3
"""convert.py - published register histories into check-history's register JSONL.

Run by hand (not by make test), from the repository root, with the two repositories'
snapshots at hand as git directories:

    tests/histories/convert.py KNOSSOS_GIT_DIR PORCUPINE_GIT_DIR

It writes tests/histories/knossos/*.jsonl and tests/histories/porcupine/*.jsonl, each named
<source>.<yes|no>.jsonl after its published verdict, and tests/histories/PROVENANCE.

Knossos (jepsen-io/knossos, data/cas-register/{good,bad}/*.edn; test/knossos/core_test.clj
test-examples checks every good file valid and every bad one invalid, with (cas-register 0)):
one EDN vector of op maps. Events keep their order; time is the event's index. fail ops took
no effect (Knossos drops them); info ops are left open (they may or may not have happened);
a read's value is the completion's (nil: unknown).

Porcupine (anishathalye/porcupine, test_data/jepsen/etcd_NNN.log; porcupine_test.go
checkJepsen(t, N, verdict)): Jepsen etcd logs of a register whose initial value is nil. The
register here starts at 0, so values are mapped v -> v + 1 and nil -> 0: a read of nil
becomes a read of 0, the initial value. A read that timed out becomes an info read (it
constrains nothing, as in porcupine's model); an invocation never answered stays open.
A failed cas differs: porcupine's model requires the register to differ from the expected
value, while our contract says a failed cas took no effect and constrains nothing. Run on all
102 histories, every published verdict held here all the same (no violation rests on a failed
cas alone); a selection is committed for make test's time.
"""
import json
import os
import re
import subprocess
import sys

KNOSSOS_REPO = "jepsen-io/knossos"
PORCUPINE_REPO = "anishathalye/porcupine"

# Porcupine's published verdicts (porcupine_test.go, TestEtcdJepsenNNN).
ETCD_TRUE = {2, 5, 7, 18, 25, 31, 38, 45, 48, 49, 51, 53, 56, 67, 75, 76, 80, 87, 92, 98,
             100, 101, 102}


def git(gitdir, *args):
    return subprocess.run(["git", "--git-dir", gitdir, *args], check=True,
                          capture_output=True, text=True).stdout


def edn_ops(text):
    """The op maps of a Knossos EDN history: only the keys the histories use."""
    text = re.sub(r";[^\n]*", "", text)
    ops = []
    for m in re.finditer(r"\{([^{}]*)\}", text):
        body = m.group(1)
        op = {}
        for key in ("process", "type", "f", "value"):
            km = re.search(r":" + key + r"\s+(\[[^\]]*\]|:[\w-]+|-?\d+|nil)", body)
            if km:
                op[key] = km.group(1)
        ops.append(op)
    return ops


def edn_value(v):
    if v is None or v == "nil":
        return None
    if v.startswith("["):
        return [int(x) for x in v.strip("[]").replace(",", " ").split()]
    return int(v)


def convert_knossos(text):
    out = []
    for i, op in enumerate(edn_ops(text)):
        if not op.get("process", "").lstrip("-").isdigit():
            continue  # the nemesis: not a client of the register
        typ = op["type"].lstrip(":")
        f = op["f"].lstrip(":")
        ev = {"process": int(op["process"]), "type": typ, "f": f, "time": i}
        v = edn_value(op.get("value"))
        if f in ("write", "cas") and typ == "invoke":
            ev["value"] = v
        elif f == "read" and typ == "ok":
            ev["value"] = v
        elif f in ("write", "cas"):
            ev["value"] = v
        out.append(ev)
    return out


ETCD_LINE = re.compile(r"^INFO\s+jepsen\.util\s+-\s+(\d+)\s+:(\w+)\s+:(\w+)\s+(.*)$")


def etcd_value(s):
    s = s.strip()
    if s == "nil":
        return 0
    if s.startswith("["):
        return [int(x) + 1 for x in s.strip("[]").split()]
    return int(s) + 1


def convert_etcd(text):
    out = []
    for i, line in enumerate(text.splitlines()):
        m = ETCD_LINE.match(line)
        if not m:
            continue
        proc, typ, f, rest = int(m.group(1)), m.group(2), m.group(3), m.group(4)
        ev = {"process": proc, "type": typ, "f": f, "time": i}
        if f == "read" and typ == "fail" and rest.strip() == ":timed-out":
            ev["type"] = "info"
        elif f == "read" and typ == "invoke":
            pass
        elif typ in ("invoke", "ok", "fail"):
            ev["value"] = etcd_value(rest)
        else:
            continue
        out.append(ev)
    return out


def write(path, events):
    with open(path, "w") as fp:
        for ev in events:
            fp.write(json.dumps(ev, separators=(",", ":")) + "\n")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: tests/histories/convert.py KNOSSOS_GIT_DIR PORCUPINE_GIT_DIR")
    kg, pg = sys.argv[1], sys.argv[2]
    here = os.path.dirname(os.path.abspath(__file__))
    prov = ["# Where each converted history comes from (written by convert.py).",
            "# file\trepository\tpath\tcommit\tpublished verdict", ""]
    kc = git(kg, "rev-parse", "HEAD").strip()
    for path in git(kg, "ls-tree", "-r", "--name-only", "HEAD", "data/cas-register").split():
        if not path.endswith(".edn"):
            continue
        good = "/good/" in path
        name = os.path.basename(path)[:-4]
        # Of the 100 memstress3 histories, four of the largest (30 kB each): make test's time.
        if name.startswith("memstress3-") and int(name.split("-")[1]) >= 4:
            continue
        # The mongodb histories are long (1,400 events) and mostly reads never answered: the
        # invalid one and the longest valid one are kept.
        if name.startswith("mongodb") and name not in ("mongodb-v0-ack-rollback-6",
                                                       "mongodb-v0-ack-rollback-7"):
            continue
        verdict = "yes" if good else "no"
        out = f"knossos/{name}.{verdict}.jsonl"
        write(os.path.join(here, out), convert_knossos(git(kg, "show", f"HEAD:{path}")))
        prov.append(f"{out}\t{KNOSSOS_REPO}\t{path}\t{kc}\t{'valid' if good else 'invalid'}")
    pc = git(pg, "rev-parse", "HEAD").strip()
    for n in range(103):
        path = f"test_data/jepsen/etcd_{n:03d}.log"
        text = git(pg, "show", f"HEAD:{path}")
        if not text.strip():
            continue
        verdict = "yes" if n in ETCD_TRUE else "no"
        # The first seven of each verdict (all 102 pass; the rest are left out for make
        # test's time).
        if n > 31 or (n not in ETCD_TRUE and n > 9):
            continue
        out = f"porcupine/etcd_{n:03d}.{verdict}.jsonl"
        write(os.path.join(here, out), convert_etcd(text))
        prov.append(f"{out}\t{PORCUPINE_REPO}\t{path}\t{pc}\t{'true' if n in ETCD_TRUE else 'false'}")
    with open(os.path.join(here, "PROVENANCE"), "w") as fp:
        fp.write("\n".join(prov) + "\n")


if __name__ == "__main__":
    main()
