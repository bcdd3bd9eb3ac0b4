"""The Python tests' runner: every test_* function of a module, in name order, each reported PASS or
FAIL; a failure does not stop the others. `after_each` runs after every test, passed or not. Temporary
files (tempfile's, the child processes' through TMPDIR) go under one folder of the run, removed at the end when every test passed, else kept
and named for a look. PYTESTS_ONLY (comma-separated parts of names) runs only the tests whose names hold
one, and says so."""
import os
import shutil
import tempfile


def run_tests(namespace, label, after_each=None):
    tests = sorted((n, f) for n, f in namespace.items() if n.startswith("test_") and callable(f))
    only = [part for part in os.environ.get("PYTESTS_ONLY", "").split(",") if part]
    if only:
        everything = len(tests)
        tests = [(n, f) for n, f in tests if any(part in n for part in only)]
        print(f"{label}: PYTESTS_ONLY={','.join(only)}: {len(tests)} of {everything} tests selected")
    failed = 0
    parent = tempfile.mkdtemp(prefix=f"steptrace-{label}-")
    saved, tempfile.tempdir = tempfile.tempdir, parent
    saved_env, os.environ["TMPDIR"] = os.environ.get("TMPDIR"), parent  # child processes' too
    try:
        for name, fn in tests:
            try:
                fn()
                print(f"PASS {name}")
            except Exception as e:  # noqa: BLE001 - reported, and the next test runs
                failed += 1
                print(f"FAIL {name}: {type(e).__name__}: {e}")
            finally:
                if after_each is not None:
                    after_each()
    finally:
        tempfile.tempdir = saved
        if saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_env
        if failed:
            print(f"{label}: temporary files kept in {parent}")
        else:
            shutil.rmtree(parent, ignore_errors=True)
    print(f"{label}: {len(tests) - failed}/{len(tests)} passed")
    return 1 if failed else 0
