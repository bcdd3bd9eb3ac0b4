#!/usr/bin/env bash
# Loads steptrace's JSON lines into SQLite (its JSON functions: sqlite3 >= 3.38) for ad-hoc queries:
#   examples/logs/load_sqlite.sh steps.db steps-*.jsonl
#   sqlite3 steps.db < examples/logs/queries.sql
# Table `lines` holds each line as text (and the file it came from); view `steps` the fields people
# ask about first, with nulls as SQL NULL; view `phases` one row per step and phase.
set -euo pipefail
db=${1:?usage: load_sqlite.sh DB LINES.jsonl...}; shift
here=$(cd "$(dirname "$0")" && pwd)
sqlite3 "$db" < "$here/schema.sql"
for f in "$@"; do
  # ascii mode: no quoting rules, one record per newline, the unit separator (never in a line) between fields.
  sqlite3 "$db" ".mode ascii" ".separator \"\\037\" \"\\n\"" "CREATE TEMP TABLE raw(line TEXT)" ".import '$f' raw" \
    "INSERT INTO lines(file, line) SELECT '$(basename "$f")', line FROM raw WHERE json_valid(line)"
done
sqlite3 "$db" "SELECT 'steptrace: ' || count(*) || ' lines in $db' FROM lines"
