#!/usr/bin/env python3
"""labels.Threads: the CTest label "threads" is on every test that starts
threads, and only there (.ci/run's TSan step runs `ctest -L threads` over a
build of target threads_tests; tests/CMakeLists.txt, mapfs_threads).

Usage: threads_label_test.py TEST_BINARIES_TSV CTEST BUILD_DIR

TEST_BINARIES_TSV (written by tests/CMakeLists.txt) has one line per gtest
binary: name, the CASES regex of a binary marked THREADS (empty when not
marked), the binary's path, and its sources with those of the project
libraries it links (";"-separated). Fails when
  - a binary whose sources start a thread is not marked (a new threaded
    test that ThreadSanitizer would never see), or a marked one starts none
    (TSan time spent on nothing it can judge);
  - a test of a marked binary (matching CASES) lacks the label, or one
    left out by CASES whose own body (Suite.Case) starts a thread; or a test
    has the label but does not run a marked binary: threads_tests would not
    build what it needs.
fork() alone is not a reason: TSan checks each process's own accesses, so
processes sharing a pool are invisible to it.
"""
import json
import re
import subprocess
import sys

# What starts a thread; text after // on a line is a comment.
START = re.compile(r"\bstd::j?thread\b(?!::)|\bpthread_create\s*\(|\bstd::async\s*\(")


def starts_threads(path):
    """The first file:line of path that starts a thread, or None."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                code = line.split("//", 1)[0]
                if START.search(code):
                    return f"{path}:{n}"
    except FileNotFoundError:
        return None
    return None


TEST_MACRO = re.compile(r"^\s*(?:TYPED_)?TEST(?:_F|_P)?\(\s*(\w+)\s*,\s*(\w+)\s*\)", re.M)


def threaded_cases(path):
    """Suite.Case of each gtest case in path whose body (its text up to the
    next test) starts a thread itself."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = "\n".join(line.split("//", 1)[0] for line in f)
    except FileNotFoundError:
        return []
    found = list(TEST_MACRO.finditer(text))
    cases = []
    for i, m in enumerate(found):
        body = text[m.end():found[i + 1].start() if i + 1 < len(found) else len(text)]
        if START.search(body):
            cases.append(f"{m.group(1)}.{m.group(2)}")
    return cases


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    manifest, ctest, build = sys.argv[1:]
    binaries = {}  # file -> (name, cases regex or None)
    must_label = []  # (binary, Suite.Case) of a THREADS_CASES binary
    problems = []
    marked = 0
    with open(manifest, encoding="utf-8") as f:
        for line in f:
            name, cases, exe, srcs = line.rstrip("\n").split("\t")
            binaries[exe] = (name, cases or None)
            where = None
            for src in srcs.split(";"):
                where = where or starts_threads(src)
            if cases:
                marked += 1
                for src in srcs.split(";"):
                    must_label += [(name, c) for c in threaded_cases(src)]
                if not where:
                    problems.append(f"{name} is marked THREADS but none of its sources starts a thread")
            elif where:
                problems.append(f"{name} starts threads ({where}) but is not marked THREADS "
                                "(mapfs_test/api_test/fs_test option): TSan would never run it")

    out = subprocess.run([ctest, "--test-dir", build, "-N", "--show-only=json-v1"],
                         check=True, capture_output=True, text=True).stdout
    labelled = 0
    for t in json.loads(out)["tests"]:
        name = t["name"]
        cmd = t.get("command") or [""]
        labels = []
        for p in t.get("properties", []):
            if p["name"] == "LABELS":
                labels = p["value"]
        has = "threads" in labels
        labelled += has
        binary = binaries.get(cmd[0])
        if binary and not has:
            # A case that starts a thread in its own body, left out by CASES.
            for b, case in must_label:
                if b == binary[0] and re.search(r"(^|[./])" + re.escape(case) + r"(/|$|\s)", name):
                    problems.append(f"{name} starts a thread ({case}) but lacks label threads: "
                                    f"widen THREADS_CASES of {b}")
        if name.endswith("_NOT_BUILT"):
            problems.append(f"{name}: this check needs every test binary built")
        elif binary and binary[1] and re.search(binary[1], name):
            if not has:
                problems.append(f"{name} runs {binary[0]} (marked THREADS) but lacks label threads")
        elif has:
            problems.append(f"{name} has label threads but runs no binary marked THREADS "
                            "(target threads_tests would not build what it needs)")

    for p in problems:
        print("FAIL:", p)
    print(f"{marked} binaries marked THREADS, {labelled} tests labelled threads")
    if marked == 0 or labelled == 0:
        print("FAIL: nothing labelled threads")
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
