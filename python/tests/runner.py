"""The Python tests' runner: every test_* function of a module, in name order, each reported PASS or
FAIL; a failure does not stop the others. `after_each` runs after every test, passed or not."""


def run_tests(namespace, label, after_each=None):
    tests = sorted((n, f) for n, f in namespace.items() if n.startswith("test_") and callable(f))
    failed = 0
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
    print(f"{label}: {len(tests) - failed}/{len(tests)} passed")
    return 1 if failed else 0
