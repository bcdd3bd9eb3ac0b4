"""python -m steptrace COMMAND: the package's commands.

    python -m steptrace report steps-*.jsonl [-o report.html] [...]   the HTML report (= steptrace-report)
    python -m steptrace ctl capture --steps N [...]                     captures asked of a running job (= steptrace-ctl)
    python -m steptrace --help                                          this text
"""
import sys

USAGE = """usage: python -m steptrace COMMAND [ARGS]

commands:
  report LOG... [-o FILE] [--title TEXT] [--max-points N] [--jobs N] [--run ID|all]
                 one self-contained HTML page from steptrace's JSON lines (the same as
                 `steptrace-report`; `python -m steptrace report --help` describes each option)
  ctl list|capture|merge [...]
                 ask a running job for captures of its next steps and merge every rank's into one
                 timeline (the same as `steptrace-ctl`; `python -m steptrace ctl --help`)
"""


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0
    command, rest = argv[0], argv[1:]
    if command == "report":
        from .report import main as report_main
        return report_main(rest)
    if command == "ctl":
        from .ctl import main as ctl_main
        return ctl_main(rest)
    print(f"python -m steptrace: unknown command {command!r}\n" + USAGE, file=sys.stderr, end="")
    return 2


if __name__ == "__main__":
    sys.exit(main())
