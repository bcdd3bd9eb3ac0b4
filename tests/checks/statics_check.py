#!/usr/bin/env python3
"""The statics rule of docs/architecture.md ("Statics: never destroyed"), checked on the source.

    tests/checks/statics_check.py         exit 1 naming every static that breaks it

Code reachable from the exit hook, a signal handler, a fork handler or the background thread's last
flush runs after static destructors may have run (std::atexit hooks run interleaved with them, in
reverse order of registration; a static first made after the hook was registered is destroyed before
it). So every static variable of the library (function-local, class or namespace scope) is either
trivially destructible (an atomic, a pointer, a number, a plain array of them) or made with `new` and
never deleted. A static of any other type fails this check; one known to be trivial is listed below by
its type. Thread-local variables are not statics (destroyed when their thread ends) and are not checked.
Not seen: a declaration split over lines, or initialised with parentheses (`static T t(...)`, which reads
as a function's declaration); the rule in docs/architecture.md holds for those too.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIRS = ["include/steptrace", "src", "python/src"]

# A static variable's declaration: `static [const] TYPE NAME [\[N\]] (= | { | ; | [)`. A function (its name
# followed by `(`) does not match.
DECL = re.compile(r"^\s*(?:\[\[\w+\]\]\s*)?(?:inline\s+)?static\s+(?!constexpr\b|thread_local\b)(?P<type>[\w:<>,\s\*&]+?)\s*\b(?P<name>\w+)\s*"
                  r"(?P<array>\[[^\]]*\])?\s*(?:=|\{|;)")
# Namespace-scope variables of a type with a destructor: `inline [const] std::string x ...`.
NS_DECL = re.compile(r"^(?:inline\s+)?(?:const\s+)?std::(?:string|vector|map|set|unordered_map|unordered_set|deque|"
                     r"shared_ptr|unique_ptr|function)\b[^(]*\s\w+\s*(?:=|\{|;)")
# Types with no destructor to run (all trivially destructible).
TRIVIAL = re.compile(r"^(?:const\s+)?(?:(?:unsigned\s+)?(?:char|int|long|bool|double|float)|u?int\d+_t|std::size_t|"
                     r"(?:::)?std::atomic<.*>|std::array<std::atomic<.*>,\s*\w+>|nvtx\w+Handle_t|"
                     r"std::pair<uint64_t,\s*const char\*>|"
                     r"ThreadSlot|EndDeferralSlot)$")


def problems():
    out = []
    for d in DIRS:
        for directory, _, files in os.walk(os.path.join(ROOT, d)):
            for name in sorted(files):
                if not name.endswith((".hpp", ".cpp", ".h")):
                    continue
                path = os.path.join(directory, name)
                rel = os.path.relpath(path, ROOT)
                with open(path, encoding="utf-8") as f:
                    for n, line in enumerate(f, 1):
                        code = line.split("//")[0]
                        m = DECL.match(code)
                        if m:
                            t = " ".join(m.group("type").split())
                            # A pointer (the type ends in `*`, `* const`), not a container of pointers.
                            if re.search(r"\*\s*(const)?$", t) or TRIVIAL.match(t):
                                continue
                            out.append(f"{rel}:{n}: static `{t} {m.group('name')}` has a destructor: make it "
                                       f"`static const {t}* {m.group('name')} = new {t}(...)` (never destroyed)")
                        elif NS_DECL.match(code):
                            out.append(f"{rel}:{n}: a namespace-scope variable with a destructor: {code.strip()}")
    return out


def main():
    found = problems()
    for p in found:
        print("statics_check:", p)
    print("statics_check:", f"FAILED ({len(found)})" if found else "passed")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
